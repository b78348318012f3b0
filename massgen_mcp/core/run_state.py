"""A run's state as its files say it: the live status (:class:`StatusRecord`,
``status.json``), the outcome (:class:`ResultRecord`, ``result.json``), and a whole record
as read back (:class:`SessionRecord`, :class:`SessionSummary`).

Apart from the vocabulary and the event line (:mod:`massgen_mcp.core.records`) because
these are the records that change as the engine learns more: what an agent is doing, the
votes, the winner, the agreement. They are built from that vocabulary, never the other way
round. To change what a run's status says, change :class:`StatusRecord` here and the one
place in :mod:`massgen_mcp.consensus.engine` that fills it in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field, computed_field

from massgen_mcp.core.outcomes import (
    EXCERPT_CHARS,
    Agreement,
    ModelText,
    ReviewOutcome,
    RunnerUp,
    Stance,
    dissent_of,
    one_line,
)
from massgen_mcp.core.records import (
    AgentPhase,
    CallPurpose,
    Decision,
    Event,
    FinishReason,
    Phase,
    Record,
    RequestRecord,
    RunStatus,
    VersionedRecord,
)


class Usage(Record):
    """Model calls, tokens and cost, for one agent or the whole run."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None  # None: at least one call had an unknown price
    latency_s: float = 0.0
    evidence_calls: int = 0  # of ``calls``: tool rounds (the reply asked for evidence tools)
    evidence_tokens: int = 0  # of ``total_tokens``: spent in those tool rounds
    tool_calls: int = 0  # evidence tools run (read_file, mcp__..., ...)
    # Of ``calls``: stopped in flight because the decision came first, or a late first answer
    # joined while it was deciding without it (sent, so counted, but with no reply and no
    # tokens reported; a provider may still bill the prompt it had read).
    cancelled_calls: int = 0


class VoteRef(Record):
    """An agent's standing vote in the live status."""

    answer: str
    reason: ModelText


class Draft(Record):
    """What an agent is writing right now, while its model call streams. Lives in memory
    only (``get_status``, the live views): the record keeps answers, never drafts."""

    purpose: CallPurpose
    text: str  # the end of what is written so far (a few hundred characters), redacted
    chars: int  # written so far in all
    tokens: int  # so far, as the provider counts them (one per streamed chunk on most wires)
    first_token_s: float | None = None  # seconds from the call's start to its first text
    elapsed_s: float  # since the call started


class AgentStatus(Record):
    """One agent in the live status."""

    model: str
    label_letter: str
    phase: AgentPhase
    answers: int
    current_answer: str | None = None
    vote: VoteRef | None = None
    dropped_reason: str | None = None
    usage: Usage = Usage()
    activity: str | None = None  # the evidence tool it is using now, e.g. "read_file a.py"
    # Its model call's text so far, while it streams. Memory only: never serialised, so no
    # status.json, Redis status or resource read can carry a draft.
    draft: Draft | None = Field(None, exclude=True)


class AnswerRef(Record):
    """A current answer in the live status: its label and a preview, not the full text."""

    label: str
    agent_id: str
    chars: int
    preview: str


class StatusRecord(VersionedRecord):
    """The live state of a run (``status.json``, and what ``get_status`` reads)."""

    session_id: str
    status: RunStatus
    phase: Phase
    finish_reason: FinishReason | None = None
    question: str
    parent_session_id: str | None = None
    started_at: float
    updated_at: float
    elapsed_s: float = 0.0
    answers_version: int = 0
    revision: int = 0  # grows with every published status, so pollers can tell news
    agents: dict[str, AgentStatus]
    answers: list[AnswerRef] = []
    tally: dict[str, list[str]] = {}  # answer label -> agent ids voting for it
    usage: Usage = Usage()
    decided_by: Decision | None = None  # set once coordination has ended with a decision
    late: list[str] = []  # agents round one stopped waiting for (QUORUM), until they answer
    notes: list[str] = []  # the user's steering notes so far, each clipped to PREVIEW_CHARS
    # Bumped with every change of a draft (memory only, like the drafts): live views redraw
    # on it, pollers that wait for news (``revision``) do not wake for every token.
    drafts_revision: int = Field(0, exclude=True)
    pid: int | None = None  # the process running it (to tell orphaned runs)
    # The pool worker running it ("host#pid"), when a worker pool owns the run: its death is
    # handled by redelivery to another worker, not by the next server marking it interrupted.
    worker: str | None = None

    @property
    def done(self) -> bool:
        return self.status.done


class Winner(Record):
    label: str
    agent_id: str
    model: str


class VoteRecord(Record):
    voter: str
    answer: str
    reason: ModelText


