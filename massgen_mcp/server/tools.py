"""The MCP tools, each written once: the signature is the input schema hosts see, the docstring
the description, the body what the tool does over the server's :class:`ConsensusService`.

:func:`tool` records a function for server/app.py to register, as the MCP SDK's
``Tool.from_function`` takes a tool from a function; what every tool shares is
:func:`host_function`'s, once: the host's ``ctx`` in place of ``service``, our errors as
:func:`tool_errors` words them, the view as :func:`~massgen_mcp.server.texts.readable` text.
Starting a run and waiting on it is server/launch.py's.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_type_hints

from fastmcp import Context
from fastmcp.apps import AppConfig
from fastmcp.exceptions import ToolError
from fastmcp.tools import ToolResult
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from massgen_mcp.core.errors import (
    ConfigError,
    MassgenError,
    RunNotFinishedError,
    SessionNotFoundError,
)
from massgen_mcp.core.options import MAX_AGENTS, RunOptions
from massgen_mcp.core.outcomes import Severity, Tier
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import (
    MAX_CONTEXT_CHARS,
    MAX_QUESTION_CHARS,
    RunSpec,
    format_validation_error,
)
from massgen_mcp.review.diff import MAX_DIFF_BYTES
from massgen_mcp.review.request import MAX_FOCUS_CHARS
from massgen_mcp.review.start import ChangeToReview, start_review
from massgen_mcp.server.launch import client_root, launch, max_wait_s, wait_and_wrap, wait_reporting
from massgen_mcp.server.session_view import VIEW_URI
from massgen_mcp.server.texts import readable
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
    result_view,
    session_page,
    status_view,
    steer_view,
)
from massgen_mcp.service import MAX_NOTE_CHARS, ConsensusService, StartedRun
from massgen_mcp.service.setup import SetupView

MAX_REF_CHARS = 256  # a branch, tag or commit name
MAX_PATHS = 200  # files or folders one review names
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])

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


@dataclass(frozen=True)
class Registered:
    """A tool as server/app.py registers it: its function and its FastMCP options."""

    fn: Callable[..., Any]
    annotations: ToolAnnotations
    task: bool = False  # an MCP task may run it, when the server has tasks on
    app: AppConfig | None = None


TOOLS: list[Registered] = []  # in the order of tools/list


def tool(annotations: ToolAnnotations, *, task: bool = False, app: AppConfig | None = None
         ) -> Callable[[ToolFn], ToolFn]:
    """Record the decorated function as a tool; the function itself stays as written."""

    def register(fn: ToolFn) -> ToolFn:
        TOOLS.append(Registered(fn, annotations, task, app))
        return fn

    return register


def host_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as FastMCP calls it: a ``ctx`` in place of its ``service`` (both, if ``fn``
    takes ``ctx`` too), the rest of its signature as written (FastMCP derives the input
    schema from it and hides ``ctx``), run inside :func:`tool_errors` and made
    :func:`readable`. The signature is given with its annotations resolved: FastMCP and
    pydantic read it, not ``fn``'s module."""
    hints = get_type_hints(fn, include_extras=True)
    signature = inspect.signature(fn)
    takes_ctx = "ctx" in signature.parameters
    parameters = [
        parameter.replace(name="ctx", annotation=Context) if parameter.name == "service"
        else parameter.replace(annotation=hints[parameter.name])
        for parameter in signature.parameters.values()
        if not (parameter.name == "service" and takes_ctx)]

    async def call(ctx: Context, **arguments: Any) -> ToolResult:
        with tool_errors():
            view = fn(service_of(ctx), ctx=ctx, **arguments) if takes_ctx \
                else fn(service_of(ctx), **arguments)
            return readable(await view if inspect.isawaitable(view) else view)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__, call.__module__ = fn.__doc__, fn.__module__
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=ToolResult)
    call.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": ToolResult}
    return call


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


def run_options(given: dict[str, Any]) -> RunOptions:
    """review_changes's ``options``, checked as run_consensus's are: its schema leaves the
    fields to run_consensus's (tools/list is in every host conversation, and the options'
    schema is a quarter of it), so a wrong one is refused here, naming it."""
    try:
        return RunOptions.model_validate(given)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "options.")) from None


@tool(START, task=True)
async def run_consensus(
    service: ConsensusService,
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
) -> RunHandle:
    """Ask a team of models to answer a question and agree on one answer. Call it with
    wait_s=50: this one call returns the final answer, the winner and the vote tally when
    the run ends within the wait, as most do. Only if it returns still running, call
    get_status(session_id, wait_s=50) until done, then get_result."""
    spec = RunSpec(question=question, models=models, config=config, base_url=base_url,
                   context=context, context_files=context_files or [], options=options)

    async def start() -> StartedRun:
        return await service.start(spec, await client_root(ctx))

    return await launch(service, ctx, start, wait_s)


