"""The vocabulary of a run's records: the one definition of every word in ``status.json``,
``result.json``, ``request.json`` and ``events.jsonl`` (phases, statuses, reasons, event
types), the base every record builds on, the event line (:class:`Event`) and the request
(:class:`RequestRecord`).

The engine builds these models, the session store writes and reads them, and every reader (the
service, the CLI, the MCP surface, the HTML report) uses their attributes. The records that
change as a run goes (its live status, its result, a whole record read back) are
:mod:`massgen_mcp.core.run_state`, built from these words.

Field names are the JSON keys on disk. Records written before ``schema_version`` existed have
the same layout and load as version 1; a record from a newer release is refused with a clear
message instead of being misread. Unknown keys are ignored, so a newer *minor* addition never
breaks an older reader.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from massgen_mcp.core.errors import ErrorKind
from massgen_mcp.core.outcomes import ReviewTarget

SCHEMA_VERSION = 1
# How much of an answer the live status, the events and the listings carry.
PREVIEW_CHARS = 200


def clip(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters (plus " …" when cut), and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit] + " …", True)


class AgentPhase(StrEnum):
    """What an agent is doing, as shown in status.json and get_status."""

    WAITING = "waiting"  # has answered round one, waiting for the others
    WORKING = "working"  # a model call is in flight
    ANSWERED = "answered"  # has a current answer but no vote yet
    VOTED = "voted"
    DROPPED = "dropped"
    # depth: auto held it back while the two cheapest members tried to agree alone; it is
    # called only if they do not (and never, when they do).
    RESERVE = "reserve"


# Where a run stands. Every status but running is final.
# (A comment, not a docstring: pydantic would copy a docstring into every tool schema.)
class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the process running it ended; resume_session continues it

    @property
    def done(self) -> bool:
        return self is not RunStatus.RUNNING


# What the run as a whole is doing.
class RunKind(StrEnum):
    """Who asked for a run: a person (or a host's model), or ``eval``, whose question-by-
    question runs and sampling runs would otherwise fill ``sessions`` and take ``latest``."""

    RUN = "run"
    EVAL = "eval"


class Phase(StrEnum):
    QUEUED = "queued"  # waiting for a worker of the pool (massgen-mcp worker) to take it
    ANSWERING = "answering"  # round one: independent answers
    VOTING = "voting"  # every live agent has answered; votes and new answers
    PRESENTING = "presenting"  # the winner writes the final answer
    CHECKING = "checking"  # the winner checks it against the question (restarts on)
    DONE = "done"


# Why a run ended.
class FinishReason(StrEnum):
    CONSENSUS = "consensus"
    ALL_AGENTS_FAILED = "all_agents_failed"
    # Every agent was dropped after answers existed: the best recorded answer is returned,
    # flagged as not agreed.
    AGENTS_DROPPED = "agents_dropped"
    TIMEOUT = "timeout"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"
    INTERRUPTED = "interrupted"
    RECORD_WRITE_FAILED = "record_write_failed"  # the disk refused the record (full, failing)


# Why coordination ended with an agreed answer (RunOptions.decide).
class Decision(StrEnum):
    ALL_VOTED = "all_voted"  # every live agent has voted (MassGen's rule, decide: all)
    MAJORITY = "majority"  # a strict majority of the live agents voted for one answer


# Why a model was called.
class CallPurpose(StrEnum):
    ANSWER = "answer"  # round one
    EVALUATE = "evaluate"  # later turns: vote or a new answer
    FINAL = "final"  # the winner's final presentation
    EVIDENCE = "evidence"  # a call that came back with evidence tool calls (read_file, ...)
    CHECK = "check"  # the winner checks the final answer (max_orchestration_restarts)


# Every kind of line in events.jsonl.
class EventType(StrEnum):
    STARTED = "started"
    RESUMED = "resumed"
    CALL = "call"
    RETRY = "retry"
    INVALID_ACTION = "invalid_action"
    ANSWER = "answer"
    VOTES_INVALIDATED = "votes_invalidated"
    VOTE = "vote"
    VOTE_DISCARDED = "vote_discarded"
    AGENT_DROPPED = "agent_dropped"
    CONSENSUS = "consensus"
    TIMEOUT = "timeout"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    FINAL_FALLBACK = "final_fallback"
    # The presenter answered with a new_answer action: its content became the final answer.
    FINAL_UNWRAPPED = "final_unwrapped"
    # final: speculative: the leading answer's author began the final answer before the
    # decision (reason: started), it became the final answer (used), or the lead changed and
    # it was stopped (discarded; count: model calls cut off, 0 or 1). label: the answer.
    FINAL_SPECULATED = "final_speculated"
    FINAL = "final"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"  # written by the next server when it finds the run orphaned
    REQUEUED = "requeued"  # a pool worker stopped and handed the run back to the queue
    CONTINUED = "continued"  # a follow-up session was started from this one
    TOOL_CALL = "tool_call"  # an agent used an evidence tool within its turn
    CHECK = "check"  # the final answer's check: reason accept|restart, detail the feedback
    RESTART = "restart"  # a new coordination round with the check's feedback (count: which)
    TOOLS_CUT = "tools_cut"  # MCP tools left out by the size caps (detail: which, why)
    # Round one ended before every agent answered (late: the agents still writing; after_s:
    # when; detail: the rule). Their answers still join when they arrive.
    QUORUM = "quorum"
    # depth: auto: the opening pair did not agree in round one; the rest of the team starts
    # (detail: why; late: the agents called in).
    ESCALATED = "escalated"
    # A decision came while an agent's turn was in flight: the turn was stopped (purpose;
    # count: model calls cut off mid-flight, 0 or 1; reason: the decision).
    TURN_CANCELLED = "turn_cancelled"
    # A late agent's first answer joined while an agent's review turn was deciding without
    # it: the turn was stopped, to start again on the current answers (purpose; count: model
    # calls cut off mid-flight, 0 or 1; by: the labels its view lacked).
    TURN_RESTARTED = "turn_restarted"
    # The user sent the team a note mid-run (detail: the note; count: votes it cleared).
    STEERED = "steered"


class Record(BaseModel):
    """Base of every record: tolerant of keys a newer release added."""

    model_config = ConfigDict(extra="ignore")


class VersionedRecord(Record):
    """A top-level record file; refuses files written by a newer, incompatible release."""

    schema_version: int = SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value > SCHEMA_VERSION:
            raise ValueError(f"written by a newer massgen-mcp (schema {value}; this release "
                             f"reads up to {SCHEMA_VERSION}); upgrade massgen-mcp to read it")
        return value


class RequestRecord(VersionedRecord):
    """What a run was asked (``request.json``): enough to resume or continue it."""

    question: str
    context: str | None = None
    parent_session_id: str | None = None
    workspace: str | None = None  # the root the workspace tools read, when they are on
    # What the user was told about the team: config keys ignored, or why this default team.
    notes: list[str] = []
    kind: RunKind = RunKind.RUN  # eval's runs are left out of ``sessions`` and ``latest``
    # A team with inline api_keys (never recorded: config.json says "***"): the config file
    # it came from and that file's SHA-256 then, so continue and resume read the keys from
    # it again while it is unchanged (ConsensusService.recorded_team).
    config_file: ConfigFile | None = None
    review: ReviewTarget | None = None  # a review run: what it reviews


class ConfigFile(Record):
    """A config file as a run read it: where, and the SHA-256 of its bytes."""

    path: str
    sha256: str


class Event(Record):
    """One line of ``events.jsonl``. Which fields are set depends on ``type``; only the fields
    given when the event was made are written, so each line stays short."""

    seq: int
    t: float | None = None  # seconds since the run (or its resumption) started
    ts: float  # wall clock
    type: EventType
    agent_id: str | None = None
    label: str | None = None
    labels: list[str] | None = None
    reason: str | None = None
    purpose: CallPurpose | None = None
    attempt: int | None = None
    delay_s: float | None = None
    error: str | None = None
    kind: ErrorKind | None = None  # retry: what the call met
    status_code: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float | None = None
    problem: str | None = None
    revision: int | None = None
    chars: int | None = None
    preview: str | None = None
    count: int | None = None
    by: str | None = None
    tally: dict[str, int] | None = None
    after_s: float | None = None
    detail: str | None = None
    presenter: str | None = None
    question: str | None = None
    agents: dict[str, str] | None = None
    roles: dict[str, str] | None = None  # started: agent id -> its role, where one is set
    parent_session_id: str | None = None
    child_session_id: str | None = None
    status: RunStatus | None = None
    finish_reason: FinishReason | None = None
    tool: str | None = None
    arguments: str | None = None  # the tool call's arguments, clipped
    late: list[str] | None = None  # quorum: the agents round one stopped waiting for
    first_token_s: float | None = None  # call: seconds to its first streamed text
    tokens_per_s: float | None = None  # call: completion tokens per second after the first

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, value: object) -> ErrorKind | None:
        return ErrorKind.read(value)

    @property
    def owner(self) -> str | None:
        """The agent the event is about (the presenter, for ``final``)."""
        return self.presenter if self.type is EventType.FINAL else self.agent_id

    def to_json(self) -> str:
        return self.model_dump_json(exclude_unset=True)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


