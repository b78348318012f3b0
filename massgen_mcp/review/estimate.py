"""What a review will cost, said before it runs: the fewest calls a review can take (each
member answers once and votes once), the prompt tokens they send, and their price from
litellm's table where it knows the models.

A diff is most of a review's prompt and every call carries it once, so the estimate is the
floor, not a guess at the total: members that revise take more turns (``--max-cost`` stops a
run that passes its budget, and the outcome line reports what was spent). A budget below the
floor is refused before anything runs: the review would stop before its first vote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from massgen_mcp.providers.model_map import cost_of

CHARS_PER_TOKEN = 4  # as the providers reckon a prompt whose server sends no usage
PROMPT_OVERHEAD_CHARS = 2_500  # the team's rules, the turn's instructions, the tools
REVIEW_CHARS = 1_500  # a member's review (its findings as JSON), as a peer reads it
REPLY_TOKENS = 500


@dataclass(frozen=True)
class Estimate:
    calls: int
    prompt_tokens: int
    cost_usd: float | None  # None: a model the price table does not know (a local server)

    parts: int = 1  # review runs: a diff over the team's room is reviewed in parts

    def words(self) -> str:
        cost = "price unknown" if self.cost_usd is None else f"about ${self.cost_usd:.4f}"
        split = f" in {self.parts} parts" if self.parts > 1 else ""
        return (f"at least {self.calls} calls{split}, ~{self.prompt_tokens:,} prompt tokens, "
                f"{cost} (more if members revise)")

    def __add__(self, other: Estimate) -> Estimate:
        """Two parts' floors together (a part's unknown price makes the total unknown)."""
        cost = (None if self.cost_usd is None or other.cost_usd is None
                else self.cost_usd + other.cost_usd)
        return Estimate(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                        cost, self.parts + other.parts)


def call_chars(members: int, question: str, context: str) -> int:
    """The characters of a review's largest call: a member's vote, which reads the
    instructions, the diff and every member's review."""
    return len(question) + len(context) + PROMPT_OVERHEAD_CHARS + members * REVIEW_CHARS


def estimate(models: Sequence[str], question: str, context: str) -> Estimate:
    """The floor of a review by ``models`` of ``context`` (the diff) asked as ``question``:
    every member's first answer, then its vote on everyone's answers."""
    first = (len(question) + len(context) + PROMPT_OVERHEAD_CHARS) // CHARS_PER_TOKEN
    second = call_chars(len(models), question, context) // CHARS_PER_TOKEN
    total = 0.0
    known = True
    for model in models:
        price = (None if model.startswith("cli/")
                 else cost_of(model, first + second, 2 * REPLY_TOKENS))
        if price is None:
            known = False
        else:
            total += price
    return Estimate(calls=2 * len(models), prompt_tokens=len(models) * (first + second),
                    cost_usd=total if known else None)
