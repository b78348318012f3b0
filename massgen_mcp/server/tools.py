"""What each MCP tool does, as plain async functions over a :class:`ConsensusService`.

server/app.py only registers these with FastMCP (names, schemas, descriptions); the work is
here, where it can be read and tested without the protocol. Runs go on in the background;
hosts cut tool calls after ~60 s, so no tool blocks longer than its ``wait_s`` (capped at
``MASSGEN_MCP_MAX_WAIT_S``, default 50 s). Every host turn costs the user time and tokens, so a
wait returns when the run ends (not at each step, unless asked), and sends progress
notifications while it waits: Claude Code resets its idle timer only on those.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from fastmcp import Context
from fastmcp.exceptions import ToolError

from massgen_mcp.core.errors import MassgenError, RunNotFinishedError, SessionNotFoundError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import Severity
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.review.start import ChangeToReview, start_review
from massgen_mcp.server import shutdown
from massgen_mcp.server.views import (
    POLL_WAIT_S,
    CancelView,
    Detail,
    ResultView,
    ReviewHandle,
    RunHandle,
    SessionPage,
    StatusView,
    SteerView,
    Until,
    cancel_view,
    not_finished_hint,
    progress_message,
    progress_steps,
    result_view,
    session_page,
    status_view,
    steer_view,
)
from massgen_mcp.service import ConsensusService, StartedRun, StatusCallback
from massgen_mcp.team.context_files import Workspace

log = logging.getLogger(__name__)

ROOTS_TIMEOUT_S = 5.0  # asking the client for its roots, once per run_consensus
# A front end that stops: an MCP task notices within STOP_POLL_S and steps aside after
# TASK_HANDOFF_S, longer than uvicorn's 5 s graceful shutdown so the tasks' worker is
# draining by then (a task that steps aside then stays queued for another front end).
STOP_POLL_S = 1.0
TASK_HANDOFF_S = 8.0
# A wait on a run that shows no change (a CLI agent thinking for minutes) still sends progress
# this often: well inside Claude Code's idle limit (300 s over HTTP) once an operator raises
# MASSGEN_MCP_MAX_WAIT_S, and a sign of life on the host's tool row meanwhile.
QUIET_PROGRESS_S = 20.0
# While agents write (their drafts stream), progress says so this often ("agent_b is
# writing… 412 tokens"): the host's tool row shows the run moving between its steps.
DRAFT_PROGRESS_S = 5.0
STARTED = (f"started; call get_status with wait_s={POLL_WAIT_S} until done (it returns when "
           "the run ends), then get_result")

# How a tool starts its run (run_consensus: the spec; review_changes: collect the change
# first); called once, not again when an MCP task is delivered a second time.
Start = Callable[[], Awaitable[StartedRun]]


def max_wait_s() -> float:
    return SETTINGS.mcp_max_wait_s.read()


@contextlib.contextmanager
def tool_errors() -> Iterator[None]:
    """Our errors carry messages written for the model; pass them through as ToolError."""
    try:
        yield
    except RunNotFinishedError as exc:
        raise ToolError(f"{exc}; {not_finished_hint(exc.interrupted)}") from None
    except SessionNotFoundError as exc:  # the store names no face's way to list ids
        raise ToolError(f"{exc}; list_sessions shows the ids") from None
    except MassgenError as exc:
        raise ToolError(redact(str(exc))) from None


def service_of(ctx: Context) -> ConsensusService:
    """The server's one service, put in the lifespan context by server/app.py."""
    service = ctx.lifespan_context["service"]
    assert isinstance(service, ConsensusService)
    return service


async def client_root(ctx: Context) -> Workspace | None:
    """The client's first ``file://`` root as the run's workspace, asked afresh on every call
    (so a changed root list is never stale); None when the client has no roots.

    Roots are deprecated as of the 2026-07-28 spec (SEP-2577) but hosts still send them; a
    client that cannot answer costs nothing here: the server's own folder is used.
    """
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from mcp.types import ClientCapabilities, RootsCapability

    try:
        session = ctx.session
        if not session.check_client_capability(ClientCapabilities(roots=RootsCapability())):
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecation notice, once per call
            async with asyncio.timeout(ROOTS_TIMEOUT_S):
                listed = await session.list_roots()
    except Exception:  # no back-channel, a timeout, a client error: use the server's folder
        log.debug("roots/list failed", exc_info=True)
        return None
    for root in listed.roots:
        uri = urlparse(str(root.uri))
        path = Path(url2pathname(uri.path))
        if uri.scheme == "file" and path.is_dir():
            return Workspace(path)
    return None


