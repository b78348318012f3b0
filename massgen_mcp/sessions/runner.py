"""Own the runs that execute in this process: start, watch, cancel, shut down.

Every run is an asyncio task owned by one :class:`SessionRunner`; nothing outlives
:meth:`SessionRunner.aclose`. The runner is the seam where a worker pool (e.g. Docket on Redis)
can later take over execution: callers only use ``start``/``cancel``/``wait_for_change`` and
read records through the :class:`~massgen_mcp.sessions.store.SessionStore`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from massgen_mcp.config import TeamConfig, missing_credentials
from massgen_mcp.consensus.engine import ConsensusRun, RunRequest
from massgen_mcp.errors import ConfigError, SessionStateError
from massgen_mcp.providers.base import Provider
from massgen_mcp.report import write_report
from massgen_mcp.sessions.store import SessionStore, SessionWriter, new_session_id

log = logging.getLogger(__name__)

EventListener = Callable[[str, dict[str, Any]], None]


class ChangeSignal:
    """Lets readers wait for "anything changed": each pulse wakes every current waiter."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def pulse(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        event = self._event
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass


class _Recorder:
    """Writes through to the session folder and wakes long-polling readers."""

    def __init__(self, session_id: str, writer: SessionWriter, changes: ChangeSignal,
                 listeners: list[EventListener]) -> None:
        self.session_id = session_id
        self.writer = writer
        self.changes = changes
        self.listeners = listeners

    def event(self, event: dict[str, Any]) -> None:
        self.writer.event(event)
        for listener in self.listeners:
            listener(self.session_id, event)

    def status(self, status: dict[str, Any]) -> None:
        self.writer.status(status)
        self.changes.pulse()

    def answer(self, label: str, content: str) -> None:
        self.writer.answer(label, content)

    def finish(self, result: dict[str, Any]) -> None:
        self.writer.finish(result)


@dataclass
class LiveRun:
    """A run executing in this process."""

    session_id: str
    engine: ConsensusRun
    writer: SessionWriter
    changes: ChangeSignal
    task: asyncio.Task[dict[str, Any]] = field(init=False)

    @property
    def done(self) -> bool:
        return self.task.done()


class SessionRunner:
    """Starts runs as background tasks in this process, at most ``max_running`` at once."""

    def __init__(self, store: SessionStore, provider: Provider, *, max_running: int = 256) -> None:
        self.store = store
        self.provider = provider
        self.max_running = max_running
        self.runs: dict[str, LiveRun] = {}
        self.listeners: list[EventListener] = []
        self._closed = False

    def running_count(self) -> int:
        return sum(1 for r in self.runs.values() if not r.done)

    def _check_capacity(self, team: TeamConfig) -> None:
        if self._closed:
            raise SessionStateError("the server is shutting down; start the run again later")
        if self.running_count() >= self.max_running:
            raise SessionStateError(
                f"{self.max_running} runs are already in progress; wait for one to finish "
                "or cancel one (cancel_session)")
        problems = missing_credentials(team)
        if problems:
            raise ConfigError("missing API keys:\n" + "\n".join(problems))

    async def start(
        self, question: str, team: TeamConfig, *, context: str | None = None,
        parent_session_id: str | None = None,
    ) -> LiveRun:
        """Create the record and start the run in the background; returns at once."""
        self._check_capacity(team)
        session_id = new_session_id()
        writer = self.store.create(session_id, config=team.redacted(), request={
            "question": question, "context": context, "parent_session_id": parent_session_id,
        })
        return self._launch(RunRequest(session_id, question, team, context, parent_session_id),
                            writer)

    async def resume(
        self, session_id: str, question: str, team: TeamConfig, *, context: str | None,
        parent_session_id: str | None, prior_answers: tuple[tuple[str, str], ...],
        prior_calls: tuple[dict[str, Any], ...], prior_event_count: int,
    ) -> LiveRun:
        """Continue a recorded run in its own folder, starting from its recorded answers."""
        self._check_capacity(team)
        request = RunRequest(session_id, question, team, context, parent_session_id,
                             prior_answers=prior_answers, prior_calls=prior_calls,
                             prior_event_count=prior_event_count)
        return self._launch(request, self.store.reopen(session_id))

    def _launch(self, request: RunRequest, writer: SessionWriter) -> LiveRun:
        changes = ChangeSignal()
        engine = ConsensusRun(
            request, self.provider,
            _Recorder(request.session_id, writer, changes, self.listeners))
        run = LiveRun(request.session_id, engine, writer, changes)
        engine.recorder.status(engine.snapshot())
        run.task = asyncio.create_task(self._execute(run), name=f"session:{request.session_id}")
        self.runs[request.session_id] = run
        return run

    async def _execute(self, run: LiveRun) -> dict[str, Any]:
        try:
            return await run.engine.run()
        finally:
            run.writer.close()
            try:
                write_report(self.store, run.session_id)
            except Exception:  # a report problem must never spoil the run's own record
                log.exception("could not write report.html for %s", run.session_id)
            run.changes.pulse()

    def live(self, session_id: str) -> LiveRun | None:
        return self.runs.get(session_id)

    def status(self, session_id: str) -> dict[str, Any]:
        """Live status from memory when the run is here, else from its status.json."""
        run = self.runs.get(session_id)
        if run is not None and run.writer.latest_status is not None:
            return run.writer.latest_status
        return self.store.read_status(session_id)

    async def wait_for_change(self, session_id: str, timeout_s: float,
                              after_revision: int | None = None) -> None:
        """Return when the run's status changes or the run finishes, or after ``timeout_s``.

        With ``after_revision`` (the ``revision`` of the status the caller last saw) it returns
        at once if the status has moved on since, so a change that landed between two polls is
        never waited past."""
        run = self.runs.get(session_id)
        if run is None or run.done or timeout_s <= 0:
            return
        if after_revision is not None and self.status(session_id).get("revision") != after_revision:
            return
        await run.changes.wait(timeout_s)

    async def cancel(self, session_id: str) -> bool:
        """Cancel a run in this process; False if it was not running here."""
        run = self.runs.get(session_id)
        if run is None or run.done:
            return False
        run.task.cancel()
        await asyncio.gather(run.task, return_exceptions=True)
        return True

    async def aclose(self) -> None:
        """Cancel every run still going and wait for their records to be closed."""
        self._closed = True
        tasks = [r.task for r in self.runs.values() if not r.done]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
