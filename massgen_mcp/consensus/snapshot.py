"""The records a run is seen by: its status and its result, projected from its progress.

One projection for every writer: the engine publishes :func:`status_record` and closes with
:func:`result_record` while it runs; a run that never starts (queued for a pool worker,
cancelled while queued, or one no worker can run) gets the same records from its recorded
request through :func:`queued_status` and :func:`end_unstarted`, with no engine built and no
model called. Records go to a :class:`Recorder`; the session store's implements it on disk.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from massgen_mcp.consensus import findings
from massgen_mcp.consensus.replay import progress_of
from massgen_mcp.consensus.run import Progress, RunRequest
from massgen_mcp.consensus.state import Coordination
from massgen_mcp.core.errors import RecordWriteError
from massgen_mcp.core.outcomes import ReviewOutcome, ReviewTarget
from massgen_mcp.core.records import (
    PREVIEW_CHARS,
    Event,
    EventType,
    FinishReason,
    Phase,
    RunStatus,
    clip,
)
from massgen_mcp.core.run_state import (
    AgentResult,
    AgentStatus,
    AnswerRecord,
    AnswerRef,
    Draft,
    ResultRecord,
    StatusRecord,
    VoteRecord,
    VoteRef,
    Winner,
)


class Recorder(Protocol):
    """Where a run reports what happens; the session store's
    :class:`~massgen_mcp.records.recorder.FileRecorder` writes it to disk.

    A method may raise :class:`~massgen_mcp.core.errors.RecordWriteError` once, when the store
    refuses a write; the run then ends ``failed`` (``record_write_failed``) and every later
    call must keep working in memory without raising again.
    """

    def event(self, event: Event) -> None: ...
    def status(self, status: StatusRecord) -> None: ...
    def answer(self, label: str, content: str) -> None: ...
    def finish(self, result: ResultRecord) -> None: ...


class Timeline:
    """A run's clock and event numbering: numbers continue after the recorded events."""

    def __init__(self, recorded_events: int = 0) -> None:
        self.seq = recorded_events
        self._t0 = time.monotonic()
        self.started_at = time.time()

    def elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 3)

    def event(self, event_type: EventType, /, **data: Any) -> Event:
        """The next event, numbered and timed."""
        self.seq += 1
        return Event(seq=self.seq, t=self.elapsed(), ts=time.time(), type=event_type, **data)


def timeline_of(request: RunRequest) -> Timeline:
    return Timeline(request.prior.event_count if request.prior else 0)


def status_record(request: RunRequest, progress: Progress, timeline: Timeline, *,
                  status: RunStatus, phase: Phase, finish_reason: FinishReason | None,
                  revision: int, turning: Collection[str] = (),
                  activity: Mapping[str, str] | None = None) -> StatusRecord:
    """The live state, as written to status.json and returned by get_status. ``turning``:
    the agents with a turn in flight; ``activity``: the tool each agent is using now."""
    coord = progress.coord
    agents = {}
    for aid, spec in request.agents.items():
        state = coord.agents[aid]
        agents[aid] = AgentStatus(
            model=spec.model, label_letter=state.letter,
            phase=coord.phase_of(aid, aid in turning),
            answers=len(state.answers),
            current_answer=state.current.label if state.current else None,
            vote=None if state.vote is None else
            VoteRef(answer=state.vote.label, reason=state.vote.reason),
            dropped_reason=state.drop_reason, usage=progress.usage[aid].record(),
            activity=(activity or {}).get(aid),
        )
    return StatusRecord(
        session_id=request.session_id, status=status, phase=phase,
        finish_reason=finish_reason, question=request.question,
        parent_session_id=request.parent_session_id, started_at=timeline.started_at,
        updated_at=time.time(), elapsed_s=timeline.elapsed(),
        answers_version=coord.version, revision=revision, agents=agents,
        answers=[AnswerRef(label=a.label, agent_id=a.agent_id, chars=len(a.content),
                           preview=a.content[:PREVIEW_CHARS])
                 for a in coord.current_answers()],
        tally={label: [v.voter for v in votes] for label, votes in coord.tally().items()},
        usage=progress.total.record(), decided_by=coord.decision(), late=coord.late(),
        notes=[clip(note, PREVIEW_CHARS)[0] for note in coord.notes],
    )


def with_drafts(status: StatusRecord, drafts: Mapping[str, Draft], revision: int
                ) -> StatusRecord:
    """``status`` with each working agent's live draft (memory only: never written)."""
    if not drafts and not revision:
        return status
    agents = {aid: agent.model_copy(update={"draft": drafts.get(aid)})
              if aid in drafts else agent for aid, agent in status.agents.items()}
    return status.model_copy(update={"agents": agents, "drafts_revision": revision})


class ReviewText(Protocol):
    """Writes a review's final answer from its outcome: the faces' words (the pull request
    comment's Markdown), handed to the run by its owner, so the protocol renders no text."""

    def __call__(self, review: ReviewOutcome, models: Mapping[str, str], *,
                 described: str = "") -> str: ...


