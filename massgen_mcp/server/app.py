"""The MCP surface: tools, resources and a prompt over the consensus service.

Thin on purpose: each tool validates its arguments (pydantic, from the signature), calls one
service method and turns our errors into ``ToolError`` text written for the calling model.
Runs go on in the background; hosts cut tool calls after ~60 s, so no tool blocks longer than
its ``wait_s`` (capped at ``MASSGEN_MCP_MAX_WAIT_S``, default 50 s).

This module must not import litellm (it costs ~3 s): the server answers ``initialize`` first
and warms litellm in the background afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastmcp import Context, FastMCP
from fastmcp.apps import AppConfig
from fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from massgen_mcp._version import __version__
from massgen_mcp.core.errors import MassgenError, RunNotFinishedError
from massgen_mcp.core.records import RunStatus, StatusRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import (
    MAX_AGENTS,
    MAX_CONTEXT_CHARS,
    MAX_QUESTION_CHARS,
    RunOptions,
    RunSpec,
)
from massgen_mcp.server import shutdown
from massgen_mcp.server.handshake import INSTRUCTIONS
from massgen_mcp.server.session_view import VIEW_URI, view_html
from massgen_mcp.server.views import (
    NOT_FINISHED_HINT,
    CancelView,
    Detail,
    ResultView,
    RunHandle,
    SessionPage,
    StatusView,
    cancel_view,
    progress_message,
    result_view,
    session_page,
    status_view,
)
from massgen_mcp.service import ConsensusService, SetupView, StartedRun
from massgen_mcp.sessions.waiting import StatusCallback
from massgen_mcp.team.context_files import Workspace

if TYPE_CHECKING:  # the auth stack costs ~0.3 s to import; stdio never needs it
    from fastmcp.server.auth import AuthProvider

    from massgen_mcp.pool.live import PoolConfig

log = logging.getLogger(__name__)

ROOTS_TIMEOUT_S = 5.0  # asking the client for its roots, once per run_consensus
TASK_CONCURRENCY = 200  # MCP tasks one front end follows at once (each only waits)
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])
# A front end that stops: an MCP task notices within STOP_POLL_S and steps aside after
# TASK_HANDOFF_S, longer than uvicorn's 5 s graceful shutdown so the tasks' worker is
# draining by then (a task that steps aside then stays queued for another front end).
STOP_POLL_S = 1.0
TASK_HANDOFF_S = 8.0
WARM_UP_DELAY_S = 1.0  # let the handshake go first; litellm's import holds the GIL for seconds

def max_wait_s() -> float:
    return float(os.environ.get("MASSGEN_MCP_MAX_WAIT_S", "50"))


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Our errors carry messages written for the model; pass them through as ToolError."""
    try:
        yield
    except RunNotFinishedError as exc:
        raise ToolError(f"{exc}; {NOT_FINISHED_HINT}") from None
    except MassgenError as exc:
        raise ToolError(redact(str(exc))) from None


def _service(ctx: Context) -> ConsensusService:
    service = ctx.lifespan_context["service"]
    assert isinstance(service, ConsensusService)
    return service


async def _client_root(ctx: Context) -> Workspace | None:
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


def _progress_reporter(ctx: Context) -> StatusCallback:
    """Send each status seen while a tool waits as a progress notification (hosts such as
    Claude Code reset their idle timer only on these)."""
    step = 0

    async def report(status: StatusRecord) -> None:
        nonlocal step
        step += 1
        await ctx.report_progress(step, None, progress_message(status))

    return report


async def _run_as_task(ctx: Context, task_id: str, spec: RunSpec) -> RunHandle:
    """Run ``spec`` to the end for an MCP task. A task delivered again (its front end died
    or stopped) follows the session it started the first time instead of starting another.

    When this front end stops, the task steps aside after :data:`TASK_HANDOFF_S` (by then the
    tasks' worker is draining, so the task stays queued for another front end) and the
    session goes on: only ``tasks/cancel`` cancels it."""
    service = _service(ctx)
    session_id = await service.runner.recall(task_id)
    if session_id is None:
        started = await service.start(spec, await _client_root(ctx))
        session_id = started.session_id
        await service.runner.remember(task_id, session_id)
    waiting = asyncio.create_task(service.wait(session_id, None, until_done=True,
                                               on_change=_progress_reporter(ctx)))
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
    record_dir = str(service.store.folder(session_id))
    return RunHandle(session_id=session_id, status=status.status, record_dir=record_dir,
                     message="finished; the result is included",
                     result=result_view(await service.result(session_id), record_dir))