def progress_reporter(ctx: Context) -> StatusCallback:
    """Send each status seen while a tool waits as a progress notification (hosts such as
    Claude Code reset their idle timer only on these), with the run's steps done out of its
    total (:func:`progress_steps`), so a host's bar measures. Progress must grow with every
    notification: a keep-alive without news, or votes cleared by a new answer, moves it a
    tenth of the way left instead (the total is reached only when the run is done)."""
    sent: float | None = None

    async def report(status: StatusRecord) -> None:
        nonlocal sent
        done, total = progress_steps(status)
        if status.done and sent is not None and sent >= total:
            return  # the end, already sent
        sent = float(done) if sent is None or done > sent else sent + (total - sent) / 10
        await ctx.report_progress(sent, total, progress_message(status))

    return report


async def wait_reporting(service: ConsensusService, ctx: Context, session_id: str,
                         wait_s: float, *, until_done: bool,
                         after_revision: int | None = None) -> StatusRecord:
    """:meth:`ConsensusService.wait`, sending a progress notification when it starts (where
    the run is), on every change, every :data:`DRAFT_PROGRESS_S` while an agent's draft
    streams, and after every :data:`QUIET_PROGRESS_S` without one. It
    ends with its run (done, cancelled, interrupted) or at ``wait_s``; a client that goes
    away (``notifications/cancelled``, a closed session or stream) cancels this call, and the
    wait with it."""
    reporter = progress_reporter(ctx)
    loop = asyncio.get_running_loop()
    last_sent = loop.time()

    async def report(status: StatusRecord) -> None:
        nonlocal last_sent
        last_sent = loop.time()
        await reporter(status)

    await report(await service.status(session_id))  # an unknown id fails here, at once
    waiting = asyncio.create_task(service.wait(session_id, wait_s, until_done=until_done,
                                               after_revision=after_revision, on_change=report))
    next_look = loop.time() + DRAFT_PROGRESS_S  # when to look for drafts next
    try:
        while True:
            until = min(last_sent + QUIET_PROGRESS_S, next_look)
            await asyncio.wait({waiting}, timeout=max(0.0, until - loop.time()))
            if waiting.done():
                ended = waiting.result()
                if ended.done:
                    await reporter(ended)  # the host's bar reaches its total
                return ended
            next_look = loop.time() + DRAFT_PROGRESS_S
            status = await service.status(session_id)
            if (any(a.draft is not None for a in status.agents.values())
                    or loop.time() >= last_sent + QUIET_PROGRESS_S):
                await report(status)
    finally:
        waiting.cancel()


async def run_as_task(service: ConsensusService, ctx: Context, task_id: str, start: Start
                      ) -> RunHandle:
    """Follow the run ``start`` starts to its end, for an MCP task. A task delivered again (its
    front end died or stopped) follows the session it started the first time instead of
    starting another.

    When this front end stops, the task steps aside after :data:`TASK_HANDOFF_S` (by then the
    tasks' worker is draining, so the task stays queued for another front end) and the
    session goes on: only ``tasks/cancel`` cancels it."""
    session_id = await service.recall_task(task_id)
    if session_id is None:
        session_id = (await start()).session_id
        await service.remember_task(task_id, session_id)
    waiting = asyncio.create_task(service.wait(session_id, None, until_done=True,
                                               on_change=progress_reporter(ctx)))
    try:
        while not waiting.done() and not shutdown.stopping.is_set():
            await asyncio.wait({waiting}, timeout=STOP_POLL_S)
        if not waiting.done():
            await asyncio.wait({waiting}, timeout=TASK_HANDOFF_S)
        if not waiting.done():
            raise asyncio.CancelledError  # not a cancel of the run: see above
        status = waiting.result()
    except asyncio.CancelledError:
        waiting.cancel()
        if not shutdown.stopping.is_set():  # tasks/cancel: the task's session stops with it
            await asyncio.shield(service.cancel(session_id))
        raise
    record_dir = str(service.record_folder(session_id))
    return RunHandle(session_id=session_id, status=status.status, record_dir=record_dir,
                     message="finished; the result is included",
                     result=result_view(await service.result(session_id), record_dir))


