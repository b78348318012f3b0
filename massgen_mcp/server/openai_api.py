"""``/v1/chat/completions`` and ``/v1/models`` on the HTTP server: the team as one
OpenAI-compatible model, for any OpenAI SDK client or app that lets you set a base URL.

* ``model`` names the team (:mod:`massgen_mcp.api.team_names`): ``massgen``, ``massgen/@preset`` or
  ``massgen/<name>`` (a config in the user config folder); ``/v1/models`` lists them.
* The last user message is the question, earlier messages are the context.
* The reply's ``content`` is the final answer and ``usage`` the whole team's. The session id,
  winner, tally and status travel in the extra field ``massgen`` and the header
  ``X-Massgen-Session-Id``, so the caller can open the record.
* ``stream: true`` sends the run's progress as ``reasoning_content`` deltas (a channel standard
  clients ignore or show as thinking), then the final answer as ``content``. A client that
  disconnects, streaming or not, cancels the run.
* ``tools``, ``n > 1`` and any parameter a team cannot honour get a 400 in OpenAI's error
  format; sampling settings (``temperature``, ``max_tokens``, ...) are accepted and ignored
  (each agent has its own).

The same bearer token as ``/mcp`` is required when one is set, and a request from a browser
page of another origin, or with a Host header that is not this server's, is refused (403): a
page the user visits must not be able to run models on their keys.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from massgen_mcp.api.python import follow
from massgen_mcp.api.team_names import (
    no_answer,
    run_summary,
    split_messages,
    team_config,
    team_names,
    usage_counts,
)
from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import MassgenError, SessionStateError, UnknownTeamError
from massgen_mcp.core.net import is_loopback
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import MAX_CONTEXT_CHARS, RunSpec, check_question
from massgen_mcp.server.guard import bearer_of, token_matches
from massgen_mcp.server.shutdown import stopping
from massgen_mcp.server.views import progress_message

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from starlette.requests import Request
    from starlette.responses import Response

    from massgen_mcp.service import ConsensusService

SESSION_HEADER = "X-Massgen-Session-Id"
# Accepted and ignored: each agent samples with its own settings.
IGNORED = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "user", "metadata",
    "store", "stream_options", "frequency_penalty", "presence_penalty", "seed",
    "parallel_tool_calls", "reasoning_effort",
})
UNSUPPORTED = {
    "tools": "the team answers in text; it does not call your tools",
    "functions": "the team answers in text; it does not call your functions",
    "tool_choice": "the team answers in text; it does not call your tools",
    "logprobs": "a team's answer has no token log-probabilities",
    "top_logprobs": "a team's answer has no token log-probabilities",
    "response_format": "structured output is not supported; ask for the format in the message",
    "audio": "only text is supported",
    "modalities": "only text is supported",
    "prediction": "predicted outputs are not supported",
    "logit_bias": "per-token biases do not apply to a team",
    "stop": "stop sequences do not apply to a team's final answer",
}
DISCONNECT_POLL_S = 0.5
# A stream with nothing to say checks that its client is still there this often, and sends an
# SSE comment (clients ignore it) so proxies keep the connection open.
KEEPALIVE_S = 1.0
MAX_OWNED_TASKS = 1000  # the /v1 routes' background tasks at once (a stream owns two)
# There is no resume command on the CLI: an interrupted run goes on through the MCP tool.
STOPPING = ("the server is shutting down; the run {sid} was interrupted; when the server is "
            "back, the MCP tool resume_session (session_id {sid}) continues it")


class ApiError(Exception):
    """An error answered in OpenAI's format."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.kind, self.code = status, param, kind, code

    def response(self, headers: dict[str, str] | None = None) -> Response:
        from starlette.responses import JSONResponse

        body = {"error": {"message": redact(str(self)), "type": self.kind,
                          "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=headers)


def check_request(body: Any) -> tuple[str, RunSpec, bool, bool]:
    """(model, the run, stream?, include usage in the stream?) from a request body, or an
    ApiError naming the parameter."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    for name, why in UNSUPPORTED.items():
        if body.get(name) not in (None, [], "none", {"type": "text"}):
            raise ApiError(400, f"{name}: not supported ({why})", param=name)
    n = body.get("n")
    if n is not None and (type(n) is not int or n != 1):
        raise ApiError(400, "n: only 1 is supported (the team gives one answer)", param="n")
    if not isinstance(body.get("stream", False), bool):
        raise ApiError(400, "stream: use true or false", param="stream")
    known = {"model", "messages", "stream", "n", *IGNORED, *UNSUPPORTED}
    for name in body:
        if name not in known:
            raise ApiError(400, f"{name}: unknown parameter; remove it", param=name)
    model = body.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "model: required; use 'massgen' or one of GET /v1/models",
                       param="model")
    try:
        config = team_config(model)
    except UnknownTeamError as exc:
        raise ApiError(404, str(exc), param="model", code="model_not_found") from None
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ApiError(400, "messages: required list of chat messages", param="messages")
    try:
        question, context = split_messages(messages)
        check_question(question, "messages[-1].content")
        if context is not None and len(context) > MAX_CONTEXT_CHARS:
            raise ApiError(400, f"messages: the earlier messages come to {len(context)} "
                                f"characters; the limit is {MAX_CONTEXT_CHARS}",
                           param="messages")
        spec = RunSpec(question=question, context=context, config=config)
    except MassgenError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    stream = body.get("stream") is True
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    return model, spec, stream, usage


def add_openai_routes(mcp: FastMCP, token: str | None,
                      service: Callable[[], ConsensusService], tasks: OwnedTasks) -> None:
    """Add the two routes to ``mcp``'s HTTP app. ``service`` returns the running server's
    service (the runs share its runner and its limits); ``tasks`` holds the routes'
    background tasks (the server's lifespan closes it)."""
    from starlette.responses import JSONResponse, StreamingResponse

    def refused(request: Request) -> Response | None:
        host = request.headers.get("host") or ""
        origin = request.headers.get("origin")
        # A browser page may call only from this server's own origin: any other page the user
        # visits (another local port included) must not run models on their keys.
        if origin and urlsplit(origin).netloc != host:
            return ApiError(403, f"requests from the web page {origin} are refused",
                            kind="permission_error").response()
        try:
            named = urlsplit(f"//{host}").hostname or ""
        except ValueError:
            named = ""
        bound = (request.scope.get("server") or ("", 0))[0]
        if is_loopback(str(bound)) and not is_loopback(named):  # DNS rebinding
            return ApiError(403, f"Host {host!r} is not this server",
                            kind="permission_error").response()
        if not token_matches(bearer_of(request.headers), token):
            return ApiError(401, "missing or wrong token: send 'Authorization: Bearer "
                                 "<MASSGEN_MCP_TOKEN>'", kind="authentication_error"
                            ).response({"WWW-Authenticate": "Bearer"})
        return None

    @mcp.custom_route("/v1/models", methods=["GET"])
    async def models(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        names = await asyncio.to_thread(team_names)
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "massgen-mcp"}
            for name in names]})

    @mcp.custom_route("/v1/chat/completions", methods=["POST"])
    async def chat_completions(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        try:
            body = load_json(await request.body() or b"null")
        except UnsafeJson as exc:
            return ApiError(400, f"the body is not valid JSON: {exc}").response()
        try:
            model, spec = (parts := await asyncio.to_thread(check_request, body))[:2]
        except ApiError as exc:
            return exc.response()
        stream, include_usage = parts[2], parts[3]
        if not tasks.room_for(2 if stream else 1):
            return ApiError(503, "too many requests at once; retry shortly",
                            kind="server_error").response()
        try:
            started = await service().start(spec)
        except SessionStateError as exc:  # too many runs, or shutting down
            return ApiError(503, str(exc), kind="server_error").response()
        except MassgenError as exc:
            return ApiError(400, str(exc)).response()
        sid = started.session_id
        headers = {SESSION_HEADER: sid}
        if stream:
            progress = Progress()
            run = tasks.own(follow(service(), sid, progress.update))
            run.add_done_callback(lambda _: progress.changed.set())
            tasks.own(_watch(request, run))
            return StreamingResponse(_stream(run, progress, model, sid, include_usage),
                                     media_type="text/event-stream",
                                     headers={**headers, "Cache-Control": "no-cache"})
        return await _complete(request, service(), tasks, model, sid)


class Progress:
    """The latest status of a streamed run, and a flag raised when it changes."""

    def __init__(self) -> None:
        self.latest: StatusRecord | None = None
        self.changed = asyncio.Event()

    async def update(self, status: StatusRecord) -> None:
        self.latest = status
        self.changed.set()


class OwnedTasks:
    """The /v1 routes' background tasks (a run followed to its end, a disconnect watcher),
    owned by the server's lifespan: at most ``limit`` at once, and cancelled and awaited when
    the lifespan ends, so none outlives the server. A streamed response's run must not depend
    on the response body being iterated (a body dropped on disconnect is never finalised),
    hence tasks rather than the handler's own awaits."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_OWNED_TASKS if limit is None else limit
        self._tasks: set[asyncio.Task[Any]] = set()

    def room_for(self, count: int) -> bool:
        return len(self._tasks) + count <= self.limit

    def own(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a run interrupted by a shutdown has no result

    async def aclose(self) -> None:
        """Cancel every task still going and wait for each to end."""
        pending = list(self._tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def _watch(request: Request, run: asyncio.Task[Any]) -> bool:
    """Wait for the run; cancel it if the client goes away. False if the server started to
    stop first (the run is left to the shutdown, which records it interrupted)."""
    while not run.done():
        await asyncio.wait({run}, timeout=DISCONNECT_POLL_S)
        if stopping.is_set():
            return False
        if not run.done() and await request.is_disconnected():
            run.cancel()
    return True


async def _complete(request: Request, service: ConsensusService, tasks: OwnedTasks,
                    model: str, session_id: str) -> Response:
    """Wait for the run's end, cancelling it if the client goes away."""
    from starlette.responses import JSONResponse

    headers = {SESSION_HEADER: session_id}
    run = tasks.own(follow(service, session_id))
    try:
        if not await _watch(request, run):
            return ApiError(503, STOPPING.format(sid=session_id), kind="server_error"
                            ).response(headers)
        result = await run
    except asyncio.CancelledError:
        if run.cancelled():  # the client went away
            return ApiError(499, "the client went away; the run was cancelled"
                            ).response(headers)
        raise
    except MassgenError as exc:
        return ApiError(500, str(exc), kind="server_error").response(headers)
    finally:
        if not run.done() and not stopping.is_set():  # this handler was cancelled
            run.cancel()
    if result.final_answer is None:
        return ApiError(502, no_answer(result), kind="server_error").response(headers)
    return JSONResponse(completion(model, result), headers=headers)


def completion(model: str, result: ResultRecord) -> dict[str, Any]:
    """A finished run as an OpenAI ``chat.completion``."""
    return {
        "id": f"chatcmpl-{result.session_id}", "object": "chat.completion",
        "created": int(result.started_at or time.time()), "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": result.final_answer}}],
        "usage": usage_counts(result), "massgen": run_summary(result),
    }


