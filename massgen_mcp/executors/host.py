"""The run host: the one owner of the engine tasks that run in this process.

Every run is an asyncio task owned by one :class:`RunHost`, in the manner of aiojobs: there
is a cap on how many run at once, a run is forgotten as soon as it ends (its record on disk
is the truth from then on, so a server that has run 10,000 sessions holds none of them in
memory), and :meth:`RunHost.aclose` cancels what is left and waits at most a deadline.

Two owners compose it, each passing what is theirs rather than the host knowing them: the
in-process executor (:class:`~massgen_mcp.executors.local.LocalExecutor`), whose
``companion`` task follows the run's file inbox; and a pool worker
(:class:`~massgen_mcp.pool.worker.PoolWorker`), whose ``stamp`` names the worker in every
status and whose ``guard`` (per resumed run) fences each write of the record. Both hand it
the same :class:`RunParts` (:data:`~massgen_mcp.executors.local.RUN_PARTS`): a review's
repository copy, the report writer and a review's final answer are the run's, not the
scheduler's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from massgen_mcp.consensus.engine import ConsensusRun
from massgen_mcp.consensus.run import RunRequest
from massgen_mcp.consensus.snapshot import ReviewText
from massgen_mcp.core.errors import RecordWriteError, SessionStateError
from massgen_mcp.core.records import Event, RequestRecord
from massgen_mcp.core.run_state import ResultRecord, SessionRecord, StatusRecord
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.executors.seam import (
    DraftsListener,
    EventListener,
    Listeners,
    RecorderHooks,
    StartedRun,
    StatusListener,
    Unsubscribe,
    recorded_request,
)
from massgen_mcp.executors.waiting import ChangeSignal
from massgen_mcp.providers.base import TeamProvider
from massgen_mcp.records.ids import new_session_id
from massgen_mcp.records.recorder import FileRecorder, GuardFactory, RecordRefused
from massgen_mcp.records.store import SessionStore

log = logging.getLogger(__name__)

CLOSE_DEADLINE_S = 10.0


@dataclass
class LiveRun(StartedRun):
    """A run executing in this process."""

    engine: ConsensusRun
    recorder: FileRecorder
    changes: ChangeSignal  # each new status
    ticks: ChangeSignal  # each new status, and each change of the drafts (live views)
    task: asyncio.Task[ResultRecord] = field(init=False)

    @property
    def done(self) -> bool:
        return self.task.done()


# What a run needs built before its first turn and removed when it ends, however it ends (a
# review's read-only copy of the repository, its coding-CLI members' working folder): None
# when it needs none.
WorkFolder = Callable[[RunRequest], AbstractAsyncContextManager[Path | None]]


@dataclass(frozen=True)
class RunParts:
    """What the host's owner hands it for every run, so that the host schedules runs without
    knowing what a review or a report is: ``work_folder`` (see :data:`WorkFolder`),
    ``report`` renders a finished run's whole record as its ``report.html``, ``review_text``
    writes a review's final answer from its outcome. A part left None is not made."""

    work_folder: WorkFolder | None = None
    report: Callable[[SessionRecord], str] | None = None
    review_text: ReviewText | None = None