def add_health_route(mcp: FastMCP, pool: PoolConfig | None,
                     service: Callable[[], ConsensusService | None]) -> None:
    """``GET /healthz`` for load balancers: 200 when this front end can take runs (in a
    pool: Redis answers and a worker was seen within Docket's heartbeat window), else 503
    with the reason. No token: it says nothing about sessions."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    @mcp.custom_route("/healthz", methods=["GET"])
    async def healthz(_request: Request) -> Response:
        running = service()
        if running is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        info = await running.runner.describe()
        body = {"status": "ok", "mode": info.mode, "workers": len(info.workers)}
        if info.problem:
            return JSONResponse({**body, "status": "unavailable", "problem": info.problem},
                                status_code=503)
        return JSONResponse(body)


def add_live_pages(mcp: FastMCP, token: str | None, home: Path | None) -> None:
    """``/sessions`` and ``/sessions/{id}`` on the HTTP server: the report, refreshing every
    2 s while a run goes on. Same token as /mcp, as ``Authorization: Bearer`` or ``?token=``
    (browsers cannot send headers from the address bar)."""
    import hmac
    from urllib.parse import quote

    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response

    def allowed(request: Request) -> bool:
        if token is None:
            return True
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = given or request.query_params.get("token", "")
        return hmac.compare_digest(given.encode(), token.encode())

    readers: list[ConsensusService] = []

    def service() -> ConsensusService:
        """A service of the pages' own: they only read records, which any service can."""
        if not readers:
            readers.append(ConsensusService.local(home))
        return readers[0]

    @mcp.custom_route("/sessions", methods=["GET"])
    async def sessions_page(request: Request) -> Response:
        if not allowed(request):
            return Response("missing or wrong token", status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})
        from massgen_mcp.render.html import render_session_list

        suffix = f"?token={quote(request.query_params['token'])}" if (
            "token" in request.query_params) else ""
        found, _ = service().list_sessions(limit=200)
        return HTMLResponse(render_session_list(found, link_suffix=suffix))

    @mcp.custom_route("/sessions/{session_id}", methods=["GET"])
    async def session_page(request: Request) -> Response:
        if not allowed(request):
            return Response("missing or wrong token", status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})
        from massgen_mcp.render.html import render_report

        try:
            record = service().record(request.path_params["session_id"])
        except MassgenError as exc:
            return Response(str(exc), status_code=404)
        return HTMLResponse(render_report(record, live=True))


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
START = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                        open_world_hint=True)

SessionId = Annotated[str, Field(description="id returned by run_consensus", max_length=64)]
WaitS = Annotated[float, Field(ge=0, le=600, description=(
    "wait up to this many seconds (capped at 50) for the run to finish; 0 returns at once"))]


