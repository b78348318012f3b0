"""How a tool starts a run and waits on it, sending progress, for server/tools.py.

Runs go on in the background; hosts cut tool calls after ~60 s, so no tool blocks longer than
its ``wait_s`` (capped at ``MASSGEN_MCP_MAX_WAIT_S``, default 50 s). Every host turn costs the
user time and tokens, so a wait returns when the run ends (not at each step, unless asked), and
sends progress notifications while it waits: Claude Code resets its idle timer only on those.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastmcp import Context

from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.server import shutdown
from massgen_mcp.server.views import (
    POLL_WAIT_S,
    RunHandle,
    progress_message,
    progress_steps,
    result_view,
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