class RunHost:
    """Starts runs as background tasks in this process, at most ``max_running`` at once.

    ``stamp``: fields every status of its runs carries (a pool worker's name); ``companion``:
    a task to run beside each run, cancelled when it ends (the local executor's inbox
    follower); ``parts``: what each run is given (:class:`RunParts`); ``drafts``: whether
    runs keep live drafts (providers then stream; litellm's streaming costs ~12 ms of CPU a
    call and ~0.4 ms a token), off for faces nobody watches live."""

    def __init__(self, store: SessionStore, provider: TeamProvider, *, max_running: int = 256,
                 drafts: bool = True, stamp: Mapping[str, str] | None = None,
                 companion: Callable[[LiveRun], Coroutine[None, None, None]] | None = None,
                 parts: RunParts = RunParts()) -> None:
        self.store = store
        self.provider = provider
        self.max_running = max_running
        self.drafts = drafts
        self.stamp = dict(stamp or {})
        self.companion = companion
        self.parts = parts
        self.runs: dict[str, LiveRun] = {}  # only runs still going
        # Runs that ended while their record could not be written (disk full): their end
        # lives here, so this process still reports it truly. Rare, and small.
        self.unrecorded: dict[str, FileRecorder] = {}
        self._listeners = Listeners()
        self._closed = False

    def add_event_listener(self, listener: EventListener) -> Unsubscribe:
        return self._listeners.add_event(listener)

    def add_status_listener(self, listener: StatusListener) -> Unsubscribe:
        return self._listeners.add_status(listener)

    def add_drafts_listener(self, listener: DraftsListener) -> Unsubscribe:
        return self._listeners.add_drafts(listener)

    def running_count(self) -> int:
        return len(self.runs)

    def stop_taking(self) -> None:
        """Refuse every new run from now on (a pool worker that stops)."""
        self._closed = True


    def _check_capacity(self) -> None:
        if self._closed:
            raise SessionStateError("the server is shutting down; start the run again later")
        if self.running_count() >= self.max_running:
            raise SessionStateError(
                f"{self.max_running} runs are already in progress; wait for one to finish "
                "or cancel one")


    async def start(self, request: RequestRecord, team: TeamConfig) -> LiveRun:
        """Create the record of ``request`` and start the run in the background; returns at
        once. The request's ``workspace`` is the root the evidence tools read, when the team's
        options turn them on; its ``kind`` marks eval's runs (kept out of ``sessions`` and
        ``latest``)."""
        self._check_capacity()
        session_id = new_session_id()
        changes, ticks = ChangeSignal(), ChangeSignal()
        recorder = self.store.create(session_id, config=team.redacted(), request=request,
                                     **self._hooks(session_id, changes, ticks))
        return self._launch(RunRequest.from_record(session_id, request, team), recorder,
                            (changes, ticks), fresh=True, notes=request.notes)

    async def resume(self, session_id: str, team: TeamConfig, *,
                     guard: GuardFactory | None = None) -> LiveRun:
        """Run a recorded session from where its record stands (:func:`recorded_request`);
        ``guard`` holds its record for each write, when others share it (a pool claim's
        fence)."""
        self._check_capacity()
        request = await asyncio.to_thread(recorded_request, self.store, session_id, team)
        self._check_capacity()  # again: the executor may have closed while the record was read
        if session_id in self.runs:
            raise SessionStateError(f"session {session_id} is already running")
        changes, ticks = ChangeSignal(), ChangeSignal()
        recorder = self.store.reopen(session_id, guard=guard,
                                     **self._hooks(session_id, changes, ticks))
        return self._launch(request, recorder, (changes, ticks), fresh=False)


    def _hooks(self, session_id: str, changes: ChangeSignal, ticks: ChangeSignal
               ) -> RecorderHooks:
        """The recorder's hooks: every event to the event listeners (the CLI's progress
        lines, a worker's publisher), every status to the status listeners and the run's
        change signals (waking long polls and live views)."""
        def on_event(event: Event) -> None:
            self._listeners.event(session_id, event)

        def on_status(status: StatusRecord) -> None:
            changes.pulse()
            ticks.pulse()
            self._listeners.status(status)
        return {"on_event": on_event, "on_status": on_status}

    def _launch(self, request: RunRequest, recorder: FileRecorder,
                signals: tuple[ChangeSignal, ChangeSignal], *, fresh: bool,
                notes: list[str] | None = None) -> LiveRun:
        request = replace(request, log_path=recorder.folder / "cli.log")
        if self.stamp:
            recorder.stamp = {**recorder.stamp, **self.stamp}
        changes, ticks = signals

        def on_drafts() -> None:
            ticks.pulse()
            if self._listeners:
                self._listeners.drafts(request.session_id, engine.drafts.records(),
                                       engine.drafts.revision)

        engine = ConsensusRun(request, self.provider, recorder,
                              on_drafts=on_drafts if self.drafts else None,
                              review_text=self.parts.review_text)
        run = LiveRun(request.session_id, recorder.folder, engine, recorder, changes, ticks,
                      notes=notes or [])
        try:
            recorder.status(engine.snapshot())
        except (RecordWriteError, RecordRefused):
            recorder.close()
            if fresh:
                shutil.rmtree(recorder.folder, ignore_errors=True)  # a new run: no trace
            raise
        run.task = asyncio.create_task(self._execute(run), name=f"session:{request.session_id}")
        self.runs[request.session_id] = run
        return run

    async def _execute(self, run: LiveRun) -> ResultRecord:
        follow = (None if self.companion is None else
                  asyncio.create_task(self.companion(run), name=f"companion:{run.session_id}"))
        try:
            # The run's work folder is built by the engine's first step and removed here when
            # the run ends, however it ends (failed, cancelled, timed out).
            async with contextlib.AsyncExitStack() as owned:
                if self.parts.work_folder is not None:
                    run.engine.prepare = partial(owned.enter_async_context,
                                                 self.parts.work_folder(run.engine.request))
                return await run.engine.run()
        finally:
            if follow is not None:
                follow.cancel()
            render = self.parts.report
            run.recorder.close(report=None if render is None else
                               self.store.report_writer(run.session_id, render))
            if run.recorder.write_error is not None:
                self.unrecorded[run.session_id] = run.recorder
            self.runs.pop(run.session_id, None)  # the record on disk is the truth from now on
            run.changes.pulse()
            run.ticks.pulse()


    async def cancel(self, session_id: str) -> bool:
        """Cancel a run in this process; False if it was not running here."""
        run = self.runs.get(session_id)
        if run is None or run.done:
            return False
        run.task.cancel()
        await asyncio.gather(run.task, return_exceptions=True)
        return True

    async def aclose(self, deadline_s: float = CLOSE_DEADLINE_S, *, interrupt: bool = False
                     ) -> None:
        """Stop every run still going and wait up to ``deadline_s`` for their records to be
        closed. ``interrupt`` (the server is stopping, not the user cancelling) records them
        ``interrupted``, so they can be resumed; otherwise they are ``cancelled``. A run that
        does not stop in time is logged and left behind (the next server marks it
        ``interrupted``)."""
        self._closed = True
        tasks = []
        for run in self.runs.values():
            if interrupt:
                run.engine.interrupt()
            run.task.cancel()
            tasks.append(run.task)
        if not tasks:
            return
        _, stuck = await asyncio.wait(tasks, timeout=deadline_s)
        for task in stuck:
            log.warning("run %s did not stop within %g s of shutdown", task.get_name(),
                        deadline_s)