async def _stream(run: asyncio.Task[ResultRecord], progress: Progress, model: str,
                  session_id: str, include_usage: bool) -> AsyncIterator[str]:
    """The run as ``chat.completion.chunk`` events: progress as reasoning, then the answer.
    The run is owned by the route (a disconnect cancels it there); closing this generator
    cancels it too."""
    created = int(time.time())

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": f"chatcmpl-{session_id}", "object": "chat.completion.chunk",
                "created": created, "model": model, "choices": choices, **extra}
        return f"data: {json.dumps(body)}\n\n"

    def delta(content: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": content, "finish_reason": finish}]

    def error(message: str) -> str:
        """An error event: the openai SDK raises it as an APIError."""
        body = {"error": {"message": redact(message), "type": "server_error", "param": None,
                          "code": None}}
        return f"data: {json.dumps(body)}\n\n"

    try:
        yield chunk(delta({"role": "assistant", "content": ""}))
        last = ""
        while not run.done():
            try:
                async with asyncio.timeout(KEEPALIVE_S):
                    await progress.changed.wait()
            except TimeoutError:
                if stopping.is_set():
                    yield error(STOPPING.format(sid=session_id))
                    return
                yield ": keep-alive\n\n"
                continue
            progress.changed.clear()
            if progress.latest is None:
                continue
            line = progress_message(progress.latest)
            if line != last:
                last = line
                yield chunk(delta({"reasoning_content": line + "\n"}))
        try:
            result = run.result()
        except MassgenError as exc:
            yield error(str(exc))
            return
        if result.final_answer is None:
            yield error(f"{no_answer(result)}; session {session_id}")
            return
        yield chunk(delta({"content": result.final_answer}))
        yield chunk(delta({}, "stop"), massgen=run_summary(result))
        if include_usage:
            yield chunk([], usage=usage_counts(result))
        yield "data: [DONE]\n\n"
    finally:
        if not run.done() and not stopping.is_set():
            run.cancel()
