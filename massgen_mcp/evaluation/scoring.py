"""What one finished run says about each method, read from its record.

A consensus run yields three methods at once, because the protocol keeps first drafts
independent (no agent sees a peer's answer before it has written its own):

* **alone**: each agent's first draft is what that model answers on its own; its cost is the
  agent's calls up to that draft, its time the moment the draft arrived;
* **majority**: the most common normalised first-draft answer (ties: the earliest draft), at the
  cost of every first-round call;
* **consensus**: the run's final answer, at the whole run's cost (its calls include the ones a
  decision cut off in flight: they were sent, and a provider may bill a prompt it had read).

A self-consistency run (:meth:`ConsensusService.sample_member`: k copies of one agent) is read
the same way: its k first drafts are k samples of that agent alone, their majority its answer,
their calls its cost. So there is no second implementation of anything: the engine runs, the
record is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from massgen_mcp.core.records import CallPurpose, Event, EventType
from massgen_mcp.evaluation.answers import is_correct, normalise
from massgen_mcp.evaluation.records import ArmRun, Method
from massgen_mcp.evaluation.stats import majority
from massgen_mcp.service import ConsensusService


@dataclass(frozen=True)
class Drafts:
    """Every agent's first draft in one run, and the calls each made up to it."""

    alone: dict[str, Method]
    order: list[str]  # agent ids in the order their drafts arrived
    calls: list[Event]  # every agent's calls up to its first draft


async def first_drafts(service: ConsensusService, session_id: str, expected: str,
                       pattern: re.Pattern[str] | None) -> Drafts:
    events = service.events(session_id)
    result = await service.result(session_id)
    first: dict[str, Event] = {}
    for event in events:
        if event.type is EventType.ANSWER and event.agent_id and event.agent_id not in first:
            first[event.agent_id] = event
    alone: dict[str, Method] = {}
    round_one: list[Event] = []
    for agent_id in result.agents:
        draft = first.get(agent_id)
        text = service.answer(session_id, draft.label) if draft and draft.label else None
        calls = [e for e in events if e.type is EventType.CALL and e.agent_id == agent_id
                 and e.purpose in (CallPurpose.ANSWER, CallPurpose.EVIDENCE)
                 and (draft is None or e.seq < draft.seq)]
        round_one += calls
        alone[agent_id] = Method(answer=text, correct=is_correct(text, expected, pattern),
                                 **cost(calls),
                                 seconds=round((draft.t or 0.0) if draft else 0.0, 3))
    order = sorted(first, key=lambda a: first[a].seq)
    return Drafts(alone, order, round_one)


def vote(drafts: Drafts, expected: str, pattern: re.Pattern[str] | None) -> Method:
    """The majority of the drafts' normalised answers (ties: the earliest draft), at the
    cost of every call up to the drafts, in the time of the last draft."""
    texts = [drafts.alone[a].answer for a in drafts.order]
    _, index = majority([normalise(t, expected, pattern) for t in texts])
    text = texts[index] if index >= 0 else None
    return Method(answer=text, correct=is_correct(text, expected, pattern), **cost(drafts.calls),
                  seconds=max((m.seconds for m in drafts.alone.values()), default=0.0))


async def score_run(service: ConsensusService, session_id: str, expected: str,
                    pattern: re.Pattern[str] | None = None) -> ArmRun:
    """The three methods' results for one finished consensus run."""
    result = await service.result(session_id)
    drafts = await first_drafts(service, session_id, expected, pattern)
    usage = result.usage
    consensus = Method(answer=result.final_answer,
                       correct=is_correct(result.final_answer, expected, pattern),
                       calls=usage.calls, tokens=usage.total_tokens, cost_usd=usage.cost_usd,
                       seconds=round(result.elapsed_s or 0.0, 3))
    return ArmRun(session_id=session_id, status=result.status,
                  models={a: r.model for a, r in result.agents.items()},
                  alone=drafts.alone, majority=vote(drafts, expected, pattern),
                  consensus=consensus)


def cost(calls: list[Event]) -> dict[str, Any]:
    costs = [e.cost_usd for e in calls]
    return {"calls": len(calls),
            "tokens": sum((e.prompt_tokens or 0) + (e.completion_tokens or 0) for e in calls),
            "cost_usd": None if any(c is None for c in costs) else round(sum(
                c for c in costs if c is not None), 6)}
