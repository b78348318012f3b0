"""Scripted models: an OpenAI-compatible server on loopback, and the same at the Provider seam.

Tests, benchmarks and demos need models that answer exactly as told, with no network. Each
request (parsed: which model, which labels the vote tool allows, which answers the prompt shows)
goes to a *policy* (:mod:`.policies`, re-exported here) that returns a :class:`Reply`: an
answer, a vote, plain text, an HTTP error, a slow or truncated response, or a dropped
connection.

* :class:`ScriptedServer` serves policies over real HTTP: point an agent at ``server.base_url``
  with ``model: openai/<name>`` and the whole path (litellm, HTTP, retries) runs for real.
* The same server speaks the wire APIs the coding-agent CLIs use, so the real ``claude``,
  ``codex`` and ``gemini`` binaries can sit on a team offline: Anthropic Messages
  (``/v1/messages``, SSE), OpenAI Responses (``/v1/responses``, SSE) and Gemini
  (``:streamGenerateContent?alt=sse``). Their requests are reduced to the same
  :class:`ChatRequest` (the CLI's own tools are not ours, so ``tools`` stays empty; a
  :func:`tool_calls` reply calls them by their own names, and their results come back in the
  CLI's next request); the formats are in :mod:`.wire`.
* :class:`ScriptedProvider` runs the same policies in process at the
  :class:`~massgen_mcp.providers.base.Provider` seam, for tests of the protocol and the engine
  that need neither litellm nor a socket.

This module ships in the package (it is not only a test helper) because the docs' demo runs
it standalone: ``python -m massgen_mcp.testing.scripted --port 8900 --latency 0.2`` serves the
"everyone agrees" policy (:func:`agree`), so anyone can watch a run without a key
(``--chunk-delay 0.05`` streams each reply slowly, to watch the drafts being written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import selectors
import socket
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError, Refusal
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers import preflight
from massgen_mcp.providers.base import CallContext, Completion, ToolCall
from massgen_mcp.testing.policies import (
    ChatRequest,
    Policy,
    Reply,
    agree,
    answer,
    converge,
    drop,
    error,
    raw,
    text,
    tool_calls,
    vote,
)
from massgen_mcp.testing.wire import (
    cli_prompt,
    completion_body,
    completion_chunks,
    tokens,
    wire_events,
    wire_of,
)

__all__ = ["ChatRequest", "Latency", "Policy", "Reply", "ScriptedProvider", "ScriptedServer",
           "Timing", "agree",
           "answer", "converge", "drop", "error", "main", "raw", "text", "tool_calls", "vote"]


class ScriptedProvider:
    """The policies of :class:`ScriptedServer`, in process: a Provider with no HTTP and no
    litellm. The model name a policy sees is the agent's model without its provider prefix
    (``openai/a`` -> ``a``). HTTP errors become ProviderErrors (429 and 5xx retryable), and a
    dropped connection or a garbled body a retryable server error, as litellm would report.

    ``latency`` delays each reply by a draw, as the server's does; ``timings`` holds each
    call's start and end on the event loop's clock (``ended`` None: cancelled first), so a
    run in virtual time (:mod:`.virtual_time`) is measured as a run over HTTP is.

    ``threaded``: each policy runs on a thread of its own, as on the server, where a call's
    handler thread may block (a test's policy that waits for an event the run sets later).
    Off by default: in virtual time the loop's clock must not jump while a policy decides."""

    def __init__(self, policy: Policy | None = None, *, latency: Latency | None = None,
                 threaded: bool = False) -> None:
        self.policy = policy or agree
        self.latency = latency
        self.threaded = threaded
        self.requests: list[ChatRequest] = []
        self.timings: list[Timing] = []
        self._counts: dict[str, int] = defaultdict(int)

    def calls_by_model(self) -> dict[str, int]:
        return dict(self._counts)

    async def problems(self, team: TeamConfig, *, probe_base_urls: bool = True
                       ) -> list[Refusal]:
        """The checks that need no server (this provider has none to probe): model strings,
        keys, CLIs, offline models."""
        return await preflight.here(team)

    async def complete(self, agent: AgentSpec, messages: list[dict[str, Any]], *,
                       tools: list[dict[str, Any]] | None, timeout_s: float,
                       context: CallContext | None = None) -> Completion:
        model = agent.model.split("/", 1)[-1]
        req = ChatRequest(model, messages, tools or [], self._counts[model],
                          {"model": model, "messages": messages, "tools": tools})
        self._counts[model] += 1
        self.requests.append(req)
        loop = asyncio.get_running_loop()
        timing = Timing(req, loop.time())
        self.timings.append(timing)
        reply = await asyncio.to_thread(self.policy, req) if self.threaded else self.policy(req)
        drawn = self.latency.draw(model, req.call_index) if self.latency else 0.0
        if reply.delay_s + drawn:
            await asyncio.sleep(reply.delay_s + drawn)  # a slow model, not a synchronisation
        timing.ended = loop.time()
        if reply.kind == "error":
            retry_after = reply.headers.get("Retry-After")
            raise ProviderError(
                f"scripted error {reply.status}: {reply.content}",
                retryable=reply.status == 429 or reply.status >= 500,
                status_code=reply.status,
                retry_after=float(retry_after) if retry_after else None)
        if reply.kind in ("drop", "raw"):
            raise ProviderError(f"scripted {reply.kind}: no usable response",
                                kind=ErrorKind.SERVER_ERROR)
        body = completion_body(req, reply)
        message = body["choices"][0]["message"]
        return Completion(
            content=message["content"],
            tool_calls=[ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                        for c in message.get("tool_calls", [])],
            prompt_tokens=body["usage"]["prompt_tokens"],
            completion_tokens=body["usage"]["completion_tokens"],
        )


STOP_POLL_S = 0.02  # how often a serving thread looks whether it is asked to stop


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up (a cancelled call) is normal here, not a traceback on stderr.

    The listen backlog is socketserver's 5 by default: an 8-agent team opening connections at
    once overflowed it, and the kernel's SYN retry held the extra calls back a whole second
    (late first answers that were the test server's doing, not the models')."""

    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass(frozen=True)
class Latency:
    """Real providers' uneven latency: each call takes a lognormal time with this median and
    shape (``sigma``), times the model's factor in ``slower`` (``{"m4": 3.0}``: a model three
    times slower). Draws are seeded by (seed, model, the model's call number), so a run sees
    the same latencies whatever order its concurrent calls arrive in."""

    median_s: float
    sigma: float = 0.5
    seed: int = 0
    slower: Mapping[str, float] = field(default_factory=dict)

    def draw(self, model: str, n: int) -> float:
        rng = random.Random(f"{self.seed}:{model}:{n}")
        return rng.lognormvariate(math.log(self.median_s), self.sigma) * self.slower.get(model, 1.0)


@dataclass
class Timing:
    """When the server got a request and when it replied (None: the client went away first,
    as a cancelled call does)."""

    request: ChatRequest
    started: float  # time.monotonic()
    ended: float | None = None
    over: threading.Event = field(default_factory=threading.Event)  # replied or hung up


class ScriptedServer:
    """Serve ``policy`` on 127.0.0.1 in a background thread; use as a context manager.

    ``latency_s`` is added to every response, ``latency`` draws a time per call (both may be
    set). A client that hangs up while its response is being delayed gets none; its
    :class:`Timing` in ``timings`` keeps ``ended=None``.

    A request with ``"stream": true`` gets an OpenAI stream (server-sent events): the reply in
    pieces of ``chunk_chars`` characters, ``chunk_delay_s`` apart, so that a test can watch a
    draft while the reply is still being written. A client that hangs up between two pieces
    gets no more, and its ``Timing`` keeps ``ended=None`` too."""

    def __init__(self, policy: Policy = agree, *, latency_s: float = 0.0,
                 latency: Latency | None = None, port: int = 0, chunk_chars: int = 4,
                 chunk_delay_s: float = 0.0) -> None:
        if chunk_chars < 1:
            raise ValueError(f"chunk_chars must be at least 1, not {chunk_chars}")
        self.policy = policy
        self.latency_s = latency_s
        self.latency = latency
        self.chunk_chars = chunk_chars  # ~1 token: the pieces a hosted model streams
        self.chunk_delay_s = chunk_delay_s
        self.timings: list[Timing] = []
        self.requests: list[ChatRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests this server was handling at once
        self._counts: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def calls_by_model(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def prompttokens(self) -> int:
        """Prompt tokens as the benchmarks count them: characters sent / 4."""
        with self._lock:
            return sum(tokens(r.prompt_chars()) for r in self.requests)

    def __enter__(self) -> ScriptedServer:
        # shutdown() waits for serve_forever to look at its flag, once a poll_interval: at
        # socketserver's 0.5 s, every test that started a server lost ~0.5 s stopping it.
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": STOP_POLL_S}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving (if it started) and close the listening socket."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread = None
        self._httpd.server_close()

    def _record(self, body: dict[str, Any], headers: dict[str, str], wire: str | None = None,
                path: str = "") -> ChatRequest:
        if wire is None:
            model = str(body.get("model", ""))
            messages, tools = body.get("messages", []), body.get("tools") or []
        else:
            model, system, user = cli_prompt(wire, body, path)
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            tools = []
        with self._lock:
            req = ChatRequest(model, messages, tools, self._counts[model], body, headers)
            self._counts[model] += 1
            self.requests.append(req)
        return req

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else ~40 ms per response (Nagle + delayed ACK)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                head = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}",
                        "Content-Type: application/json", f"Content-Length: {len(body)}"]
                head += [f"{k}: {v}" for k, v in headers.items()]
                self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
                self.wfile.flush()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                wire = wire_of(self.path)
                route = self.path.split("?", 1)[0].rstrip("/")
                if route.endswith(":generateContent") or route.endswith(":countTokens") or (
                        route.endswith("/count_tokens")):
                    self._aside(route)
                    return
                if wire is None and not route.endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}', {})
                    return
                if wire is None and not body.get("messages"):  # as an OpenAI server refuses
                    # an empty request (a health check's, a probe's); not a call: not recorded
                    self._send(400, b'{"error": {"message": "messages: required"}}', {})
                    return
                req = server._record(body, {k.lower(): v for k, v in self.headers.items()},
                                     wire, self.path)
                timing = Timing(req, time.monotonic())
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.timings.append(timing)
                try:
                    if self._answer(req, wire):
                        timing.ended = time.monotonic()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client went away mid-reply
                finally:
                    timing.over.set()
                    with server._lock:
                        server.in_flight -= 1

            def _aside(self, route: str) -> None:
                """A CLI's bookkeeping call (token counting, Gemini's next-speaker check):
                answered the same way every time and not shown to the policy."""
                if route.endswith("countTokens") or route.endswith("count_tokens"):
                    payload: dict[str, Any] = {"totalTokens": 10, "input_tokens": 10}
                else:
                    verdict = json.dumps({"next_speaker": "user", "reasoning": "done"})
                    payload = {"candidates": [{"content": {"role": "model",
                                                           "parts": [{"text": verdict}]},
                                               "finishReason": "STOP", "index": 0}]}
                self._send(200, json.dumps(payload).encode(), {})

            def _stream(self, events: list[dict[str, Any]], wire: str) -> None:
                head = ["HTTP/1.1 200 OK", "Content-Type: text/event-stream",
                        "Cache-Control: no-cache", "Connection: close"]
                self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
                for event in events:
                    name = "" if wire == "gemini" else f"event: {event['type']}\n"
                    self.wfile.write(f"{name}data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def _events(self, chunks: list[dict[str, Any]]) -> bool:
                """Send an OpenAI stream, piece by piece; False if the client hung up before
                the end. Chunked transfer encoding, as hosted APIs send it, so the connection
                stays open for the client's next call."""
                head = ["HTTP/1.1 200 OK", "Content-Type: text/event-stream",
                        "Cache-Control: no-cache", "Transfer-Encoding: chunked"]
                pieces = [("\r\n".join(head) + "\r\n\r\n").encode()]
                for chunk in [*map(json.dumps, chunks), "[DONE]"]:
                    data = f"data: {chunk}\n\n".encode()
                    pieces.append(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                pieces[-1] += b"0\r\n\r\n"
                if not server.chunk_delay_s:  # one write: a send per piece costs both ends
                    pieces = [b"".join(pieces)]
                for i, piece in enumerate(pieces):  # the head and the opening chunk at once
                    if i > 1 and self._client_gone(server.chunk_delay_s):
                        return False
                    self.wfile.write(piece)
                return True

            def _client_gone(self, seconds: float) -> bool:
                """Wait ``seconds`` (the model's latency); True if the client hung up
                meanwhile (a cancelled call), so that no reply is sent to nobody."""
                deadline = time.monotonic() + seconds
                # epoll/kqueue, not select(): a process may hold over 1,024 fds (select() only
                # on Windows, where it has no such limit)
                with selectors.DefaultSelector() as poller:
                    poller.register(self.connection, selectors.EVENT_READ)
                    while (left := deadline - time.monotonic()) > 0:
                        readable = poller.select(left)
                        if readable and not self.connection.recv(1, socket.MSG_PEEK):
                            self.close_connection = True
                            return True
                        if readable:  # a pipelined request: not ours to read now
                            time.sleep(left)
                            break
                return False

            def _answer(self, req: ChatRequest, wire: str | None = None) -> bool:
                """Reply to ``req``; False if the client hung up before the reply."""
                try:
                    reply = server.policy(req)
                except Exception as exc:  # a broken script should fail loudly, not hang
                    reply = error(500, f"policy raised {exc!r}")
                drawn = server.latency.draw(req.model, req.call_index) if server.latency else 0.0
                if self._client_gone(server.latency_s + reply.delay_s + drawn):
                    return False
                if reply.kind == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return True
                if reply.kind == "error":
                    payload = {"error": {"message": reply.content, "type": "scripted",
                                         "code": reply.status}}
                    self._send(reply.status, json.dumps(payload).encode(), reply.headers)
                elif reply.kind == "raw":
                    self._send(reply.status, reply.content.encode(), {})
                elif wire is not None:
                    self._stream(wire_events(wire, req, reply), wire)
                elif req.body.get("stream"):
                    return self._events(completion_chunks(req, reply, server.chunk_chars))
                else:
                    self._send(200, json.dumps(completion_body(req, reply)).encode(), {})
                return True

            def do_GET(self) -> None:
                models = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                self._send(200, json.dumps(models).encode(), {})

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    parser.add_argument("--chunk-delay", type=float, default=0.0, metavar="SECONDS",
                        help="seconds between the pieces of a streamed reply (live drafts)")
    args = parser.parse_args()
    with ScriptedServer(agree, latency_s=args.latency, port=args.port,
                        chunk_delay_s=args.chunk_delay) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
