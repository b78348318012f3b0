"""Usage accounting and the budget check: plain arithmetic over completed calls.

Kept apart from the engine so the rules are readable in one place and testable without a run:

* every call counts (answers, evaluations, corrective retries, the final presentation);
  a call a decision stopped in flight counts apart, as cancelled (it never replied);
* cost is the sum of known prices; once any call has an unknown price the *reported* cost is
  unknown (``None``), never a fake total, but the budget still counts what is known;
* the budget (``max_total_tokens``, ``max_cost_usd``) is checked after each call of a turn; the
  final presentation is never cut short by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.run_state import Usage
from massgen_mcp.providers.base import MAX_CALL_TOKENS, Completion


@dataclass
class UsageMeter:
    """Running totals for one agent or one run."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    known_cost_usd: float = 0.0
    cost_unknown: bool = False
    latency_s: float = 0.0
    evidence_calls: int = 0
    evidence_tokens: int = 0
    tool_calls: int = 0
    cancelled_calls: int = 0  # of ``calls``: stopped in flight by a decision (see Usage)

    def add(self, completion: Completion, *, evidence: bool = False) -> None:
        """Count one model call; ``evidence`` when it was a tool round, not a decision."""
        completion = sane(completion)
        if evidence:
            self.evidence_calls += 1
            self.evidence_tokens += completion.prompt_tokens + completion.completion_tokens
        self.calls += 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.latency_s += completion.latency_s
        if completion.cost_usd is None:
            self.cost_unknown = True
        else:
            self.known_cost_usd += completion.cost_usd

    def cancelled(self) -> None:
        """Count one call a decision stopped in flight: sent, so a call, but with no reply
        and no tokens reported."""
        self.calls += 1
        self.cancelled_calls += 1

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def record(self) -> Usage:
        return Usage(
            calls=self.calls, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens, total_tokens=self.total_tokens,
            cost_usd=None if self.cost_unknown else round(self.known_cost_usd, 6),
            latency_s=round(self.latency_s, 3), evidence_calls=self.evidence_calls,
            evidence_tokens=self.evidence_tokens, tool_calls=self.tool_calls,
            cancelled_calls=self.cancelled_calls,
        )


def sane(completion: Completion) -> Completion:
    """``completion`` with its usage as a budget can trust (a server reports it): a token
    count is a whole number from 0 to MAX_CALL_TOKENS (clamped: -10**12 would lift every
    budget, 4,300 digits would make the record unreadable; anything else counts 0), and a
    cost that is negative or not finite is unknown."""
    def count(n: object) -> int:
        return min(max(n, 0), MAX_CALL_TOKENS) if type(n) is int else 0
    cost = completion.cost_usd
    ok = isinstance(cost, int | float) and math.isfinite(cost) and cost >= 0
    return replace(completion, prompt_tokens=count(completion.prompt_tokens),
                   completion_tokens=count(completion.completion_tokens),
                   cost_usd=cost if ok else None)


class BudgetExceeded(Exception):
    """The run spent its ``max_total_tokens`` or ``max_cost_usd``; ``what`` says which."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def check_budget(total: UsageMeter, options: RunOptions) -> None:
    """Raise :class:`BudgetExceeded` once the run's totals reach a limit."""
    limit_tokens = options.max_total_tokens
    if limit_tokens is not None and total.total_tokens >= limit_tokens:
        raise BudgetExceeded(f"max_total_tokens {limit_tokens} reached "
                             f"({total.total_tokens} used)")
    limit_cost = options.max_cost_usd
    if limit_cost is not None and total.known_cost_usd >= limit_cost:
        raise BudgetExceeded(
            f"max_cost_usd {limit_cost:g} reached (${total.known_cost_usd:.4f} spent)")
