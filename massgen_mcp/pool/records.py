"""The pool's states of a session record, written and read through the record store.

A pool's run is recorded like any other (:mod:`massgen_mcp.records`), with three states only a
pool has: *queued* for a worker (:func:`mark_queued`), *ended before any worker ran it*
(cancelled while queued, or no worker can run it: :func:`end_unstarted`), and *unfinished and
quiet*, the runs a sweep checks for a live claim (:func:`pool_unfinished`). Writes that another
claim may race go through the claim's fence (:mod:`massgen_mcp.pool.fencing`).
"""

from __future__ import annotations

import time

from massgen_mcp.consensus import snapshot
from massgen_mcp.consensus.snapshot import queued_status
from massgen_mcp.core.errors import SessionNotFoundError, SessionStateError
from massgen_mcp.core.records import FinishReason, RunStatus
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.executors.seam import recorded_request
from massgen_mcp.pool import fencing
from massgen_mcp.records.liveness import held_by_lease
from massgen_mcp.records.recorder import FileRecorder
from massgen_mcp.records.store import SessionStore
from massgen_mcp.render.html import render_report


def _unowned(store: SessionStore, session_id: str, fence: int | None) -> FileRecorder:
    """A recorder for a session no process runs while it writes (``fence`` is the pool
    claim that makes sure), stamped in no process's name."""
    recorder = store.reopen(session_id,
                            guard=fencing.guard(fence) if fence is not None else None)
    recorder.stamp = {"pid": None, "worker": None}
    return recorder


def mark_queued(store: SessionStore, session_id: str, team: TeamConfig) -> StatusRecord | None:
    """Record the session as waiting for a pool worker (status running, phase queued);
    returns the status written."""
    recorder = _unowned(store, session_id, None)
    try:
        recorder.status(queued_status(recorded_request(store, session_id, team)))
    finally:
        recorder.close(report=store.report_writer(session_id, render_report))
    return recorder.latest_status


def end_unstarted(store: SessionStore, session_id: str, team: TeamConfig, status: RunStatus,
                  reason: FinishReason, error: str | None = None, *, fence: int | None = None
                  ) -> StatusRecord | None:
    """End a recorded session that will not run (cancelled while queued, or no worker can
    run it): a complete record with its result and report, and no model call (see
    :func:`~massgen_mcp.consensus.snapshot.end_unstarted`); returns the status written. A
    session that already has its result is left as it is. ``fence``: the fencing token of
    the pool claim this is written under."""
    if store.read_result(session_id) is not None:
        return None
    request = recorded_request(store, session_id, team)
    recorder = _unowned(store, session_id, fence)
    try:
        snapshot.end_unstarted(recorder, request, status, reason, error)
    finally:
        # The closer of an ended run writes its report.
        recorder.close(report=store.report_writer(session_id, render_report))
    return recorder.latest_status


def pool_unfinished(store: SessionStore, quiet_for_s: float, now: float | None = None
                    ) -> list[str]:
    """Runs a worker pool owns that are still running or queued and whose status has not
    changed for ``quiet_for_s``: the ones a pool's sweep checks for a live claim."""
    now = time.time() if now is None else now
    found = []
    for sid in store.session_ids():
        try:
            status = store.read_status(sid)
        except (SessionNotFoundError, SessionStateError):
            continue
        if (status.status is RunStatus.RUNNING and held_by_lease(status)
                and now - status.updated_at >= quiet_for_s):
            found.append(sid)
    return found
