"""A recorded run's progress, replayed into a new one.

A run continues from its record (``resume_session``, or a pool worker taking over from one
that died) without making again any call whose outcome is recorded: the request's
:class:`~massgen_mcp.consensus.run.Prior` holds the answers, standing votes, restarts, the
user's steering notes and paid-for calls read from the recorded events, and
:func:`progress_of` replays them into a fresh :class:`~massgen_mcp.consensus.run.Progress`.
Both the engine and the builders of an unstarted run's records (:mod:`.snapshot`) start from
there, so a record reads the same whoever writes it.
"""

from __future__ import annotations

import contextlib

from massgen_mcp.consensus.accounting import UsageMeter
from massgen_mcp.consensus.run import (
    PriorAnswer,
    PriorEscalation,
    PriorNote,
    PriorQuorum,
    PriorRestart,
    PriorVote,
    Progress,
    RunRequest,
)
from massgen_mcp.consensus.state import Coordination
from massgen_mcp.core.records import CallPurpose, EventType
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.base import Completion
from massgen_mcp.providers.model_map import cost_of


def opening_pair(team: TeamConfig) -> list[str]:
    """depth: auto's opening: the two cheapest agents by litellm's prices when every agent
    has one, else the first two in team order (an unknown price may be a free local model or
    a dear one); none for a team of two or fewer, or depth: full. A required agent always
    opens, since the decision waits for it anyway."""
    agents = team.agents
    if team.options.depth != "auto" or len(agents) <= 2:
        return []
    prices = {a.id: None if a.cli else cost_of(a.model, 1_000, 1_000) for a in agents}
    order = [a.id for a in agents]
    if all(p is not None for p in prices.values()):
        place = {aid: i for i, aid in enumerate(order)}
        order.sort(key=lambda aid: (prices[aid] or 0.0, place[aid]))
    required = [aid for aid in order if aid in team.required()]
    return (required + [aid for aid in order if aid not in required])[:2]


def progress_of(request: RunRequest) -> Progress:
    """A run's starting progress: nothing for a new run, the recorded steps replayed for one
    that continues (a step naming an agent the team no longer has is left out)."""
    agents = request.agents
    progress = Progress(
        Coordination(list(agents), max_answers=request.team.options.max_answers_per_agent,
                     seed=request.session_id, decide=request.team.options.decide,
                     self_vote=request.team.options.self_vote,
                     required=request.team.required(), opening=opening_pair(request.team)),
        {aid: UsageMeter() for aid in agents})
    if request.prior is None:
        return progress
    coord = progress.coord
    for step in request.prior.steps:
        if isinstance(step, PriorAnswer) and step.agent_id in agents:
            coord.add_answer(step.agent_id, step.content)
        elif isinstance(step, PriorVote) and step.agent_id in agents:
            with contextlib.suppress(ValueError):  # a record edited by hand
                coord.add_vote(step.agent_id, step.label, step.reason, coord.version)
        elif isinstance(step, PriorQuorum):
            coord.open_review()
        elif isinstance(step, PriorEscalation):
            coord.escalate()
        elif isinstance(step, PriorNote):
            coord.steer(step.text)
        elif isinstance(step, PriorRestart):
            coord.restart()
            progress.restarts += 1
            progress.feedback = step.feedback
    for call in request.prior.calls:
        if call.type is not EventType.CALL:
            if call.count:  # 0 or 1: a turn has at most one call in flight
                progress.count_cancelled(call.agent_id)
            continue
        progress.count(call.agent_id, Completion(
            None, prompt_tokens=call.prompt_tokens or 0,
            completion_tokens=call.completion_tokens or 0, cost_usd=call.cost_usd,
            latency_s=call.latency_s or 0.0), evidence=call.purpose is CallPurpose.EVIDENCE)
    return progress