def create_server(*, home: Path | None = None, root: Path | None = None,
                  auth: AuthProvider | None = None, token: str | None = None,
                  service: ConsensusService | None = None, openai_api: bool = False,
                  pool: PoolConfig | None = None, tasks: bool = False) -> FastMCP:
    """Build the FastMCP app. ``home`` holds the records (default ./.massgen or
    $MASSGEN_HOME); ``root`` is the folder ``context_files`` are read from (default cwd);
    ``token`` guards the live HTTP pages the same way ``auth`` guards /mcp; ``service``
    replaces the one built from ``home`` and ``root`` (the stdio server keeps a handle on it
    to stop its runs on a signal); ``openai_api`` adds ``/v1/chat/completions`` and
    ``/v1/models`` (HTTP only). ``pool`` makes this a front end of a worker pool: runs go to
    ``massgen-mcp worker`` processes through Redis. ``tasks`` makes ``run_consensus``
    task-capable (the MCP tasks extension), on the pool's Redis or in memory without one."""

    @contextlib.asynccontextmanager
    async def lifespan(_server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        nonlocal service
        from massgen_mcp.providers.litellm_provider import warm_up

        workspace = Workspace(root or Path.cwd())
        if service is None and pool is not None:
            service = await ConsensusService.pool(pool, home, workspace)
        service = service or ConsensusService.local(home, workspace)
        # In a pool, a run whose process is gone is redelivered to another worker instead.
        interrupted = service.mark_interrupted() if pool is None else []
        if interrupted:
            log.warning("marked %d run(s) interrupted: %s", len(interrupted),
                        ", ".join(interrupted))

        async def warm() -> None:
            await asyncio.sleep(WARM_UP_DELAY_S)
            await warm_up()

        background = [asyncio.create_task(warm(), name="litellm-warm-up")]
        if pool is not None:  # serve_http joined the pool; this keeps it knowing us
            from massgen_mcp.pool.frontends import Membership

            background.append(asyncio.create_task(Membership(pool, token).keep(),
                                                  name="massgen-pool-membership"))
        try:
            yield {"service": service}
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await service.aclose(interrupt=True)  # a host restart: the runs can resume

    mcp = FastMCP("massgen", instructions=INSTRUCTIONS, version=__version__, lifespan=lifespan,
                  mask_error_details=True, auth=auth)
    task_config = None
    if tasks:
        from fastmcp.utilities.tasks import TaskConfig
        from fastmcp_tasks import TasksExtension

        if pool is not None:  # the tasks' Docket reads Redis too: see pool/payloads.py
            from massgen_mcp.pool.payloads import guard_docket

            guard_docket()
        # The tasks' own Docket, next to the pool's: a task only waits on its session,
        # which the pool's workers run, so every front end takes many of them.
        mcp.add_extension(TasksExtension(url=pool.url if pool else "memory://",
                                         name=f"{pool.name if pool else 'massgen'}-tasks",
                                         concurrency=TASK_CONCURRENCY))
        task_config = TaskConfig(mode="optional")
    add_health_route(mcp, pool, lambda: service)

    def tool(**options: Any) -> Callable[[ToolFn], ToolFn]:
        """``mcp.tool`` without an output schema. No host puts output schemas into the
        model's context, yet they were two thirds of tools/list (~15k characters, carried in
        every host conversation); results still come as structuredContent and as text."""
        decorate: Callable[[ToolFn], ToolFn] = mcp.tool(output_schema=None, **options)
        return decorate

    async def _wait_and_wrap(ctx: Context, started: StartedRun, wait_s: float, message: str
                             ) -> RunHandle:
        """The handle of a run just started; with ``wait_s``, wait that long for it to finish
        (sending progress) and include the result if it did."""
        service = _service(ctx)
        status = await service.status(started.session_id)
        wait = min(wait_s, max_wait_s())
        if wait > 0:
            status = await service.wait(started.session_id, wait, until_done=True,
                                        on_change=_progress_reporter(ctx))
        handle = RunHandle(session_id=started.session_id, status=status.status,
                           record_dir=str(started.record_dir), message=message)
        if status.done:
            handle.result = result_view(await service.result(started.session_id),
                                        str(started.record_dir))
            handle.message = "finished; the result is included"
        return handle

    @tool(annotations=START, task=task_config)
    async def run_consensus(
        question: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                                       description="the question for the team")],
        ctx: Context,
        models: Annotated[list[str] | None, Field(
            min_length=1, max_length=MAX_AGENTS,
            description="litellm model strings, one agent each, e.g. "
                        "['openai/gpt-4o-mini', 'anthropic/claude-haiku-4-5']; cli/claude, "
                        "cli/codex, cli/gemini run the user's logged-in coding CLI")] = None,
        config: Annotated[str | None, Field(
            description="instead of models: a MassGen YAML config path or @preset")] = None,
        base_url: Annotated[str | None, Field(
            description="OpenAI-compatible endpoint for agents without their own")] = None,
        context: Annotated[str | None, Field(max_length=MAX_CONTEXT_CHARS,
                                             description="background text for every agent")
                           ] = None,
        context_files: Annotated[list[str] | None, Field(
            max_length=20, description="text files (relative to the server's working "
                                       "directory) shared with every agent")] = None,
        options: Annotated[RunOptions | None, Field(
            description="limits such as timeout_s, max_cost_usd, max_answers_per_agent")
                           ] = None,
        wait_s: WaitS = 0,
    ) -> RunHandle:
        """Ask a team of models to answer a question and agree on one answer. Returns a
        session_id at once; then poll get_status(wait_s=30) and read get_result."""
        with _tool_errors():
            spec = RunSpec(question=question, models=models, config=config,
                           base_url=base_url, context=context,
                           context_files=context_files or [], options=options)
            task_id = ctx.task_id
            if task_id is not None:  # an MCP task: its result is the run's result
                return await _run_as_task(ctx, task_id, spec)
            started = await _service(ctx).start(spec, await _client_root(ctx))
            return await _wait_and_wrap(
                ctx, started, wait_s,
                "started; call get_status with wait_s=30 until done, then get_result")

    @tool(annotations=READ)
    async def get_status(
        session_id: SessionId, ctx: Context, wait_s: WaitS = 0,
        after_revision: Annotated[int | None, Field(ge=0, description=(
            "revision of the last status you saw; with wait_s, returns at once if the run "
            "has changed since"))] = None,
    ) -> StatusView:
        """Progress of a run: phase, each agent's state, votes so far, usage. With wait_s,
        returns as soon as anything changes."""
        with _tool_errors():
            service = _service(ctx)
            wait = min(wait_s, max_wait_s())
            status = (await service.wait(session_id, wait, after_revision=after_revision)
                      if wait > 0 else await service.status(session_id))
            return status_view(status)

    @tool(annotations=READ, app=AppConfig(resource_uri=VIEW_URI))
    async def get_result(
        session_id: SessionId, ctx: Context,
        detail: Annotated[Detail, Field(
            description="summary truncates each agent's answer; full returns everything")
                          ] = "summary",
    ) -> ResultView:
        """The outcome of a finished run: final answer, winner, votes with reasons, each
        agent's last answer, usage and cost."""
        with _tool_errors():
            service = _service(ctx)
            return result_view(await service.result(session_id),
                               str(service.store.folder(session_id)), detail)

    @tool(annotations=READ)
    async def list_sessions(
        ctx: Context,
        status: Annotated[RunStatus | None, Field(description="filter")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page",
                                            max_length=64)] = None,
    ) -> SessionPage:
        """Past and running sessions, newest first."""
        with _tool_errors():
            return session_page(*_service(ctx).list_sessions(status, limit, cursor))

    @tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                          idempotent_hint=True, open_world_hint=False))
    async def cancel_session(session_id: SessionId, ctx: Context) -> CancelView:
        """Stop a running session; what was recorded so far is kept."""
        with _tool_errors():
            status, stopped = await _service(ctx).cancel(session_id)
            return cancel_view(session_id, status, stopped)

    @tool(annotations=START)
    async def continue_session(
        session_id: SessionId,
        follow_up: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)],
        ctx: Context,
        wait_s: WaitS = 0,
    ) -> RunHandle:
        """Ask the same team a follow-up; the earlier question and final answer are context."""
        with _tool_errors():
            started = await _service(ctx).continue_session(session_id, follow_up)
            return await _wait_and_wrap(ctx, started, wait_s,
                                        "follow-up started; poll get_status")

    @tool(annotations=START)
    async def resume_session(session_id: SessionId, ctx: Context, wait_s: WaitS = 0
                             ) -> RunHandle:
        """Continue an interrupted run (the server stopped mid-run) from its recorded
        answers."""
        with _tool_errors():
            started = await _service(ctx).resume_session(session_id)
            return await _wait_and_wrap(ctx, started, wait_s, "resumed; poll get_status")

    @tool(annotations=READ)
    async def check_setup(ctx: Context) -> SetupView:
        """What this server can use: providers with keys (names only), coding-agent CLIs and
        whether each is logged in, local servers, the embedded model, the default team and
        why, where records are stored."""
        with _tool_errors():
            return await _service(ctx).check_setup()

    @mcp.resource("massgen://sessions/{session_id}/status", mime_type="application/json")
    async def status_resource(session_id: str, ctx: Context) -> str:
        """status.json of a session."""
        with _tool_errors():
            return (await _service(ctx).status(session_id)).model_dump_json(indent=2)

    @mcp.resource("massgen://sessions/{session_id}/result", mime_type="application/json")
    async def result_resource(session_id: str, ctx: Context) -> str:
        """result.json of a finished session (full answers)."""
        with _tool_errors():
            return (await _service(ctx).result(session_id)).model_dump_json(indent=2)

    @mcp.resource("massgen://sessions/{session_id}/events", mime_type="application/jsonl")
    async def events_resource(session_id: str, ctx: Context) -> str:
        """The full event log (events.jsonl) of a session."""
        with _tool_errors():
            events = _service(ctx).events(session_id)
        return "".join(e.to_json() + "\n" for e in events)

    @mcp.resource("massgen://sessions/{session_id}/answers/{label}", mime_type="text/markdown")
    async def answer_resource(session_id: str, label: str, ctx: Context) -> str:
        """One answer of a session by its label (A1, B2, ...)."""
        with _tool_errors():
            return _service(ctx).answer(session_id, label)

    @mcp.resource("massgen://sessions/{session_id}/report", mime_type="text/html")
    async def report_resource(session_id: str, ctx: Context) -> str:
        """A self-contained HTML report: timeline, vote matrix, answers, usage."""
        with _tool_errors():
            return _service(ctx).report(session_id)

    @mcp.resource(VIEW_URI, name="session_view", app=AppConfig(prefers_border=True))
    def session_view() -> str:
        """The inline view of a session for hosts with MCP Apps (shown with get_result)."""
        return view_html()

    add_live_pages(mcp, token, home)
    if openai_api:
        from massgen_mcp.server.openai_api import add_openai_routes

        def running_service() -> ConsensusService:
            assert service is not None, "the server's lifespan has not started"
            return service

        add_openai_routes(mcp, token, running_service)

    @mcp.prompt
    def consensus(question: str) -> str:
        """Get a team of models to agree on an answer to a question."""
        return (f"Use the massgen tools to get a team answer to this question:\n\n{question}\n\n"
                "Call run_consensus, then get_status with wait_s=30 until it is done, then "
                "get_result. Report the final answer and mention the winner and the vote tally.")

    return mcp