@tool(START, task=True)
async def review_changes(
    service: ConsensusService,
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
        "least severity of a counted finding that requests changes (a blocker blocks)"))
                       ] = Severity.MAJOR,
    fail_on_tier: Annotated[Literal[Tier.AGREED, Tier.UNCONFIRMED], Field(description=(
        "count agreed findings, or unconfirmed too"))] = Tier.AGREED,
    models: Models = None,
    config: ConfigName = None,
    base_url: BaseUrl = None,
    options: Annotated[dict[str, Any] | None, Field(
        description="limits, as run_consensus's options (timeout_s, max_cost_usd, ...)")
                       ] = None,
    wait_s: WaitS = 0,
) -> ReviewHandle:
    """A second opinion on a code change before it merges: a team of models reviews the
    changes in the user's repository and agrees on findings (file:line, severity, fix)
    and a verdict. By default the working tree against HEAD; or staged, base (a
    branch), commit, patch (a PR's diff) or paths. For a question, not a change, use
    run_consensus. Call it with wait_s=50; if it returns still running, get_status with
    wait_s=50 until done, then get_result."""
    limits = None if options is None else run_options(options)
    change = ChangeToReview(staged=staged, base=base, commit=commit, patch=patch,
                            paths=paths or ())
    notes: list[str] = []

    async def start() -> StartedRun:
        # The client's repository (its root, else the server's folder), confined as every
        # model's call is: see massgen_mcp.review.start.
        workspace = await client_root(ctx) or service.workspace
        begun = await start_review(service, workspace, change, focus=focus, models=models,
                                   config=config, base_url=base_url, options=limits,
                                   threshold=fail_on, tier=fail_on_tier, split_ok=False)
        notes.extend(begun.notes)
        return begun.run

    handle = await launch(service, ctx, start, wait_s)
    return ReviewHandle(**dict(handle), notes=notes)


@tool(READ)
async def get_status(
    service: ConsensusService, session_id: SessionId, ctx: Context, wait_s: WaitS = 0,
    until: Annotated[Until, Field(description=(
        "with wait_s: 'done' returns when the run ends; 'change' at its next change "
        "(live views)"))] = "done",
    after_revision: Annotated[int | None, Field(ge=0, description=(
        "with until='change': the revision you last saw; returns at once if the run has "
        "changed since"))] = None,
) -> StatusView:
    """For a run still going after run_consensus's wait: phase, each agent's state,
    votes so far, usage. With wait_s=50 it returns when the run ends (sending progress),
    so one call per 50 s is enough; then get_result."""
    wait = min(wait_s, max_wait_s())
    status = (await wait_reporting(service, ctx, session_id, wait, until_done=until == "done",
                                   after_revision=after_revision)
              if wait > 0 else await service.status(session_id))
    return status_view(status)


@tool(READ, app=AppConfig(resource_uri=VIEW_URI))
async def get_result(
    service: ConsensusService, session_id: SessionId,
    detail: Annotated[Detail, Field(
        description="summary clips answers and vote reasons; full returns everything")
                      ] = "summary",
) -> ResultView:
    """The outcome of a finished run: final answer, winner, votes with reasons, each
    agent's last answer, usage and cost."""
    return result_view(await service.result(session_id),
                       str(service.record_folder(session_id)), detail)


@tool(READ)
def list_sessions(
    service: ConsensusService,
    status: Annotated[RunStatus | None, Field(description="filter")] = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page",
                                        max_length=64)] = None,
) -> SessionPage:
    """Past and running sessions, newest first."""
    return session_page(*service.list_sessions(status, limit, cursor))


@tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                      open_world_hint=False))
async def cancel_session(service: ConsensusService, session_id: SessionId) -> CancelView:
    """Stop a running session; what was recorded so far is kept."""
    status, stopped = await service.cancel(session_id)
    return cancel_view(session_id, status, stopped)


@tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                      open_world_hint=False))
async def steer_session(
    service: ConsensusService,
    session_id: SessionId,
    # No min_length: an empty note gets clean_note's sentence, not pydantic's.
    message: Annotated[str, Field(max_length=MAX_NOTE_CHARS)],
) -> SteerView:
    """Send a running team the user's note (e.g. a constraint they forgot); every agent
    sees it next turn and earlier votes no longer count. At most 3 a minute."""
    return steer_view(session_id, await service.steer(session_id, message))


@tool(START)
async def continue_session(
    service: ConsensusService,
    session_id: SessionId,
    follow_up: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)],
    ctx: Context,
    wait_s: WaitS = 0,
) -> RunHandle:
    """Ask the same team a follow-up; the earlier question and final answer are context.
    Returns a NEW session_id: poll that one with get_status, not the earlier one."""
    started = await service.continue_session(session_id, follow_up)
    new = f"a NEW session {started.session_id} (the earlier one, {session_id}, is unchanged)"
    return await wait_and_wrap(
        service, ctx, started, wait_s,
        f"follow-up started as {new}: call get_status on the new id with "
        f"wait_s={POLL_WAIT_S} until done, then get_result",
        f"follow-up finished as {new}; the result is included")


@tool(START)
async def resume_session(service: ConsensusService, session_id: SessionId, ctx: Context,
                         wait_s: WaitS = 0) -> RunHandle:
    """Continue an interrupted run (the server stopped mid-run) from its recorded
    answers."""
    started = await service.resume_session(session_id)
    return await wait_and_wrap(
        service, ctx, started, wait_s,
        f"resumed; call get_status with wait_s={POLL_WAIT_S} until done, then get_result")


@tool(READ)
async def check_setup(service: ConsensusService) -> SetupView:
    """What this server can use: providers with keys (names only), coding-agent CLIs and
    whether each is logged in, local servers, the embedded model, the default team and
    why, where records are stored."""
    return await service.check_setup()


def events_jsonl(service: ConsensusService, session_id: str) -> str:
    return "".join(e.to_json() + "\n" for e in service.events(session_id))