def result_record(request: RunRequest, progress: Progress, timeline: Timeline, *,
                  status: RunStatus, finish_reason: FinishReason | None, final: str | None,
                  presenter: str | None, errors: list[str],
                  review_text: ReviewText | None = None) -> ResultRecord:
    """The finished run, as written to result.json: the winner is named only with a final
    answer; a review's final answer is ``review_text``'s (:func:`with_review`)."""
    coord, agents = progress.coord, request.agents
    winner, tie = coord.winner() if final is not None else (None, False)
    result = ResultRecord(
        session_id=request.session_id, status=status,
        finish_reason=finish_reason, question=request.question,
        parent_session_id=request.parent_session_id, final_answer=final,
        winner=None if winner is None else Winner(
            label=winner.label, agent_id=winner.agent_id,
            model=agents[winner.agent_id].model),
        presented_by=presenter, tie_broken=tie,
        decided_by=coord.decision() if finish_reason is FinishReason.CONSENSUS else None,
        votes=[VoteRecord(voter=v.voter, answer=v.label, reason=v.reason)
               for v in coord.votes()],
        tally={label: len(v) for label, v in coord.tally().items()},
        answers=[AnswerRecord(label=a.label, agent_id=a.agent_id,
                              model=agents[a.agent_id].model, revision=a.revision,
                              content=a.content)
                 for a in coord.current_answers()],
        agents={aid: AgentResult(model=spec.model,
                                 status=coord.phase_of(aid, False),
                                 answers=len(coord.agents[aid].answers),
                                 dropped_reason=coord.agents[aid].drop_reason,
                                 usage=progress.usage[aid].record())
                for aid, spec in agents.items()},
        usage=progress.total.record(), errors=errors, started_at=timeline.started_at,
        finished_at=time.time(), elapsed_s=timeline.elapsed(), notes=_notes(coord),
    )
    return with_review(result, request.review, review_text, request.context or "")


def _notes(coord: Coordination) -> list[str]:
    """What depth: auto did, when its reserve was never called."""
    if not coord.reserve:
        return []
    pair = [s.agent_id for s in coord.live()] or [
        a for a in coord.order if a not in coord.reserve]
    held = [a for a in coord.order if a in coord.reserve]
    settled = "agreed in round one" if coord.decision() is not None else "were still working"
    return [f"depth auto: the opening pair ({', '.join(pair)}) {settled}; "
            f"{len(held)} more member{'' if len(held) == 1 else 's'} ({', '.join(held)}) "
            "not called"]


def with_review(result: ResultRecord, target: ReviewTarget | None,
                text: ReviewText | None, diff: str = "") -> ResultRecord:
    """A review run's result with its :class:`ReviewOutcome`, settled from the members'
    recorded reviews and votes, and the final answer ``text`` writes from it (a review's
    text is never a presenter's prose). A review that ended without a verdict (no winner, no
    vote) is inconclusive, with why and how the run ended. ``diff``: what the run was sent,
    for the coverage and the findings off the change. Other runs as they are."""
    if target is None:
        return result
    review = findings.outcome(result.answers, result.votes, result.agents,
                              threshold=target.threshold, tier=target.tier,
                              winner_label=result.winner.label if result.winner else None)
    review = findings.with_coverage(review, target, diff)
    if review.inconclusive and result.status is not RunStatus.COMPLETED:
        ended = str(result.finish_reason or result.status).replace("_", " ")
        review = review.model_copy(
            update={"inconclusive": f"{review.inconclusive} (the run ended: {ended})"})
    if text is None:
        return result.model_copy(update={"review": review})
    models = {aid: agent.model for aid, agent in result.agents.items()}
    return result.model_copy(update={
        "review": review, "final_answer": text(review, models, described=target.described)})


def queued_status(request: RunRequest) -> StatusRecord:
    """The status of a run waiting for a pool worker: running, phase queued, with whatever
    its record had settled."""
    return status_record(request, progress_of(request), timeline_of(request),
                         status=RunStatus.RUNNING, phase=Phase.QUEUED, finish_reason=None,
                         revision=0)


def end_unstarted(recorder: Recorder, request: RunRequest, status: RunStatus,
                  reason: FinishReason, error: str | None = None) -> ResultRecord:
    """End a run that never started (cancelled while queued, or a worker that cannot run
    it): its last events, its result and its final status, as the engine would close it,
    and no model call. A refused write ends it ``failed`` (``record_write_failed``)."""
    progress, timeline = progress_of(request), timeline_of(request)
    errors = [error] if error else []
    if status is RunStatus.CANCELLED:
        recorder.event(timeline.event(EventType.CANCELLED))

    def close(status: RunStatus, reason: FinishReason) -> ResultRecord:
        result = result_record(request, progress, timeline, status=status,
                               finish_reason=reason, final=None, presenter=None,
                               errors=errors)
        recorder.event(timeline.event(EventType.FINISHED, status=status,
                                      finish_reason=reason))
        recorder.finish(result)
        with contextlib.suppress(RecordWriteError):  # the result stands (see the engine)
            recorder.status(status_record(request, progress, timeline, status=status,
                                          phase=Phase.DONE, finish_reason=reason,
                                          revision=1))
        return result

    try:
        return close(status, reason)
    except RecordWriteError as exc:
        errors.append(str(exc))
        return close(RunStatus.FAILED, FinishReason.RECORD_WRITE_FAILED)
