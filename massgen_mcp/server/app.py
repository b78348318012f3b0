"""The MCP surface: registers tools, resources and a prompt over the consensus service.

Thin on purpose, a protocol layer only: the tools' names, argument schemas and descriptions
live here (what a host sees in tools/list); what each does is a plain function of
server/tools.py; the HTTP pages are server/pages.py, the token check server/guard.py.

This module must not import litellm (it costs ~3 s): the server answers ``initialize`` first
and warms litellm in the background afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastmcp import Context, FastMCP
from fastmcp.apps import AppConfig
from fastmcp.tools import ToolResult
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from massgen_mcp._version import __version__
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import MAX_AGENTS, RunOptions
from massgen_mcp.core.outcomes import Severity
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import (
    MAX_CONTEXT_CHARS,
    MAX_QUESTION_CHARS,
    RunSpec,
    format_validation_error,
)
from massgen_mcp.review.diff import MAX_DIFF_BYTES
from massgen_mcp.review.request import MAX_FOCUS_CHARS
from massgen_mcp.review.start import ChangeToReview
from massgen_mcp.server import tools
from massgen_mcp.server.handshake import INSTRUCTIONS
from massgen_mcp.server.pages import add_health_route, add_live_pages
from massgen_mcp.server.record_reads import read_off_loop
from massgen_mcp.server.schemas import serve_input_schemas
from massgen_mcp.server.session_view import VIEW_URI, view_html
from massgen_mcp.server.texts import readable
from massgen_mcp.server.views import Detail, Until
from massgen_mcp.service import MAX_NOTE_CHARS, ConsensusService
from massgen_mcp.team.context_files import Workspace

if TYPE_CHECKING:  # the auth stack costs ~0.3 s to import; stdio never needs it
    from fastmcp.server.auth import AuthProvider
    from fastmcp.utilities.tasks import TaskConfig

    from massgen_mcp.pool.frontends import Membership
    from massgen_mcp.pool.live import PoolConfig
    from massgen_mcp.server.openai_api import OwnedTasks

log = logging.getLogger(__name__)

MAX_REF_CHARS = 256  # a branch, tag or commit name
MAX_PATHS = 200  # files or folders one review names
TASK_CONCURRENCY = 200  # MCP tasks one front end follows at once (each only waits)
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])
WARM_UP_DELAY_S = 1.0  # let the handshake go first; litellm's import holds the GIL for seconds


@dataclass
class ServiceSlot:
    """The server's one service: given, or built when the lifespan starts. The tools get it
    from the lifespan context; the HTTP routes (built before the lifespan) ask :meth:`get`."""

    service: ConsensusService | None = None

    def get(self) -> ConsensusService | None:
        return self.service


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
START = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                        open_world_hint=True)

SessionId = Annotated[str, Field(description="id returned by run_consensus", max_length=64)]
# The schema states the server's cap (MASSGEN_MCP_MAX_WAIT_S, 50 s unless the operator changed
# it); a larger value is not refused, only capped, so a model that asks for 60 loses no turn.
MAX_WAIT_S = SETTINGS.mcp_max_wait_s.read()
WaitS = Annotated[float, Field(ge=0, json_schema_extra={"maximum": MAX_WAIT_S}, description=(
    f"seconds to wait (at most {MAX_WAIT_S:g}) for the run's end, sending progress; 0: "
    "return at once"))]
# The team, as every tool that starts a run takes it.
Models = Annotated[list[str] | None, Field(
    min_length=1, max_length=MAX_AGENTS,
    description="litellm model strings, one agent each, e.g. "
                "['openai/gpt-4o-mini', 'anthropic/claude-haiku-4-5']; cli/claude, "
                "cli/codex, cli/gemini run the user's logged-in coding CLI")]
ConfigName = Annotated[str | None, Field(
    description="instead of models: a MassGen YAML config path or @preset")]
BaseUrl = Annotated[str | None, Field(
    description="OpenAI-compatible endpoint for agents without their own")]


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


def run_options(given: dict[str, Any]) -> RunOptions:
    """review_changes's ``options``, checked as run_consensus's are: its schema leaves the
    fields to run_consensus's (tools/list is in every host conversation, and the options'
    schema is a quarter of it), so a wrong one is refused here, naming it."""
    try:
        return RunOptions.model_validate(given)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "options.")) from None


def _add_tools(mcp: FastMCP, task_config: TaskConfig | None) -> None:
    """Register the tools: each validates its arguments (pydantic, from the signature) and
    calls one function of server/tools.py inside :func:`tools.tool_errors`."""

    def tool(**options: Any) -> Callable[[ToolFn], ToolFn]:
        """``mcp.tool`` without an output schema. No host puts output schemas into the
        model's context, yet they were two thirds of tools/list (~15k characters, carried in
        every host conversation); results still come as structuredContent and as text."""
        decorate: Callable[[ToolFn], ToolFn] = mcp.tool(output_schema=None, **options)
        return decorate

    @tool(annotations=START, task=task_config)
    async def run_consensus(
        question: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                                       description="the question for the team")],
        ctx: Context,
        models: Models = None,
        config: ConfigName = None,
        base_url: BaseUrl = None,
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
    ) -> ToolResult:
        """Ask a team of models to answer a question and agree on one answer. Call it with
        wait_s=50: this one call returns the final answer, the winner and the vote tally when
        the run ends within the wait, as most do. Only if it returns still running, call
        get_status(session_id, wait_s=50) until done, then get_result."""
        with tools.tool_errors():
            spec = RunSpec(question=question, models=models, config=config,
                           base_url=base_url, context=context,
                           context_files=context_files or [], options=options)
            return readable(await tools.run_consensus(tools.service_of(ctx), ctx, spec,
                                                      wait_s))

    @tool(annotations=START, task=task_config)
    async def review_changes(
        ctx: Context,
        staged: Annotated[bool, Field(description="review what is staged")] = False,
        base: Annotated[str | None, Field(
            max_length=MAX_REF_CHARS,
            description="review the branch's commits since its merge base with this ref "
                        "(e.g. main)")] = None,
        commit: Annotated[str | None, Field(max_length=MAX_REF_CHARS,
                                            description="review one commit")] = None,
        patch: Annotated[str | None, Field(
            max_length=MAX_DIFF_BYTES,
            description="review a unified diff given as text, e.g. a pull request's (gh pr "
                        "diff); its paths are the repository's")] = None,
        # None, not []: a task's runner (Docket) hashes the signature, defaults included.
        paths: Annotated[list[str] | None, Field(
            max_length=MAX_PATHS, description="review these files or folders (relative to "
                                              "the repository) as they are")] = None,
        focus: Annotated[str | None, Field(
            max_length=MAX_FOCUS_CHARS,
            description="what to look at most, e.g. 'security'")] = None,
        fail_on: Annotated[Severity, Field(description=(
            "the least severity of an agreed finding that makes the verdict "
            "changes_requested (an agreed blocker always blocks)"))] = Severity.MAJOR,
        models: Models = None,
        config: ConfigName = None,
        base_url: BaseUrl = None,
        options: Annotated[dict[str, Any] | None, Field(
            description="limits, as run_consensus's options (timeout_s, max_cost_usd, ...)")
                           ] = None,
        wait_s: WaitS = 0,
    ) -> ToolResult:
        """A second opinion on a code change before it merges: a team of models reviews the
        changes in the user's repository and agrees on findings (file:line, severity, fix)
        and a verdict. By default the working tree against HEAD; or staged, base (a
        branch), commit, patch (a PR's diff) or paths. For a question, not a change, use
        run_consensus. Call it with wait_s=50; if it returns still running, get_status with
        wait_s=50 until done, then get_result."""
        with tools.tool_errors():
            limits = None if options is None else run_options(options)
            change = ChangeToReview(staged=staged, base=base, commit=commit, patch=patch,
                                    paths=paths or ())
            return readable(await tools.review_changes(
                tools.service_of(ctx), ctx, change, focus=focus, threshold=fail_on,
                models=models, config=config, base_url=base_url, options=limits,
                wait_s=wait_s))

    @tool(annotations=READ)
    async def get_status(
        session_id: SessionId, ctx: Context, wait_s: WaitS = 0,
        until: Annotated[Until, Field(description=(
            "with wait_s: 'done' returns when the run ends; 'change' at its next change "
            "(live views)"))] = "done",
        after_revision: Annotated[int | None, Field(ge=0, description=(
            "with until='change': the revision you last saw; returns at once if the run has "
            "changed since"))] = None,
    ) -> ToolResult:
        """For a run still going after run_consensus's wait: phase, each agent's state,
        votes so far, usage. With wait_s=50 it returns when the run ends (sending progress),
        so one call per 50 s is enough; then get_result."""
        with tools.tool_errors():
            return readable(await tools.get_status(tools.service_of(ctx), ctx, session_id,
                                                   wait_s, until, after_revision))

    @tool(annotations=READ, app=AppConfig(resource_uri=VIEW_URI))
    async def get_result(
        session_id: SessionId, ctx: Context,
        detail: Annotated[Detail, Field(
            description="summary clips answers and vote reasons; full returns everything")
                          ] = "summary",
    ) -> ToolResult:
        """The outcome of a finished run: final answer, winner, votes with reasons, each
        agent's last answer, usage and cost."""
        with tools.tool_errors():
            return readable(await tools.get_result(tools.service_of(ctx), session_id, detail))

    @tool(annotations=READ)
    async def list_sessions(
        ctx: Context,
        status: Annotated[RunStatus | None, Field(description="filter")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page",
                                            max_length=64)] = None,
    ) -> ToolResult:
        """Past and running sessions, newest first."""
        with tools.tool_errors():
            return readable(tools.list_sessions(tools.service_of(ctx), status, limit, cursor))

    @tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                          idempotent_hint=True, open_world_hint=False))
    async def cancel_session(session_id: SessionId, ctx: Context) -> ToolResult:
        """Stop a running session; what was recorded so far is kept."""
        with tools.tool_errors():
            return readable(await tools.cancel_session(tools.service_of(ctx), session_id))

    @tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                      idempotent_hint=False, open_world_hint=False))
    async def steer_session(
        session_id: SessionId,
        # No min_length: an empty note gets clean_note's sentence, not pydantic's.
        message: Annotated[str, Field(max_length=MAX_NOTE_CHARS)],
        ctx: Context,
    ) -> ToolResult:
        """Send a running team the user's note (e.g. a constraint they forgot); every agent
        sees it next turn and earlier votes no longer count. At most 3 a minute."""
        with tools.tool_errors():
            return readable(await tools.steer_session(tools.service_of(ctx), session_id,
                                                      message))

    @tool(annotations=START)
    async def continue_session(
        session_id: SessionId,
        follow_up: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)],
        ctx: Context,
        wait_s: WaitS = 0,
    ) -> ToolResult:
        """Ask the same team a follow-up; the earlier question and final answer are context.
        Returns a NEW session_id: poll that one with get_status, not the earlier one."""
        with tools.tool_errors():
            return readable(await tools.continue_session(tools.service_of(ctx), ctx,
                                                         session_id, follow_up, wait_s))

    @tool(annotations=START)
    async def resume_session(session_id: SessionId, ctx: Context, wait_s: WaitS = 0
                             ) -> ToolResult:
        """Continue an interrupted run (the server stopped mid-run) from its recorded
        answers."""
        with tools.tool_errors():
            return readable(await tools.resume_session(tools.service_of(ctx), ctx, session_id,
                                                       wait_s))

    @tool(annotations=READ)
    async def check_setup(ctx: Context) -> ToolResult:
        """What this server can use: providers with keys (names only), coding-agent CLIs and
        whether each is logged in, local servers, the embedded model, the default team and
        why, where records are stored."""
        with tools.tool_errors():
            return readable(await tools.service_of(ctx).check_setup())


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
                "(file:line, severity, claim, fix), and say who dissented and why.")

    @mcp.prompt
    def consensus(question: str) -> str:
        """Get a team of models to agree on an answer to a question."""
        return (f"Use the massgen tools to get a team answer to this question:\n\n{question}\n\n"
                "Call run_consensus with wait_s=50 (its reply has the result if the run ends "
                "by then); otherwise get_status with wait_s=50 until it is done, then "
                "get_result. Report the final answer and mention the winner and the vote tally.")