async def wait_and_wrap(service: ConsensusService, ctx: Context, started: StartedRun,
                        wait_s: float, message: str,
                        finished: str = "finished; the result is included") -> RunHandle:
    """The handle of a run just started; with ``wait_s``, wait that long for it to finish
    (sending progress) and include the result if it did (then ``finished`` is the message)."""
    status = await service.status(started.session_id)
    wait = min(wait_s, max_wait_s())
    if wait > 0:
        status = await wait_reporting(service, ctx, started.session_id, wait, until_done=True)
    handle = RunHandle(session_id=started.session_id, status=status.status,
                       record_dir=str(started.record_dir), message=message)
    if status.done:
        handle.result = result_view(await service.result(started.session_id),
                                    str(started.record_dir))
        handle.message = finished
    return handle


async def launch(service: ConsensusService, ctx: Context, start: Start, wait_s: float
                 ) -> RunHandle:
    """Start a run and wait up to ``wait_s`` for it; an MCP task instead follows it to the
    end (its result is the run's result)."""
    task_id = ctx.task_id
    if task_id is not None:
        return await run_as_task(service, ctx, task_id, start)
    return await wait_and_wrap(service, ctx, await start(), wait_s, STARTED)


async def run_consensus(service: ConsensusService, ctx: Context, spec: RunSpec, wait_s: float
                        ) -> RunHandle:
    async def start() -> StartedRun:
        return await service.start(spec, await client_root(ctx))

    return await launch(service, ctx, start, wait_s)


async def review_changes(service: ConsensusService, ctx: Context, change: ChangeToReview, *,
                         focus: str | None, threshold: Severity, models: list[str] | None,
                         config: str | None, base_url: str | None,
                         options: RunOptions | None, wait_s: float) -> ReviewHandle:
    """Review ``change`` in the client's repository (its root, else the server's folder),
    confined as every model's call is: see :mod:`massgen_mcp.review.start`."""
    notes: list[str] = []

    async def start() -> StartedRun:
        workspace = await client_root(ctx) or service.workspace
        begun = await start_review(service, workspace, change, focus=focus, models=models,
                                   config=config, base_url=base_url, options=options,
                                   threshold=threshold)
        notes.extend(begun.notes)
        return begun.run

    handle = await launch(service, ctx, start, wait_s)
    return ReviewHandle(**dict(handle), notes=notes)


async def get_status(service: ConsensusService, ctx: Context, session_id: str, wait_s: float,
                     until: Until, after_revision: int | None) -> StatusView:
    """The status now, or after waiting up to ``wait_s`` for the run to end (``until="done"``)
    or to change (``until="change"``, since ``after_revision`` if given)."""
    wait = min(wait_s, max_wait_s())
    status = (await wait_reporting(service, ctx, session_id, wait, until_done=until == "done",
                                   after_revision=after_revision)
              if wait > 0 else await service.status(session_id))
    return status_view(status)


async def get_result(service: ConsensusService, session_id: str, detail: Detail) -> ResultView:
    return result_view(await service.result(session_id),
                       str(service.record_folder(session_id)), detail)


def list_sessions(service: ConsensusService, status: RunStatus | None, limit: int,
                  cursor: str | None) -> SessionPage:
    return session_page(*service.list_sessions(status, limit, cursor))


async def cancel_session(service: ConsensusService, session_id: str) -> CancelView:
    status, stopped = await service.cancel(session_id)
    return cancel_view(session_id, status, stopped)


async def steer_session(service: ConsensusService, session_id: str, message: str
                        ) -> SteerView:
    return steer_view(session_id, await service.steer(session_id, message))


async def continue_session(service: ConsensusService, ctx: Context, session_id: str,
                           follow_up: str, wait_s: float) -> RunHandle:
    started = await service.continue_session(session_id, follow_up)
    new = f"a NEW session {started.session_id} (the earlier one, {session_id}, is unchanged)"
    return await wait_and_wrap(
        service, ctx, started, wait_s,
        f"follow-up started as {new}: call get_status on the new id with "
        f"wait_s={POLL_WAIT_S} until done, then get_result",
        f"follow-up finished as {new}; the result is included")


async def resume_session(service: ConsensusService, ctx: Context, session_id: str,
                         wait_s: float) -> RunHandle:
    started = await service.resume_session(session_id)
    return await wait_and_wrap(
        service, ctx, started, wait_s,
        f"resumed; call get_status with wait_s={POLL_WAIT_S} until done, then get_result")


def events_jsonl(service: ConsensusService, session_id: str) -> str:
    return "".join(e.to_json() + "\n" for e in service.events(session_id))
