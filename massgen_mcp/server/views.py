"""What the MCP tools return: the records, shaped and worded for the model that called.

Each tool returns one of these pydantic models as structuredContent (and as text); tools/list
carries no output schemas (see ``create_server``). Answers and vote reasons are clipped in
summaries so a ``get_result`` stays well under 8k tokens whatever the team's size; the full text
is always one ``detail="full"`` call or one resource read away (result.json, the report).
Every sentence telling the caller what to do next lives here.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, Field

from massgen_mcp.core.outcomes import Agreement, ReviewOutcome
from massgen_mcp.core.records import PREVIEW_CHARS, FinishReason, Phase, RunStatus, clip
from massgen_mcp.core.run_state import (
    ResultRecord,
    SessionSummary,
    StatusRecord,
    Usage,
    VoteRecord,
    Winner,
)

SUMMARY_ANSWER_CHARS = 600
SUMMARY_FINAL_CHARS = 16_000
# A vote's reason is a sentence or two; a model that writes an essay, times eight agents,
# would crowd the final answer out of the caller's context.
SUMMARY_REASON_CHARS = 200
SUMMARY_REASONS = 5  # votes whose reason a summary shows; the others keep voter and answer
Detail = Literal["summary", "full"]
# What a get_status wait returns on: the run's end (one call per wait_s for a host that only
# wants the answer), or its next change (live views that redraw on every step).
Until = Literal["done", "change"]
# The wait_s to tell a polling host: the default cap (MASSGEN_MCP_MAX_WAIT_S), under the ~60 s
# that Codex and Claude Desktop allow a tool call.
POLL_WAIT_S = 50


def report_uri(session_id: str) -> str:
    return f"massgen://sessions/{session_id}/report"


class UsageView(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    evidence_calls: int = Field(0, description="of calls: tool rounds, not decisions")
    tool_calls: int = 0

    @classmethod
    def of(cls, usage: Usage) -> UsageView:
        return cls(calls=usage.calls, prompt_tokens=usage.prompt_tokens,
                   completion_tokens=usage.completion_tokens, total_tokens=usage.total_tokens,
                   cost_usd=usage.cost_usd, evidence_calls=usage.evidence_calls,
                   tool_calls=usage.tool_calls)


class DraftView(BaseModel):
    text: str
    tokens: int
    first_token_s: float | None = None


class AgentView(BaseModel):
    agent_id: str
    model: str
    phase: str
    answers: int
    current_answer: str | None = None
    voted_for: str | None = None
    dropped_reason: str | None = None
    activity: str | None = Field(None, description="the tool it is using, e.g. 'read_file a.py'")
    draft: DraftView | None = Field(None, description="what it is writing now (the end)")


class AnswerView(BaseModel):
    label: str
    agent_id: str
    text: str
    truncated: bool = False


class StatusView(BaseModel):
    session_id: str
    status: RunStatus
    done: bool
    phase: Phase
    elapsed_s: float
    question: str
    agents: list[AgentView]
    answers: list[AnswerView]
    tally: dict[str, int]
    usage: UsageView
    finish_reason: FinishReason | None = None
    revision: int = Field(0, description="grows with every change; pass it back as "
                                         "after_revision so no update is missed")
    notes: list[str] = []
    next_step: str


class VoteView(BaseModel):
    voter: str
    answer: str
    reason: str = Field(description="clipped in summaries; empty past the first few votes")
    reason_truncated: bool = False


class ResultView(BaseModel):
    session_id: str
    status: RunStatus
    finish_reason: FinishReason | None
    final_answer: str | None
    final_answer_truncated: bool = False
    winner: Winner | None
    tie_broken: bool
    tied: list[str] = Field(default_factory=list)  # labels that split the top votes
    dropped: dict[str, str] = Field(default_factory=dict)  # agent id -> why it was dropped
    timed_out: bool
    budget_exceeded: bool
    votes: list[VoteView]
    tally: dict[str, int]
    answers: list[AnswerView]
    usage: UsageView
    errors: list[str]
    elapsed_s: float | None
    record_dir: str
    report: str = Field(description="resource URI of the HTML report (also report.html in "
                                    "record_dir)")
    parent_session_id: str | None = None
    review: ReviewOutcome | None = Field(None, description=(
        "a review's findings by tier, verdict and dissent (review_changes)"))
    agreement: Agreement | None = Field(None, description=(
        "k of n live members back the winner, the strongest losing answer, the dissent"))
    notes: list[str] = []


class RunHandle(BaseModel):
    session_id: str
    status: RunStatus
    record_dir: str
    message: str
    result: ResultView | None = None


class ReviewHandle(RunHandle):
    """review_changes's reply: a run's handle, and what the caller is told about the
    change (files left out of the diff, workspace tools withheld)."""

    notes: list[str] = []


class SessionItem(BaseModel):
    session_id: str
    status: RunStatus
    question: str
    winner: str | None
    started_at: float | None
    parent_session_id: str | None = None


class SessionPage(BaseModel):
    sessions: list[SessionItem]
    next_cursor: str | None = Field(None, description="pass as cursor for the next page")


class CancelView(BaseModel):
    session_id: str
    status: RunStatus
    message: str


def elapsed_now(status: StatusRecord) -> float:
    """How long the run has gone on: the record's figure is as of its last change, which
    stands still while a slow call is in flight (a reader saw 39 s for a run 100 s old)."""
    if status.done:
        return status.elapsed_s
    return max(status.elapsed_s, time.time() - status.started_at)


def status_view(status: StatusRecord) -> StatusView:
    if status.status is RunStatus.INTERRUPTED:  # no result: get_result would send it back here
        next_step = (f"interrupted (the server stopped while it ran); call resume_session "
                     f"with wait_s={POLL_WAIT_S} to finish it from its recorded answers")
    elif status.done:
        next_step = f"finished ({status.status}); call get_result to read the answer"
    else:
        next_step = (f"still running; call get_status again with wait_s={POLL_WAIT_S}: it "
                     "returns when the run ends")
    return StatusView(
        session_id=status.session_id, status=status.status, done=status.done,
        phase=status.phase, elapsed_s=elapsed_now(status), question=status.question,
        agents=[AgentView(agent_id=aid, model=a.model, phase=a.phase, answers=a.answers,
                          current_answer=a.current_answer,
                          voted_for=a.vote.answer if a.vote else None,
                          dropped_reason=a.dropped_reason, activity=a.activity,
                          draft=None if a.draft is None else DraftView(
                              text=a.draft.text, tokens=a.draft.tokens,
                              first_token_s=a.draft.first_token_s))
                for aid, a in status.agents.items()],
        answers=[AnswerView(label=a.label, agent_id=a.agent_id, text=a.preview,
                            truncated=a.chars > len(a.preview))
                 for a in status.answers],
        tally={label: len(voters) for label, voters in status.tally.items()},
        usage=UsageView.of(status.usage), finish_reason=status.finish_reason,
        revision=status.revision, notes=status.notes, next_step=next_step,
    )


def result_view(result: ResultRecord, record_dir: str, detail: Detail = "summary"
                ) -> ResultView:
    full = detail == "full"
    final, final_cut = result.final_answer, False
    if final is not None and not full:
        final, final_cut = clip(final, SUMMARY_FINAL_CHARS)
    answers = []
    for a in result.answers:
        text, cut = (a.content, False) if full else clip(a.content, SUMMARY_ANSWER_CHARS)
        answers.append(AnswerView(label=a.label, agent_id=a.agent_id, text=text, truncated=cut))
    votes = ([VoteView(voter=v.voter, answer=v.answer, reason=v.reason) for v in result.votes]
             if full else summary_votes(result.votes))
    return ResultView(
        session_id=result.session_id, status=result.status,
        finish_reason=result.finish_reason, final_answer=final,
        final_answer_truncated=final_cut, winner=result.winner, tie_broken=result.tie_broken,
        tied=result.tied, dropped=result.dropped,
        timed_out=result.timed_out, budget_exceeded=result.budget_exceeded,
        votes=votes, tally=result.tally, answers=answers,
        usage=UsageView.of(result.usage), errors=result.errors, elapsed_s=result.elapsed_s,
        record_dir=record_dir, report=report_uri(result.session_id),
        parent_session_id=result.parent_session_id, review=result.review,
        agreement=result.agreement if full else _short_agreement(result.agreement),
        notes=result.notes,
    )


def _short_agreement(agreement: Agreement | None) -> Agreement | None:
    """The agreement with its reasons clipped as the summary clips vote reasons
    (``detail="full"`` has them whole)."""
    if agreement is None:
        return None

    def short(reason: str) -> str:
        return clip(reason, SUMMARY_REASON_CHARS)[0]

    runner_up = agreement.runner_up
    if runner_up is not None:
        runner_up = runner_up.model_copy(update={
            "excerpt": short(runner_up.excerpt),
            "voters": [v.model_copy(update={"reason": short(v.reason)})
                       for v in runner_up.voters]})
    return agreement.model_copy(update={
        "runner_up": runner_up,
        "dissent": [d.model_copy(update={"reason": short(d.reason)})
                    for d in agreement.dissent]})


def summary_votes(votes: list[VoteRecord]) -> list[VoteView]:
    """Every vote (who voted for what), with the reasons of at most :data:`SUMMARY_REASONS`
    of them, each clipped: one per answer voted for comes first, so a dissent is never the
    reason left out."""
    first_for: dict[str, int] = {}
    for i, vote in enumerate(votes):
        first_for.setdefault(vote.answer, i)
    firsts = set(first_for.values())
    shown = set(sorted(range(len(votes)), key=lambda i: (i not in firsts, i))[:SUMMARY_REASONS])
    views = []
    for i, vote in enumerate(votes):
        reason, cut = clip(vote.reason, SUMMARY_REASON_CHARS) if i in shown else ("", True)
        views.append(VoteView(voter=vote.voter, answer=vote.answer, reason=reason,
                              reason_truncated=cut and bool(vote.reason)))
    return views


def session_page(found: list[SessionSummary], next_cursor: str | None) -> SessionPage:
    return SessionPage(sessions=[
        SessionItem(session_id=s.session_id, status=s.status,
                    question=clip(" ".join(s.question.split()), PREVIEW_CHARS)[0],
                    winner=s.winner, started_at=s.started_at,
                    parent_session_id=s.parent_session_id)
        for s in found
    ], next_cursor=next_cursor)


def cancel_view(session_id: str, status: RunStatus, stopped: bool) -> CancelView:
    message = ("cancelled; get_result shows what was recorded" if stopped
               else f"already {status}; nothing to cancel")
    return CancelView(session_id=session_id, status=status, message=message)


class SteerView(BaseModel):
    session_id: str
    votes_cleared: int
    message: str


def steer_view(session_id: str, cleared: int) -> SteerView:
    return SteerView(session_id=session_id, votes_cleared=cleared, message=(
        f"delivered: every agent sees the note from its next turn; {cleared} vote(s) cast "
        f"before it no longer count. Call get_status with wait_s={POLL_WAIT_S} until done"))


def progress_message(status: StatusRecord) -> str:
    """One line for a progress notification: the phase, answers so far, votes so far, and
    who is writing now ("agent_b is writing… 412 tokens")."""
    tally = ", ".join(f"{label}:{len(voters)}" for label, voters in status.tally.items() if voters)
    message = f"{status.phase}: {counted(len(status.answers), 'answer')}"
    writing = "; ".join(f"{aid} is writing… {counted(a.draft.tokens, 'token')}"
                        for aid, a in status.agents.items() if a.draft is not None)
    return message + (f", votes {tally}" if tally else "") + (f"; {writing}" if writing else "")


def counted(count: int, noun: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def progress_steps(status: StatusRecord) -> tuple[int, int]:
    """How far a run is, in steps of a plain consensus: each agent's first answer, each
    agent's vote, the final answer (a dropped agent's steps count as done). A run that
    revises answers or restarts takes more calls than this, never more steps."""
    agents = status.agents.values()
    answered = sum(1 for a in agents if a.answers or a.dropped_reason)
    voted = sum(1 for a in agents if a.vote is not None or a.dropped_reason)
    total = 2 * len(status.agents) + 1
    return (total if status.done else answered + voted), total


def not_finished_hint(interrupted: bool) -> str:
    """What a calling model is told to do when a run it asks about has no result yet: an
    interrupted run waits for nobody (a hint to poll it would send the model round in a
    circle between get_status and get_result)."""
    if interrupted:
        return f"call resume_session with wait_s={POLL_WAIT_S} to finish it"
    return f"call get_status with wait_s={POLL_WAIT_S} until done"
