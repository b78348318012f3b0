"""The MCP surface: registers tools, resources and a prompt over the consensus service.

Thin on purpose, a protocol layer only: the tools (names, argument schemas, descriptions and
what each does) are written once in server/tools.py and registered here; the HTTP pages are
server/pages.py, the token check server/guard.py.

This module must not import litellm (it costs ~3 s): the server answers ``initialize`` first
and warms litellm in the background afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastmcp import Context, FastMCP
from fastmcp.apps import AppConfig
from pydantic import Field

from massgen_mcp._version import __version__
from massgen_mcp.server import tools
from massgen_mcp.server.arguments import ArgumentErrors
from massgen_mcp.server.handshake import INSTRUCTIONS
from massgen_mcp.server.pages import add_health_route, add_live_pages
from massgen_mcp.server.record_reads import read_off_loop
from massgen_mcp.server.schemas import serve_input_schemas
from massgen_mcp.server.session_view import VIEW_URI, view_html
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace

if TYPE_CHECKING:  # the auth stack costs ~0.3 s to import; stdio never needs it
    from fastmcp.server.auth import AuthProvider
    from fastmcp.utilities.tasks import TaskConfig

    from massgen_mcp.pool.frontends import Membership
    from massgen_mcp.pool.live import PoolConfig
    from massgen_mcp.server.openai_api import OwnedTasks

log = logging.getLogger(__name__)

TASK_CONCURRENCY = 200  # MCP tasks one front end follows at once (each only waits)
WARM_UP_DELAY_S = 1.0  # let the handshake go first; litellm's import holds the GIL for seconds


@dataclass
class ServiceSlot:
    """The server's one service: given, or built when the lifespan starts. The tools get it
    from the lifespan context; the HTTP routes (built before the lifespan) ask :meth:`get`."""

    service: ConsensusService | None = None

    def get(self) -> ConsensusService | None:
        return self.service


def create_server(*, home: Path | None = None, root: Path | None = None,
                  auth: AuthProvider | None = None, token: str | None = None,
                  service: ConsensusService | None = None, openai_api: bool = False,
                  pool: PoolConfig | None = None, tasks: bool = False,
                  membership: Membership | None = None) -> FastMCP:
    """Build the FastMCP app. ``home`` holds the records (default ./.massgen or
    $MASSGEN_HOME); ``root`` is the folder ``context_files`` are read from (default cwd);
    ``token`` guards the live HTTP pages the same way ``auth`` guards /mcp; ``service``
    replaces the one built from ``home`` and ``root`` (the stdio server keeps a handle on it
    to stop its runs on a signal); ``openai_api`` adds ``/v1/chat/completions`` and
    ``/v1/models`` (HTTP only). ``pool`` makes this a front end of a worker pool: runs go to
    ``massgen-mcp worker`` processes through Redis. ``tasks`` makes ``run_consensus``
    task-capable (the MCP tasks extension), on the pool's Redis or in memory without one.
    ``membership``: the front end's place in its pool, as serve_http joined it (whose
    :class:`~massgen_mcp.pool.frontends.ServingGate` stops the HTTP app while it differs);
    kept up to date here."""

    slot = ServiceSlot(service)
    owned: list[OwnedTasks] = []  # the /v1 routes' tasks, when they are on

    @contextlib.asynccontextmanager
    async def lifespan(_server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        from massgen_mcp.team.discover import warm_up_litellm

        workspace = Workspace(root or Path.cwd())
        built = slot.service is None  # then it is closed with the lifespan, and let go
        if slot.service is None and pool is not None:
            slot.service = await ConsensusService.pool(pool, home, workspace)
        running = slot.service = slot.service or ConsensusService.local(home, workspace)
        # In a pool, a run whose process is gone is redelivered to another worker instead.
        interrupted = running.mark_interrupted() if pool is None else []
        if interrupted:
            log.warning("marked %d run(s) interrupted: %s", len(interrupted),
                        ", ".join(interrupted))

        async def warm() -> None:
            await asyncio.sleep(WARM_UP_DELAY_S)
            await warm_up_litellm()

        # A pool's front end calls no model (its workers do): litellm would cost it ~2 s of
        # CPU and ~150 MB for nothing.
        background = [] if pool is not None else [
            asyncio.create_task(warm(), name="litellm-warm-up")]
        if pool is not None:  # serve_http joined the pool; this keeps it knowing us
            from massgen_mcp.pool.frontends import Membership

            member = membership or Membership(pool, token, running.home)
            background.append(asyncio.create_task(member.keep(),
                                                  name="massgen-pool-membership"))
        try:
            yield {"service": running}
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await running.aclose(interrupt=True)  # a host restart: the runs can resume
            if built:  # a lifespan run again (an in-memory client that reconnects) builds
                slot.service = None  # a new service instead of reaching a closed one
            for routes_tasks in owned:  # after the runs were interrupted, not cancelled
                await routes_tasks.aclose()

    mcp = FastMCP("massgen", instructions=INSTRUCTIONS, version=__version__, lifespan=lifespan,
                  mask_error_details=True, auth=auth)
    mcp.add_middleware(ArgumentErrors())  # a wrong argument: one line, not pydantic's report
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
    add_health_route(mcp, pool, slot.get)
    add_live_pages(mcp, token, slot.get)
    if openai_api:
        from massgen_mcp.server.openai_api import OwnedTasks, add_openai_routes

        def running_service() -> ConsensusService:
            assert slot.service is not None, "the server's lifespan has not started"
            return slot.service

        owned.append(OwnedTasks())
        add_openai_routes(mcp, token, running_service, owned[0])
    _add_tools(mcp, task_config)
    _add_resources(mcp)
    serve_input_schemas(mcp)
    return mcp


def _add_tools(mcp: FastMCP, task_config: TaskConfig | None) -> None:
    """Register the tools of server/tools.py, in its order. No output schemas: no host puts
    them into the model's context, yet they were two thirds of tools/list (~15k characters,
    carried in every host conversation); results still come as structuredContent and text."""
    for registered in tools.TOOLS:
        mcp.tool(tools.host_function(registered.fn), output_schema=None,
                 annotations=registered.annotations, app=registered.app,
                 task=task_config if registered.task else None)


def _add_resources(mcp: FastMCP) -> None:
    """Register the session resources, the MCP Apps view and the prompt."""

    @mcp.resource("massgen://sessions/{session_id}/status", mime_type="application/json")
    async def status_resource(session_id: str, ctx: Context) -> str:
        """status.json of a session."""
        with tools.tool_errors():
            return (await tools.service_of(ctx).status(session_id)).model_dump_json(indent=2)

    @mcp.resource("massgen://sessions/{session_id}/result", mime_type="application/json")
    async def result_resource(session_id: str, ctx: Context) -> str:
        """result.json of a finished session (full answers)."""
        with tools.tool_errors():
            return (await tools.service_of(ctx).result(session_id)).model_dump_json(indent=2)

    # A record is read in a worker thread: a planted events.jsonl near its size cap took
    # minutes to read, and read on the event loop it froze every other call (issue 57, N6).
    @mcp.resource("massgen://sessions/{session_id}/events", mime_type="application/jsonl")
    async def events_resource(session_id: str, ctx: Context) -> str:
        """The full event log (events.jsonl) of a session."""
        with tools.tool_errors():
            return await read_off_loop(tools.events_jsonl, tools.service_of(ctx), session_id)

    @mcp.resource("massgen://sessions/{session_id}/answers/{label}", mime_type="text/markdown")
    async def answer_resource(session_id: str, label: str, ctx: Context) -> str:
        """One answer of a session by its label (A1, B2, ...)."""
        with tools.tool_errors():
            return tools.service_of(ctx).answer(session_id, label)

    @mcp.resource("massgen://sessions/{session_id}/report", mime_type="text/html")
    async def report_resource(session_id: str, ctx: Context) -> str:
        """A self-contained HTML report: timeline, vote matrix, answers, usage."""
        with tools.tool_errors():
            from massgen_mcp.render.html import render_report

            service = tools.service_of(ctx)
            return await read_off_loop(lambda: render_report(service.record(session_id)))

    @mcp.resource(VIEW_URI, name="session_view", app=AppConfig(prefers_border=True))
    def session_view() -> str:
        """The inline view of a session for hosts with MCP Apps (shown with get_result)."""
        return view_html()

    @mcp.prompt
    def review(
        change: Annotated[str, Field(description=(
            "what to review: empty for the working tree's changes, or e.g. 'staged', 'the "
            "branch against main', 'commit abc123', a pull request's diff"))] = "",
        focus: Annotated[str, Field(description="what to look at most, e.g. security")] = "",
    ) -> str:
        """Get a team of models to review a code change (a second opinion before merging)."""
        what = f"this change: {change}" if change.strip() else \
            "the working tree's changes against HEAD"
        asked = f" Ask it to focus on: {focus}." if focus.strip() else ""
        return (f"Use the massgen tools to get a team review of {what}.\n\n"
                "Call review_changes with wait_s=50, with no argument for the working tree "
                "against HEAD; staged=true for what is staged; base='main' for the branch's "
                "commits since main; commit='SHA' for one commit; patch=<the unified diff "
                "text> for a pull request's diff; paths=[...] for files as they are."
                f"{asked} If it returns still running, call get_status with wait_s=50 until "
                "it is done, then get_result. Report the verdict and each agreed finding "
                "(file:line, severity, claim, fix), then the unconfirmed ones as such (fewer "
                "members back them), and say who dissented and why.")

    @mcp.prompt
    def consensus(question: str) -> str:
        """Get a team of models to agree on an answer to a question."""
        return (f"Use the massgen tools to get a team answer to this question:\n\n{question}\n\n"
                "Call run_consensus with wait_s=50 (its reply has the result if the run ends "
                "by then); otherwise get_status with wait_s=50 until it is done, then "
                "get_result. Report the final answer and mention the winner and the vote tally.")
