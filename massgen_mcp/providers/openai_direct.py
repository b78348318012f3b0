"""Call a server the user runs that speaks OpenAI's API over plain httpx, without litellm.

For a ``base_url`` with the ``openai/`` prefix (Ollama's /v1, vLLM, LM Studio, llama.cpp's
server, a company gateway, the scripted test server) the wire is plain: one JSON
``chat.completion`` for a whole reply, server-sent events of ``chat.completion.chunk`` objects
for a streamed one. litellm's path costs ~15 ms of CPU a whole call and ~12 ms plus ~0.4 ms a
token a streamed one, all on the event loop that every agent of every run shares
(``bench/run.py --only streaming``); read here with httpx and one JSON parse, a call costs a
millisecond or two, and a run whose agents all come here never imports litellm (~3 s). Hosted
APIs and every other provider go through litellm, which knows their dialects;
``MASSGEN_OPENAI_DIRECT=0`` sends these through it too, for a server only litellm reads.

The reply is the one the same call made through litellm gives: its text, tool calls (ids,
names, arguments, in order), usage and cost (litellm's price table, read without importing
litellm: :func:`massgen_mcp.providers.model_map.cost_of`). Failures are :class:`ProviderError` of
the kinds :func:`.litellm_provider.map_error` gives (rate limits with Retry-After, auth,
rejected requests, context window, server errors); a stream that ends before the server said
the reply was finished is a failed call, retried. The server is untrusted: a body, line or
reply over its cap, or JSON that is not the object it should be, fails the call; nothing is
buffered beyond the caps.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.providers.base import (
    MAX_CALL_TOKENS,
    Completion,
    TextListener,
    ToolCall,
    cut_short,
    retry_after_of,
)
from massgen_mcp.providers.endpoints import html_error, is_html
from massgen_mcp.providers.kinds import provider_of, routed_model
from massgen_mcp.providers.model_map import cost_of, model_map_read, read_model_map_soon

MAX_LINE_CHARS = 1 << 20  # one event; a token is a few characters
# The whole reply: text, tool-call names and arguments. Ten times the longest answer the
# protocol takes (MAX_ANSWER_CHARS, 100,000); a longer reply is refused there anyway.
MAX_REPLY_CHARS = 1 << 20
MAX_BODY_BYTES = 4 * MAX_REPLY_CHARS  # a whole reply's JSON: escapes take room
INLINE_PARSE_BYTES = 64 * 1024  # a whole reply this small is parsed on the loop (~0.1 ms)
MAX_TOOL_CALLS = 128  # per reply; the engine acts on one decision and a few evidence calls
_ERROR_CHARS = 400
_ERROR_BODY_BYTES = 64 << 10  # what is read of a refused request's body: its message


def goes_direct(agent: AgentSpec) -> bool:
    """Whether ``agent``'s calls go through :func:`chat`: an OpenAI-format server at its own
    ``base_url`` (web search needs litellm's mapping), unless MASSGEN_OPENAI_DIRECT=0."""
    return (bool(agent.base_url) and provider_of(agent) == "openai" and not agent.web_search
            and SETTINGS.openai_direct.read())


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every call: making one costs ~10 ms of CPU."""
    return httpx.create_ssl_context()


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Reply:
    """A reply assembled from its chunks."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    chars: int = 0
    pieces: int = 0
    finished: bool = False
    usage: dict[str, Any] | None = None

    def add(self, chunk: Any, on_text: TextListener) -> None:
        if not isinstance(chunk, dict):
            raise _garbled("an event that is not a JSON object")
        if "error" in chunk:
            raise _error_event(chunk["error"])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finished = True
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise _garbled("a delta that is not a JSON object")
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._grow(content)
                self.text.append(content)
                on_text(content, 1)
            for piece in delta.get("tool_calls") or ():
                self._tool_call(piece, on_text)

    def _tool_call(self, piece: Any, on_text: TextListener) -> None:
        if not isinstance(piece, dict) or not isinstance(piece.get("index", 0), int):
            raise _garbled("a tool call that is not a JSON object")
        index = piece.get("index", 0)
        if index not in self.calls and len(self.calls) >= MAX_TOOL_CALLS:
            raise _garbled(f"over {MAX_TOOL_CALLS} tool calls")
        call = self.calls.setdefault(index, _Call())
        if isinstance(piece.get("id"), str) and piece["id"]:
            call.id = piece["id"]
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise _garbled("a tool call's function that is not a JSON object")
        if isinstance(function.get("name"), str):
            self._grow(function["name"])
            call.name += function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._grow(arguments)
            call.arguments.append(arguments)
            on_text(arguments, 1)

    def _grow(self, text: str) -> None:
        self.chars += len(text)
        self.pieces += 1
        if self.chars > MAX_REPLY_CHARS:
            raise _too_long()

    async def completion(self, agent: AgentSpec, messages: list[dict[str, Any]],
                         latency_s: float) -> Completion:
        calls = [ToolCall(id=c.id or f"call_{i}", name=c.name, arguments="".join(c.arguments))
                 for i, c in (sorted(self.calls.items()))]
        return await _completion(agent, messages, "".join(self.text) if self.text else None,
                                 calls, self.usage, self.pieces, latency_s)


async def _completion(agent: AgentSpec, messages: list[dict[str, Any]], text: str | None,
                      calls: list[ToolCall], usage: Any, pieces: int,
                      latency_s: float) -> Completion:
    """The reply as a :class:`Completion`. A server that sends no usage gets an estimate (4
    characters a token of the prompt, a streamed piece a token of the reply), as the budget
    needs some count."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if not all(type(n) is int and 0 <= n <= MAX_CALL_TOKENS for n in (prompt, completion)):
        prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4
        completion = pieces or (len(text or "") + sum(len(c.arguments) for c in calls)) // 4
    # Once the price table is read, pricing is a dictionary lookup: no thread hop.
    cost = (cost_of(agent.model, prompt, completion) if model_map_read()
            else await asyncio.to_thread(cost_of, agent.model, prompt, completion))
    return Completion(content=text, tool_calls=calls, prompt_tokens=prompt,
                      completion_tokens=completion, cost_usd=cost, latency_s=latency_s)


def _garbled(what: str, where: str = "the reply's stream") -> ProviderError:
    return ProviderError.of(ErrorKind.SERVER_ERROR, f"{where} held {what}")


def _too_long(what: str = f"{MAX_REPLY_CHARS:,} characters") -> ProviderError:
    """A reply over its cap: the same call would send it again."""
    return ProviderError.of(ErrorKind.SERVER_ERROR, f"the reply passed {what}; stopped",
                            retryable=False)


def _error_event(error: Any) -> ProviderError:
    """An ``{"error": …}`` event mid-stream: a rate limit or a server's failure."""
    text = redact(json.dumps(error))[:_ERROR_CHARS]
    code = error.get("code") if isinstance(error, dict) else None
    if code in (429, "429", "rate_limit_exceeded") or "rate limit" in text.lower():
        return ProviderError.of(ErrorKind.RATE_LIMIT, text, status=429)
    return ProviderError.of(ErrorKind.SERVER_ERROR, text)


# A refused request's status -> kind (the rest: 5xx a server error, 4xx a rejected request)...
_STATUS_KINDS = {429: ErrorKind.RATE_LIMIT, 401: ErrorKind.AUTH, 403: ErrorKind.AUTH}
# ...and the words in a 4xx body that say why (OpenAI's, vLLM's and Azure's), first match wins.
_BODY_KINDS = {"context_length": ErrorKind.CONTEXT_WINDOW,
               "context length": ErrorKind.CONTEXT_WINDOW,
               "content_filter": ErrorKind.CONTENT_FILTER,
               "content management policy": ErrorKind.CONTENT_FILTER}


def status_kind(status: int, text: str) -> ErrorKind:
    """The kind of a refused request (status 400 or more) from its status and message."""
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    if status >= 500:
        return ErrorKind.SERVER_ERROR
    lowered = text.lower()
    return next((kind for words, kind in _BODY_KINDS.items() if words in lowered),
                ErrorKind.BAD_REQUEST)


def http_error(status: int, body: str, headers: httpx.Headers) -> ProviderError:
    """A refused request, as :func:`.litellm_provider.map_error` words its kind: the
    server's own message when its body is OpenAI's ``{"error": {"message": …}}``."""
    try:
        said = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError, RecursionError):
        said = None
    text = redact(" ".join((said if isinstance(said, str) else body).split()))[:_ERROR_CHARS]
    if is_html(text):  # a web server answered, not a model's: no retry will change it
        return html_error(status)
    return ProviderError.of(status_kind(status, text), text, status=status,
                            retry_after=retry_after_of(headers))