class AnswerRecord(Record):
    """A final answer candidate in full."""

    label: str
    agent_id: str
    model: str
    revision: int
    content: str


class AgentResult(Record):
    model: str
    status: AgentPhase
    answers: int
    dropped_reason: str | None = None
    usage: Usage = Usage()


class ResultRecord(VersionedRecord):
    """The outcome of a run (``result.json``), written once when it ends."""

    session_id: str
    status: RunStatus
    finish_reason: FinishReason | None = None
    question: str
    parent_session_id: str | None = None
    final_answer: str | None = None
    winner: Winner | None = None
    presented_by: str | None = None  # None: the winning answer is returned verbatim
    tie_broken: bool = False
    decided_by: Decision | None = None  # how coordination ended, when it ended in agreement
    votes: list[VoteRecord] = []
    tally: dict[str, int] = {}
    answers: list[AnswerRecord] = []
    agents: dict[str, AgentResult] = {}
    usage: Usage = Usage()
    errors: list[str] = []
    started_at: float | None = None
    finished_at: float | None = None
    elapsed_s: float | None = None
    review: ReviewOutcome | None = None  # a review run's findings and verdict
    # How the run ended that the status does not say, e.g. depth: auto's cheap opening
    # settling it (the rest of the team was not called).
    notes: list[str] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def timed_out(self) -> bool:
        return self.status is RunStatus.TIMED_OUT

    @computed_field  # type: ignore[prop-decorator]
    @property
    def budget_exceeded(self) -> bool:
        return self.finish_reason is FinishReason.BUDGET_EXCEEDED

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tied(self) -> list[str]:
        """The labels that shared the most votes when the winner came by tie-break (the
        agent listed first in the team won it), else empty: "consensus" alone would hide
        that a three-way split was settled by config order, not by the votes."""
        if not self.tie_broken or self.winner is None:
            return []
        best = self.tally.get(self.winner.label, 0)
        return sorted(label for label, n in self.tally.items() if n == best)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def dropped(self) -> dict[str, str]:
        """Agent id -> why it was dropped, for every agent that did not last the run."""
        return {aid: agent.dropped_reason for aid, agent in self.agents.items()
                if agent.dropped_reason is not None}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def agreement(self) -> Agreement | None:
        """Who backs the winner (k of n live members), the strongest answer that lost with
        its voters' reasons, the dissent, and who was dropped or late; None without a
        winner. Computed from the recorded votes, so every face shows the same."""
        if self.winner is None:
            return None
        live = self.live_agents()
        models = {aid: agent.model for aid, agent in self.agents.items()}
        counted = [vote for vote in self.votes if vote.voter in live]
        winner = self.winner.label
        losing = {a.label: a for a in self.answers if a.label != winner}
        counts = {label: sum(1 for v in counted if v.answer == label) for label in losing}
        order = {aid: i for i, aid in enumerate(self.agents)}
        runner_up = None
        if losing:
            best = min(losing.values(), key=lambda a: (-counts[a.label],
                                                       order.get(a.agent_id, len(order))))
            runner_up = RunnerUp(
                label=best.label, agent_id=best.agent_id, model=best.model,
                excerpt=one_line(best.content, EXCERPT_CHARS), votes=counts[best.label],
                voters=[Stance(agent_id=v.voter, reason=one_line(v.reason or "no reason"))
                        for v in counted if v.answer == best.label])
        return Agreement(
            backing=sum(1 for v in counted if v.answer == winner), members=len(live),
            runner_up=runner_up, dissent=dissent_of(live, counted, {winner}, models),
            dropped=[aid for aid, agent in self.agents.items()
                     if agent.dropped_reason is not None],
            late=[aid for aid in live if self.agents[aid].answers == 0])

    def live_agents(self) -> list[str]:
        """The agents that lasted the run and took part in it: not dropped, and not held in
        reserve by ``depth: auto`` (never called)."""
        return [aid for aid, agent in self.agents.items()
                if agent.dropped_reason is None and agent.status is not AgentPhase.RESERVE]


@dataclass(frozen=True)
class SessionRecord:
    """A whole session as read back from its folder: what the report and ``show`` render."""

    status: StatusRecord
    result: ResultRecord | None
    events: list[Event]
    answers: dict[str, str]  # label -> full text of every answer ever given
    events_skipped: int = 0  # earlier events not read: a record over the cap shows its last
    # What a review run was asked (its diff is the context): read only when the result holds
    # a review, for the report's findings on the diff; None otherwise.
    request: RequestRecord | None = None
    roles: dict[str, str] = field(default_factory=dict)  # agent id -> its role (config.json)


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    status: RunStatus
    question: str
    winner: str | None
    started_at: float | None
    elapsed_s: float | None
    parent_session_id: str | None
