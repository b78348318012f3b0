"""The bookkeeping of a consensus run, apart from the loop that decides it.

:class:`~.engine.ConsensusRun` decides when turns start and stop; this is what it keeps on the
side: every event and status revision it hands its :class:`~.snapshot.Recorder`, the live
drafts of calls in flight and how often their followers hear of them, and how the record is
closed however the run ends (a result, a stop that leaves the run resumable, a disk that
refused a write).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from massgen_mcp.consensus.drafts import Drafts
from massgen_mcp.consensus.replay import progress_of
from massgen_mcp.consensus.run import RunRequest
from massgen_mcp.consensus.snapshot import (
    Recorder,
    ReviewText,
    result_record,
    status_record,
    timeline_of,
)
from massgen_mcp.core.errors import RecordWriteError
from massgen_mcp.core.records import EventType, FinishReason, Phase, RunStatus
from massgen_mcp.core.run_state import ResultRecord, StatusRecord

if TYPE_CHECKING:
    from massgen_mcp.consensus.evidence import Evidence

# Drafts change with every streamed token; whoever follows them (the live views, a pool
# worker's publisher) hears of it at most this often.
DRAFT_INTERVAL_S = 0.2
DraftsListener = Callable[[], None]


class RunBooks:
    """What one run records and publishes; the loop that drives it subclasses this."""

    # The loop's, shown in every status: the turns in flight and the tool each agent uses.
    in_flight: dict[str, asyncio.Task[Any]]
    evidence: Evidence

    def __init__(self, request: RunRequest, recorder: Recorder, *,
                 on_drafts: DraftsListener | None, review_text: ReviewText | None) -> None:
        self.request = request
        self.review_text = review_text
        self.options = request.team.options
        self.recorder = recorder
        self.progress = progress_of(request)  # a continued run's recorded steps replayed
        self.phase = Phase.ANSWERING
        self.status = RunStatus.RUNNING
        self._outcome = RunStatus.FAILED  # what status becomes when the run ends
        self.finish_reason: FinishReason | None = None
        self.errors: list[str] = []
        self._stopping: str | None = None  # "interrupt" or "hand_back": why a cancel came
        self._timeline = timeline_of(request)
        self._revision = 0  # bumped on every published status, so pollers can tell news
        self.drafts = Drafts()
        self._on_drafts = on_drafts
        self._drafts_due: asyncio.TimerHandle | None = None

    # -- recording ---------------------------------------------------------------------------

    def _emit(self, event_type: EventType, /, **data: Any) -> None:
        self.recorder.event(self._timeline.event(event_type, **data))

    def _publish_status(self) -> None:
        self._revision += 1
        self.recorder.status(self.snapshot())

    def snapshot(self) -> StatusRecord:
        """The live state, as written to status.json and returned by get_status."""
        return status_record(self.request, self.progress, self._timeline, status=self.status,
                             phase=self.phase, finish_reason=self.finish_reason,
                             revision=self._revision, turning=self.in_flight,
                             activity=self.evidence.activity)

    # -- live drafts -------------------------------------------------------------------------

    def _text_streamed(self, agent_id: str, text: str, tokens: int) -> None:
        self.drafts.add(agent_id, text, tokens)
        if self._drafts_due is None and self._on_drafts is not None:
            self._drafts_due = asyncio.get_running_loop().call_later(
                DRAFT_INTERVAL_S, self._drafts_changed)

    def _drafts_changed(self) -> None:
        if self._drafts_due is not None:
            self._drafts_due.cancel()
            self._drafts_due = None
        if self._on_drafts is not None:
            self._on_drafts()

    # -- how the run ends --------------------------------------------------------------------

    def _end(self, status: RunStatus, reason: FinishReason) -> None:
        self._outcome, self.finish_reason = status, reason

    def _no_consensus(self) -> None:
        """Every agent is gone. If answers exist, the best one is still worth returning,
        flagged as not agreed (``agents_dropped``); with none the run failed."""
        if self.progress.coord.current_answers():
            self._end(RunStatus.COMPLETED, FinishReason.AGENTS_DROPPED)
            self.errors.append("no consensus: every agent was dropped; the final answer is "
                               "the best recorded answer, not an agreed one")
        else:
            self._end(RunStatus.FAILED, FinishReason.ALL_AGENTS_FAILED)

    def interrupt(self) -> None:
        """Mark the coming cancellation as a stop of the whole server (not the user's
        cancel): the run is then recorded ``interrupted`` and can be resumed."""
        self._stopping = "interrupt"

    def hand_back(self) -> None:
        """Mark the coming cancellation as a pool worker stopping: the run is recorded
        ``running``/``queued`` (not finished, so pollers keep waiting) for another worker to
        continue from its record."""
        self._stopping = "hand_back"

    def _record_stop(self, why: str) -> None:
        """The process is stopping: leave the record as a crash would (no result). Marked
        ``interrupted`` at once, so ``resume_session`` continues from the recorded answers;
        or, handed back to a pool, still running and queued for the next worker."""
        with contextlib.suppress(RecordWriteError):
            if why == "hand_back":
                self.phase = Phase.QUEUED
                self._emit(EventType.REQUEUED, reason="the worker running it stopped; the "
                                                      "next worker continues from the record")
            else:
                self.status, self.phase = RunStatus.INTERRUPTED, Phase.DONE
                self.finish_reason = FinishReason.INTERRUPTED
                self._emit(EventType.INTERRUPTED, reason="the server stopped while the run "
                                                         "was in progress")
            self._publish_status()

    def _finish_unrecorded(self, exc: RecordWriteError) -> ResultRecord:
        """The disk refused part of the record: the run ends failed. The recorder keeps
        memory current from now on and writes what still fits (see :class:`Recorder`)."""
        self._end(RunStatus.FAILED, FinishReason.RECORD_WRITE_FAILED)
        self.errors.append(str(exc))
        return self._finish(None, None)

    def _finish(self, final: str | None, presenter: str | None) -> ResultRecord:
        try:
            return self._close_record(final, presenter)
        except RecordWriteError as exc:
            if self.finish_reason is FinishReason.RECORD_WRITE_FAILED:
                raise  # a recorder that raises twice breaks its contract
            return self._finish_unrecorded(exc)

    def _close_record(self, final: str | None, presenter: str | None) -> ResultRecord:
        # The status turns terminal only here, after the final answer exists, so a reader
        # that sees a terminal status in status.json always finds result.json too.
        self.status = self._outcome
        self.phase = Phase.DONE
        if final is not None:
            self._emit(EventType.FINAL, presenter=presenter, chars=len(final))
        result = result_record(self.request, self.progress, self._timeline,
                               status=self.status, finish_reason=self.finish_reason,
                               final=final, presenter=presenter, errors=self.errors,
                               review_text=self.review_text)
        self._emit(EventType.FINISHED, status=self.status, finish_reason=self.finish_reason)
        self.recorder.finish(result)
        # The result is recorded: the run's outcome stands even if this last status write is
        # refused (the recorder still holds it in memory; the next server reads result.json).
        with contextlib.suppress(RecordWriteError):
            self._publish_status()
        return result
