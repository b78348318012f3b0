"""Stream a chat from a server the user runs that speaks OpenAI's API, without litellm.

A live draft needs the reply streamed, and litellm's stream wrapper costs ~12 ms of CPU a call
and ~0.4 ms a token on the event loop (``bench/run.py --only streaming``): a 100,000-character
answer took over 10 s of CPU, and starved the other agents' calls meanwhile. For a ``base_url``
with the ``openai/`` prefix (Ollama's /v1, vLLM, LM Studio, llama.cpp's server, the scripted
test server) the wire is plain: server-sent events of ``chat.completion.chunk`` objects. Read
here with httpx and a JSON parse a line, the same reply costs a few microseconds a token.
Hosted APIs and every other provider stream through litellm, which knows their dialects.

The reply is the one the same call made whole through litellm gives: its text, tool calls
(ids, names, arguments, in order), usage and cost (litellm's price table, when it knows the
model). Failures are :class:`ProviderError` of the kinds :func:`.litellm_provider.map_error`
gives (rate limits with Retry-After, auth, rejected requests, context window, server errors);
a stream that ends before the server said the reply was finished is a failed call, retried.
The server is untrusted: a line over :data:`MAX_LINE_CHARS`, a reply over
:data:`MAX_REPLY_CHARS`, or JSON that is not a chunk fails the call; nothing is buffered
beyond that.
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import Completion, TextListener, ToolCall, retry_after_of

MAX_LINE_CHARS = 1 << 20  # one event; a token is a few characters
MAX_REPLY_CHARS = 8 << 20  # the whole reply: text and tool-call arguments
_ERROR_CHARS = 400
_ERROR_BODY_BYTES = 64 << 10  # what is read of a refused request's body: its message


def streams_lean(agent: AgentSpec) -> bool:
    """Whether ``agent``'s streamed calls go through :func:`stream_chat`: an OpenAI-format
    server at its own ``base_url`` (web search needs litellm's mapping)."""
    return bool(agent.base_url) and agent.provider == "openai" and not agent.web_search


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
        call = self.calls.setdefault(piece.get("index", 0), _Call())
        if isinstance(piece.get("id"), str) and piece["id"]:
            call.id = piece["id"]
        function = piece.get("function") or {}
        if not isinstance(function, dict):
            raise _garbled("a tool call's function that is not a JSON object")
        if isinstance(function.get("name"), str):
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
            raise ProviderError(f"provider error: the reply passed {MAX_REPLY_CHARS:,} "
                                "characters; stopped", retryable=False, kind="server_error")

    async def completion(self, agent: AgentSpec, messages: list[dict[str, Any]],
                         latency_s: float) -> Completion:
        usage = self.usage or {}
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            # A server that sends no usage: an estimate (4 characters a token, a piece a
            # token), as the budget needs some count.
            prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4
            completion = self.pieces
        calls = [ToolCall(id=c.id or f"call_{i}", name=c.name, arguments="".join(c.arguments))
                 for i, c in (sorted(self.calls.items()))]
        return Completion(content="".join(self.text) if self.text else None, tool_calls=calls,
                          prompt_tokens=prompt, completion_tokens=completion,
                          cost_usd=await _cost(agent.model, prompt, completion),
                          latency_s=latency_s)


async def _cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The call's price from litellm's table, as a whole call's ``response_cost`` is (None
    when the table does not know the model). litellm is only needed here, once the reply is
    in: a first call does not wait ~3 s for its import (usually done by then, in the
    background) before it starts."""
    from massgen_mcp.providers.litellm_provider import litellm_module

    litellm = await litellm_module()
    try:
        prompt_usd, completion_usd = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    except Exception:  # not in the table: litellm raises
        return None
    return float(prompt_usd + completion_usd)


def _garbled(what: str) -> ProviderError:
    return ProviderError(f"provider error: the reply's stream held {what}", retryable=True,
                         kind="server_error")


def _error_event(error: Any) -> ProviderError:
    """An ``{"error": …}`` event mid-stream: a rate limit or a server's failure."""
    text = redact(json.dumps(error))[:_ERROR_CHARS]
    code = error.get("code") if isinstance(error, dict) else None
    if code in (429, "429", "rate_limit_exceeded") or "rate limit" in text.lower():
        return ProviderError(f"rate limited: {text}", retryable=True, status_code=429,
                             kind="rate_limit")
    return ProviderError(f"provider error: {text}", retryable=True, kind="server_error")


def http_error(status: int, body: str, headers: httpx.Headers) -> ProviderError:
    """A refused request, as :func:`.litellm_provider.map_error` words its kind: the
    server's own message when its body is OpenAI's ``{"error": {"message": …}}``."""
    try:
        said = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError, RecursionError):
        said = None
    text = redact(" ".join((said if isinstance(said, str) else body).split()))[:_ERROR_CHARS]
    lowered = text.lower()
    retry_after = retry_after_of(headers)
    if status == 429:
        return ProviderError(f"rate limited: {text}", retryable=True, status_code=429,
                             retry_after=retry_after, kind="rate_limit")
    if status in (401, 403):
        return ProviderError(f"authentication failed: {text}", retryable=False,
                             status_code=status, kind="auth")
    if status < 500:
        if "context_length" in lowered or "context length" in lowered:
            return ProviderError(f"context window exceeded: {text}", retryable=False,
                                 status_code=status, kind="context_window")
        if "content_filter" in lowered or "content management policy" in lowered:
            return ProviderError(f"content filter: {text}", retryable=False,
                                 status_code=status, kind="content_filter")
        return ProviderError(f"request rejected: {text}", retryable=False, status_code=status,
                             kind="bad_request")
    return ProviderError(f"provider error: {text}", retryable=True, status_code=status,
                         retry_after=retry_after, kind="server_error")


def request_body(agent: AgentSpec, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What litellm would send the server for this call, streamed."""
    body: dict[str, Any] = {"model": agent.model.split("/", 1)[1], "messages": messages,
                            "stream": True, "stream_options": {"include_usage": True}}
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
    """At most the first ``limit`` bytes of the body (a refused request's message): a server
    that sends an endless error page is not read to its end."""
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


async def stream_chat(agent: AgentSpec, messages: list[dict[str, Any]],
                      tools: list[dict[str, Any]] | None, *, api_key: str, timeout_s: float,
                      on_text: TextListener) -> Completion:
    """One streamed call to ``agent.base_url``; raises ProviderError, or httpx's errors for
    a connection that could not be made or broke (the caller words those)."""
    url = f"{(agent.base_url or '').rstrip('/')}/chat/completions"
    started = time.perf_counter()
    reply = _Reply()
    async with httpx.AsyncClient(verify=_tls(), timeout=timeout_s) as client, client.stream(
            "POST", url, json=request_body(agent, messages, tools),
            headers={"Authorization": f"Bearer {api_key}",
                     "Accept-Encoding": "identity"}) as response:
        _check_encoding(response)
        if response.status_code >= 400:
            body = (await _head(response, _ERROR_BODY_BYTES)).decode("utf-8", "replace")
            raise http_error(response.status_code, body, response.headers)
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
        raise ProviderError("provider error: the reply's stream ended before the reply did",
                            retryable=True, kind="server_error")
    return await reply.completion(agent, messages, time.perf_counter() - started)
