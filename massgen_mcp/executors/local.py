"""The local executor: the runs that execute in this process, seen through the
:class:`~massgen_mcp.executors.seam.Executor` seam (start, follow, wait, steer, cancel, shut
down).

It is a :class:`~massgen_mcp.executors.host.RunHost` (which owns the engine tasks), handed what
each run of this machine is given (:data:`RUN_PARTS`: a review's repository copy, the report
writer, a review's final answer; a pool worker hands its host the same), plus what makes it
the embedded executor: reading the records of runs that are not here, and the file
note channel (:mod:`.inbox`) through which another process on this machine steers a run this
one holds, and this one steers a run another holds. The pool's
:class:`~massgen_mcp.pool.executor.PoolExecutor` (Docket on Redis, runs on ``massgen-mcp
worker`` processes) implements the same seam, so the service uses either unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from massgen_mcp.consensus import snapshot
from massgen_mcp.consensus.run import RunRequest
from massgen_mcp.consensus.steering import not_running
from massgen_mcp.core.errors import ConfigError, Refusal, SteerRefusedError
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.executors import inbox, notes
from massgen_mcp.executors.host import LiveRun, RunHost, RunParts
from massgen_mcp.executors.seam import ExecutorInfo, Progress
from massgen_mcp.executors.waiting import StatusCallback, wait_for_status, watch_status
from massgen_mcp.providers import preflight
from massgen_mcp.providers.base import TeamProvider
from massgen_mcp.records.recorder import FileRecorder
from massgen_mcp.records.store import SessionStore
from massgen_mcp.render.html import render_report
from massgen_mcp.render.review import as_markdown
from massgen_mcp.tools import snapshot as snapshots
from massgen_mcp.tools.git import GitFailed
from massgen_mcp.tools.workspace import workspace_refusals

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def review_folder(request: RunRequest) -> AsyncIterator[Path | None]:
    """The working folder of a review run's coding-CLI members: a read-only snapshot of the
    reviewed side (:mod:`massgen_mcp.tools.snapshot`), built once before the first turn and
    removed when the block ends; None for any other run (its CLIs get an empty folder per
    call). A resumed run builds a fresh one: a snapshot never outlives its run's task."""
    review = request.review
    if review is None or not any(agent.cli for agent in request.team.agents):
        yield None
        return
    try:
        built = await snapshots.build(Path(review.root), review.commit)
    except GitFailed as exc:  # the repository moved away since the review began, say
        raise ConfigError(f"the review's snapshot of {review.root} could not be built: "
                          f"{exc}") from None
    try:
        yield built.path
    finally:
        snapshots.remove(built.path)


# What every run of this machine is given, by the local executor and by a pool worker alike:
# a review's repository copy for its coding CLIs, report.html and a review's final answer.
RUN_PARTS = RunParts(work_folder=review_folder, report=render_report, review_text=as_markdown)


