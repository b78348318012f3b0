"""What a run is: what it is asked (:class:`RunRequest`, fresh or resumed), what its record
had settled when it resumes (:class:`Prior`, read from the recorded events), and what it has
settled so far (:class:`Progress`). The engine takes a request and keeps its progress;
:mod:`.replay` turns a request and its prior into a run's first progress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from massgen_mcp.consensus.accounting import UsageMeter
from massgen_mcp.consensus.state import Coordination
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.outcomes import ReviewTarget
from massgen_mcp.core.records import (
    Event,
    EventType,
    RequestRecord,
)
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.base import Completion


@dataclass(frozen=True)
class PriorAnswer:
    agent_id: str
    content: str


@dataclass(frozen=True)
class PriorVote:
    agent_id: str
    label: str
    reason: str


@dataclass(frozen=True)
class PriorRestart:
    feedback: str | None


@dataclass(frozen=True)
class PriorQuorum:
    """Review had opened before every agent answered (the agents then late still are)."""


@dataclass(frozen=True)
class PriorEscalation:
    """depth: auto's opening pair did not agree: the rest of the team was called in."""


@dataclass(frozen=True)
class PriorNote:
    """The user steered the run (its note is shown to every agent from then on)."""

    text: str


PriorStep = PriorAnswer | PriorVote | PriorRestart | PriorQuorum | PriorNote | PriorEscalation


@dataclass(frozen=True)
class Prior:
    """A recorded run's progress, replayed into the state machine when the run continues
    (``resume_session``, or a worker taking over from one that died), so that no call whose
    outcome is recorded is made again: answers, the votes still standing, restarts, and the
    calls already paid for (usage and budget carry on)."""

    steps: tuple[PriorStep, ...]
    calls: tuple[Event, ...]  # CALL and TURN_CANCELLED events, for usage
    event_count: int  # event numbering continues after the recorded events

    @classmethod
    def from_events(cls, events: list[Event], answer: Callable[[str], str]) -> Prior:
        """Read the progress out of a record's events; ``answer`` gives an answer's text by
        label. Accepted answers and votes replay in recorded order, so labels, versions and
        the votes a later answer invalidated come out as they were."""
        steps: list[PriorStep] = []
        for e in events:
            if e.type is EventType.ANSWER and e.agent_id and e.label:
                steps.append(PriorAnswer(e.agent_id, answer(e.label).rstrip("\n")))
            elif e.type is EventType.VOTE and e.agent_id and e.label:
                steps.append(PriorVote(e.agent_id, e.label, e.reason or ""))
            elif e.type is EventType.RESTART:
                steps.append(PriorRestart(e.detail))
            elif e.type is EventType.QUORUM:
                steps.append(PriorQuorum())
            elif e.type is EventType.ESCALATED:
                steps.append(PriorEscalation())
            elif e.type is EventType.STEERED and e.detail:
                steps.append(PriorNote(e.detail))
        return cls(tuple(steps), tuple(e for e in events if e.type in _PAID), len(events))


# The events that carry usage: calls, and calls stopped in flight (by the decision, or to
# restart a turn on a late first answer).
_PAID = (EventType.CALL, EventType.TURN_CANCELLED, EventType.TURN_RESTARTED)


@dataclass(frozen=True)
class RunRequest:
    """Everything needed to run (or re-run) a session."""

    session_id: str
    question: str
    team: TeamConfig
    context: str | None = None
    parent_session_id: str | None = None
    # Resuming a run that stopped part-way: what its record had settled (see :class:`Prior`).
    prior: Prior | None = None
    workspace: Path | None = None  # the root the evidence tools read (when they are on)
    log_path: Path | None = None  # where coding-agent CLIs' stderr goes (the session's cli.log)
    review: ReviewTarget | None = None  # a review run: its answers are reviews

    @classmethod
    def from_record(cls, session_id: str, record: RequestRecord, team: TeamConfig,
                    prior: Prior | None = None) -> RunRequest:
        """The run a session's request record asks for, with the progress ``prior`` holds:
        one build for a fresh run (the record just written) and a resumed one (read back)."""
        return cls(session_id, record.question, team, record.context,
                   record.parent_session_id, prior=prior,
                   workspace=Path(record.workspace) if record.workspace else None,
                   review=record.review)

    @property
    def agents(self) -> dict[str, AgentSpec]:
        """The team's agents by id, in team order."""
        return {a.id: a for a in self.team.agents}


@dataclass
class Progress:
    """What a run has settled so far: the protocol state, usage per agent and in all, and
    the final answer's checks that sent it back. Records are projected from it."""

    coord: Coordination
    usage: dict[str, UsageMeter]
    total: UsageMeter = field(default_factory=UsageMeter)
    restarts: int = 0  # coordination rounds started again by the final answer's check
    feedback: str | None = None  # the check's feedback, shown to every agent

    def count(self, agent_id: str | None, completion: Completion, *,
              evidence: bool = False) -> None:
        """Add one call's usage to its agent's meter and the run's."""
        if agent_id in self.usage:
            self.usage[agent_id].add(completion, evidence=evidence)
        self.total.add(completion, evidence=evidence)

    def count_cancelled(self, agent_id: str | None) -> None:
        """Count one model call a decision stopped in flight."""
        if agent_id in self.usage:
            self.usage[agent_id].cancelled()
        self.total.cancelled()