def request_body(agent: AgentSpec, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None, *, stream: bool) -> dict[str, Any]:
    """What litellm would send the server for this call."""
    body: dict[str, Any] = {"model": routed_model(agent).split("/", 1)[1],
                            "messages": messages}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "required"
    for name in ("temperature", "top_p", "max_tokens"):
        value = getattr(agent, name)
        if value is not None:
            body[name] = value
    return body


def _check_encoding(response: httpx.Response) -> None:
    """The body is read as sent (``Accept-Encoding: identity``): a compressed one is refused,
    since httpx would inflate each piece whole (64 KB of gzip is 64 MB of text) before any
    cap here could look at it."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise _garbled(f"a {encoding[:20]!r}-encoded body (identity was asked for)")


async def _head(response: httpx.Response, limit: int) -> bytes:
    """At most the first ``limit`` bytes of the body (a whole reply, a refused request's
    message): a server that sends an endless body is not read to its end."""
    got = bytearray()
    async for data in response.aiter_raw():
        got += data
        if len(got) >= limit:
            break
    return bytes(got[:limit])


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    """The body's lines, none longer than :data:`MAX_LINE_CHARS` (httpx's own reader would
    hold a line of any length in memory)."""
    pending = b""
    async for data in response.aiter_raw():
        pending += data
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE_CHARS:
            raise _garbled(f"a line over {MAX_LINE_CHARS:,} characters")
        for line in lines:
            yield line.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace")


async def chat(agent: AgentSpec, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None, *, api_key: str, timeout_s: float,
               on_text: TextListener | None = None) -> Completion:
    """One call to ``agent.base_url``, streamed to ``on_text`` when it is given, else whole
    (cheaper to read); raises ProviderError, or httpx's errors for a connection that could
    not be made or broke (the caller words those)."""
    url = f"{(agent.base_url or '').rstrip('/')}/chat/completions"
    started = time.perf_counter()
    read_model_map_soon()  # the reply is priced: read the price table while the model works
    async with httpx.AsyncClient(verify=_tls(), timeout=timeout_s) as client, client.stream(
            "POST", url, json=request_body(agent, messages, tools, stream=on_text is not None),
            headers={"Authorization": f"Bearer {api_key}",
                     "Accept-Encoding": "identity"}) as response:
        _check_encoding(response)
        if response.headers.get("content-type", "").lower().startswith("text/html"):
            raise html_error(response.status_code)  # a web page, whatever its status
        if 300 <= response.status_code < 400:  # not followed: the key must not go elsewhere
            raise ProviderError.of(
                ErrorKind.BAD_REQUEST, f"{url} answered {response.status_code}, a redirect to "
                f"{redact(response.headers.get('location', '?'))[:200]} (not followed; "
                "set base_url to where it points)", status=response.status_code)
        if response.status_code >= 400:
            body = (await _head(response, _ERROR_BODY_BYTES)).decode("utf-8", "replace")
            raise http_error(response.status_code, body, response.headers)
        if on_text is None:
            whole = await _head(response, MAX_BODY_BYTES + 1)
            # Off the loop every run shares: a hostile 4 MiB body takes a while to parse. A
            # body of a few KiB (a vote, most answers) parses faster than a thread hop.
            text, calls, usage = (_whole(whole) if len(whole) <= INLINE_PARSE_BYTES
                                  else await asyncio.to_thread(_whole, whole))
            return await _completion(agent, messages, text, calls, usage, 0,
                                     time.perf_counter() - started)
        reply = await _streamed(response, on_text)
    return await reply.completion(agent, messages, time.perf_counter() - started)


async def _streamed(response: httpx.Response, on_text: TextListener) -> _Reply:
    reply = _Reply()
    done = False
    async for line in _lines(response):
        if not line.startswith("data:"):
            continue  # event names, comments, blank separators
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise _garbled("an event that is not JSON") from None
        reply.add(chunk, on_text)
    if not (reply.finished or done):
        raise cut_short()
    return reply


def _whole(body: bytes) -> tuple[str | None, list[ToolCall], Any]:
    """A whole ``chat.completion``: its first choice's text and tool calls, and its usage."""
    if len(body) > MAX_BODY_BYTES:
        raise _too_long(f"{MAX_BODY_BYTES:,} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise _garbled("a body that is not JSON", "the reply") from None
    if isinstance(data, dict) and "error" in data:
        raise _error_event(data["error"])
    choices = data.get("choices") if isinstance(data, dict) else None
    message = (choices[0].get("message") if isinstance(choices, list) and choices
               and isinstance(choices[0], dict) else None)
    if not isinstance(message, dict):
        raise _garbled("no choice with a message", "the reply")
    text = message.get("content")
    if text is not None and not isinstance(text, str):
        raise _garbled("a message whose content is not text", "the reply")
    listed = message.get("tool_calls") or []
    if not isinstance(listed, list) or len(listed) > MAX_TOOL_CALLS:
        raise _garbled(f"tool calls that are not a list of at most {MAX_TOOL_CALLS}",
                       "the reply")
    calls = []
    for i, call in enumerate(listed):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, str | None):
            raise _garbled("a tool call that is not a function call", "the reply")
        call_id = call.get("id")
        calls.append(ToolCall(id=call_id if isinstance(call_id, str) and call_id
                              else f"call_{i}", name=name, arguments=arguments or ""))
    if len(text or "") + sum(len(c.name) + len(c.arguments) for c in calls) > MAX_REPLY_CHARS:
        raise _too_long()
    return text or None, calls, data.get("usage")