class LocalExecutor(RunHost):
    """The runs of this process, their records, and the file note channel."""

    def __init__(self, store: SessionStore, provider: TeamProvider, *, max_running: int = 256,
                 drafts: bool = True) -> None:
        super().__init__(store, provider, max_running=max_running, drafts=drafts,
                         companion=self._follow_inbox, parts=RUN_PARTS)
        self._keys: dict[str, str] = {}  # MCP task id -> the session it started

    async def count_running(self) -> int:
        return len(self.runs)

    async def describe(self) -> ExecutorInfo:
        return ExecutorInfo("embedded")

    async def recall(self, key: str) -> str | None:
        """The session started for ``key`` (an MCP task id), if this process started one."""
        return self._keys.get(key)

    async def remember(self, key: str, session_id: str) -> None:
        self._keys[key] = session_id

    async def preflight(self, team: TeamConfig, *, workspace: Path, probe_base_urls: bool
                        ) -> list[Refusal]:
        """See :meth:`Executor.preflight`: this machine is the run's, so its provider asks
        everything it knows of."""
        return [*workspace_refusals(team, workspace),
                *await self.provider.problems(team, probe_base_urls=probe_base_urls)]

    async def prepare(self, team: TeamConfig, progress: Progress) -> None:
        await preflight.fetch_bundled(team, progress)


    def _recorder(self, session_id: str) -> FileRecorder | None:
        run = self.runs.get(session_id)
        return run.recorder if run is not None else self.unrecorded.get(session_id)

    async def status(self, session_id: str) -> StatusRecord:
        """Live status from memory when the run is here (with its agents' drafts), else from
        its status.json."""
        recorder = self._recorder(session_id)
        if recorder is not None and recorder.latest_status is not None:
            run = self.runs.get(session_id)
            if run is None:
                return recorder.latest_status
            drafts = run.engine.drafts
            return snapshot.with_drafts(recorder.latest_status, drafts.records(),
                                        drafts.revision)
        return self.store.read_status(session_id)

    async def result(self, session_id: str) -> ResultRecord | None:
        """The result of a finished run (None while it goes on), from memory when its record
        could not be written, else from result.json."""
        recorder = self.unrecorded.get(session_id)
        if recorder is not None and recorder.result is not None:
            return recorder.result
        return self.store.read_result(session_id)

    async def wait(self, session_id: str, timeout_s: float | None, *, until_done: bool = False,
                   after_revision: int | None = None, on_change: StatusCallback | None = None
                   ) -> StatusRecord:
        """The run's status once it has changed, or (``until_done``) once it has finished,
        or when ``timeout_s`` has passed: see :func:`wait_for_status`."""
        run = self.runs.get(session_id)
        if run is None:  # not running here: what the record says is all there is
            return await self.status(session_id)

        async def read() -> tuple[StatusRecord, bool]:
            return await self.status(session_id), session_id in self.runs

        return await wait_for_status(read, run.changes, timeout_s, until_done=until_done,
                                     after_revision=after_revision, on_change=on_change)

    async def watch(self, session_id: str) -> AsyncIterator[StatusRecord]:
        """The run's status now, then again on every change, drafts included, until it ends
        (see :func:`watch_status`)."""
        run = self.runs.get(session_id)
        if run is None:
            yield await self.status(session_id)
            return

        async def read() -> tuple[StatusRecord, bool]:
            return await self.status(session_id), session_id in self.runs

        async for status in watch_status(read, run.ticks):
            yield status

    async def steer(self, session_id: str, note: str) -> int:
        """Deliver the user's note to the run (:meth:`ConsensusRun.steer`), here or in the
        process on this machine that runs it (:mod:`.inbox`); returns the votes it cleared.
        SteerRefusedError if the run is not running, or its process does not take it."""
        run = self.runs.get(session_id)
        if run is not None and not run.done:
            return run.engine.steer(note)
        status = await self.status(session_id)
        if status.status is not RunStatus.RUNNING:
            raise not_running(session_id, status.status)
        reply = await notes.deliver(inbox.FileNotes(self.store.folder(session_id)), note,
                                    inbox.REPLY_WAIT_S)
        if reply is None:
            raise SteerRefusedError(
                f"session {session_id} is marked running (pid {status.pid}) but no process "
                f"took the note within {inbox.REPLY_WAIT_S:g} s; if that process has ended, "
                "resume_session continues the run, then steer it")
        if not reply.ok:
            raise SteerRefusedError(reply.message)
        return reply.cleared

    async def _follow_inbox(self, run: LiveRun) -> None:
        """Hand the notes other processes leave for ``run`` to its engine, and reply."""
        said = False
        while True:
            await asyncio.sleep(inbox.POLL_S)
            try:
                waiting = await asyncio.to_thread(inbox.take, run.recorder.folder)
            except OSError as exc:  # whatever the disk says, the run goes on taking notes
                if not said:  # once a run, not at every look
                    log.warning("%s: its inbox cannot be read: %s", run.session_id, exc)
                    said = True
                continue
            for name, text in waiting:
                reply = notes.applied(run.engine.steer, text)
                await asyncio.to_thread(inbox.answer, run.recorder.folder, name, reply)



def local_executor(store: SessionStore, *, drafts: bool = True) -> LocalExecutor:
    """The executor of runs in this process, on the process's one router (its bound per
    provider and its loaded embedded model are shared by every service here)."""
    from massgen_mcp.providers.registry import shared_router  # loads the providers

    return LocalExecutor(store, shared_router(), drafts=drafts)
