"""Scripted models: an OpenAI-compatible server on loopback, and the same at the Provider seam.

Tests, benchmarks and demos need models that answer exactly as told, with no network. Each
request (parsed: which model, which labels the vote tool allows, which answers the prompt shows)
goes to a *policy* that returns a :class:`Reply`: an answer, a vote, plain text, an HTTP error,
a slow or truncated response, or a dropped connection.

* :class:`ScriptedServer` serves policies over real HTTP: point an agent at ``server.base_url``
  with ``model: openai/<name>`` and the whole path (litellm, HTTP, retries) runs for real.
* The same server speaks the wire APIs the coding-agent CLIs use, so the real ``claude``,
  ``codex`` and ``gemini`` binaries can sit on a team offline: Anthropic Messages
  (``/v1/messages``, SSE), OpenAI Responses (``/v1/responses``, SSE) and Gemini
  (``:streamGenerateContent?alt=sse``). Their requests are reduced to the same
  :class:`ChatRequest` (the CLI's own tools are not ours, so ``tools`` stays empty).
* :class:`ScriptedProvider` runs the same policies in process at the
  :class:`~massgen_mcp.providers.base.Provider` seam, for tests of the protocol and the engine
  that need neither litellm nor a socket.

This module ships in the package (it is not only a test helper) because the README's demo runs
it standalone: ``python -m massgen_mcp.testing.scripted --port 8900 --latency 0.2`` serves the
"everyone agrees" policy (:func:`agree`), so anyone can watch a run without a key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import CallContext, Completion, ToolCall

_ANSWER = re.compile(r'<answer label="([A-H][0-9]{1,2})">\n(.*?)\n</answer>', re.DOTALL)
# How the CLI provider puts our system prompt into a CLI's prompt when the CLI has no flag for it.
_INSTRUCTIONS = re.compile(r"<instructions>\n(.*?)\n</instructions>\n*", re.DOTALL)


@dataclass
class ChatRequest:
    """One chat-completion request, parsed for the policy."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    call_index: int  # how many requests this model received before this one
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def vote_labels(self) -> list[str]:
        for tool in self.tools:
            if tool["function"]["name"] == "vote":
                return list(tool["function"]["parameters"]["properties"]["answer"]["enum"])
        return []

    @property
    def system(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "system"), "")

    @property
    def user(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")

    @property
    def answers(self) -> dict[str, str]:
        """Label -> answer text shown in the prompt."""
        return dict(_ANSWER.findall(self.user))

    @property
    def is_final(self) -> bool:
        return not self.tools and "selected your answer" in self.system

    @property
    def is_check(self) -> bool:
        """The winner's check of the final answer (max_orchestration_restarts)."""
        return not self.tools and "check it against the question" in self.system

    @property
    def wants_json(self) -> bool:
        return not self.tools and '"action"' in self.system

    @property
    def is_retry(self) -> bool:
        return len(self.messages) > 2

    def label_of(self, text: str) -> str:
        """The label of the shown answer containing ``text``."""
        for label, content in self.answers.items():
            if text in content:
                return label
        raise LookupError(f"no answer containing {text!r} in {self.answers}")

    def prompt_chars(self) -> int:
        return len(json.dumps(self.messages)) + (len(json.dumps(self.tools)) if self.tools else 0)


@dataclass
class Reply:
    """What the server sends back. Build it with the helpers below."""

    kind: str  # "answer" | "vote" | "text" | "tool_calls" | "error" | "raw" | "drop"
    content: str = ""
    label: str = ""
    reason: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def answer(content: str, delay_s: float = 0.0) -> Reply:
    return Reply("answer", content=content, delay_s=delay_s)


def vote(label: str, reason: str = "best answer", delay_s: float = 0.0) -> Reply:
    return Reply("vote", label=label, reason=reason, delay_s=delay_s)


def text(content: str, delay_s: float = 0.0) -> Reply:
    return Reply("text", content=content, delay_s=delay_s)


def tool_calls(*calls: tuple[str, str]) -> Reply:
    """Raw tool calls: (name, arguments JSON text) pairs, valid or not."""
    return Reply("tool_calls", calls=list(calls))


def error(status: int, message: str = "scripted error", retry_after: float | None = None
          ) -> Reply:
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return Reply("error", content=message, status=status, headers=headers)


def raw(body: str, status: int = 200) -> Reply:
    """Send ``body`` as-is (e.g. truncated JSON)."""
    return Reply("raw", content=body, status=status)


def drop() -> Reply:
    """Close the connection without answering."""
    return Reply("drop")


Policy = Callable[[ChatRequest], Reply]


def agree(req: ChatRequest) -> Reply:
    """Scenario A of the benchmarks: answer first, then vote for the first valid choice."""
    if req.is_final:
        return text("Final: " + next(iter(req.answers.values()), "no answer"))
    if req.is_check:
        return text('{"verdict": "accept"}')
    if req.vote_labels:
        return vote(req.vote_labels[0], "it answers the question")
    if req.wants_json and "<answers>" in req.user:
        return vote(next(iter(req.answers)), "it answers the question")
    return answer(f"The answer from {req.model} is 42.")


def _tokens(chars: int) -> int:
    return max(1, chars // 4)


def _completion_body(req: ChatRequest, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    if reply.kind in ("answer", "vote") and not req.tools:
        payload = ({"action": "new_answer", "content": reply.content} if reply.kind == "answer"
                   else {"action": "vote", "answer": reply.label, "reason": reply.reason})
        message["content"] = json.dumps(payload)
    elif reply.kind in ("answer", "vote", "tool_calls"):
        calls = reply.calls
        if reply.kind == "answer":
            calls = [("new_answer", json.dumps({"content": reply.content}))]
        elif reply.kind == "vote":
            calls = [("vote", json.dumps({"answer": reply.label, "reason": reply.reason}))]
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
        finish = "tool_calls"
    else:
        message["content"] = reply.content
    out_chars = len(json.dumps(message))
    prompt = _tokens(req.prompt_chars())
    return {
        "id": f"chatcmpl-{req.model}-{req.call_index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": _tokens(out_chars),
                  "total_tokens": prompt + _tokens(out_chars)},
    }


# -- the coding-agent CLIs' wire APIs -----------------------------------------------------------

def _text_of(content: Any) -> str:
    """The text in a content value of any of the three wire formats: a string, or a list of
    parts/blocks each with ``text`` (tool blocks and images carry none)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [_text_of(p.get("text", p.get("content", ""))) for p in content
                 if isinstance(p, dict)]
        return "\n".join(p for p in parts if p)
    return ""


def _cli_prompt(wire: str, body: dict[str, Any], path: str) -> tuple[str, str, str]:
    """(model, system, user) of a CLI's request: its own system prompt plus ours, and every
    user text of the conversation (one CLI process answers one prompt of ours)."""
    if wire == "anthropic":
        model = str(body.get("model", ""))
        system = _text_of(body.get("system", ""))
        users = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
    elif wire == "responses":
        model = str(body.get("model", ""))
        items = body.get("input", [])
        system = str(body.get("instructions") or "") + "\n" + "\n".join(
            _text_of(i.get("content")) for i in items if i.get("role") in ("system", "developer"))
        users = [i.get("content") for i in items if i.get("role") == "user"]
    else:  # gemini: the model is in the path, /v1beta/models/<model>:streamGenerateContent
        model = path.split("/models/", 1)[-1].split(":", 1)[0]
        system = _text_of((body.get("systemInstruction") or {}).get("parts", []))
        users = [c.get("parts") for c in body.get("contents", []) if c.get("role") == "user"]
    user = "\n".join(_text_of(u) for u in users)
    ours = _INSTRUCTIONS.search(user)
    if ours:  # our system prompt, carried in the prompt of a CLI that has no flag for it
        system += "\n" + ours.group(1)
        user = user[:ours.start()] + user[ours.end():]
    return model, system, user


def _wire_events(wire: str, req: ChatRequest, reply: Reply) -> list[dict[str, Any]]:
    """The streamed (SSE) response to a CLI, in its wire format: the reply as plain text."""
    body = _completion_body(req, reply)
    text = body["choices"][0]["message"]["content"] or ""
    tokens_in, tokens_out = body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]
    if wire == "anthropic":
        message = {"id": body["id"], "type": "message", "role": "assistant", "model": req.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": tokens_in, "output_tokens": 1}}
        return [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
             "usage": {"output_tokens": tokens_out}},
            {"type": "message_stop"},
        ]
    if wire == "responses":
        item = {"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        usage = {"input_tokens": tokens_in, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": tokens_out, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": tokens_in + tokens_out}
        return [
            {"type": "response.created",
             "response": {"id": body["id"], "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "status": "in_progress", "content": []}},
            {"type": "response.output_text.delta", "item_id": "msg_0", "output_index": 0,
             "content_index": 0, "delta": text},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {
                "id": body["id"], "status": "completed", "output": [item], "usage": usage}},
        ]
    return [{"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                             "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": tokens_in,
                               "candidatesTokenCount": tokens_out,
                               "totalTokenCount": tokens_in + tokens_out},
             "modelVersion": req.model}]


def _wire_of(path: str) -> str | None:
    """Which wire API a POST path speaks; None for the OpenAI chat API."""
    route = path.split("?", 1)[0].rstrip("/")
    if route.endswith("/messages"):
        return "anthropic"
    if route.endswith("/responses"):
        return "responses"
    if route.endswith(":streamGenerateContent"):
        return "gemini"
    return None


class ScriptedProvider:
    """The policies of :class:`ScriptedServer`, in process: a Provider with no HTTP and no
    litellm. The model name a policy sees is the agent's model without its provider prefix
    (``openai/a`` -> ``a``). HTTP errors become ProviderErrors (429 and 5xx retryable), and a
    dropped connection or a garbled body a retryable server error, as litellm would report."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or agree
        self.requests: list[ChatRequest] = []
        self._counts: dict[str, int] = defaultdict(int)

    def calls_by_model(self) -> dict[str, int]:
        return dict(self._counts)

    async def complete(self, agent: AgentSpec, messages: list[dict[str, Any]], *,
                       tools: list[dict[str, Any]] | None, timeout_s: float,
                       context: CallContext | None = None) -> Completion:
        model = agent.model.split("/", 1)[-1]
        req = ChatRequest(model, messages, tools or [], self._counts[model],
                          {"model": model, "messages": messages, "tools": tools})
        self._counts[model] += 1
        self.requests.append(req)
        reply = self.policy(req)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)  # a slow model, not a synchronisation
        if reply.kind == "error":
            retry_after = reply.headers.get("Retry-After")
            raise ProviderError(
                f"scripted error {reply.status}: {reply.content}",
                retryable=reply.status == 429 or reply.status >= 500,
                status_code=reply.status,
                retry_after=float(retry_after) if retry_after else None)
        if reply.kind in ("drop", "raw"):
            raise ProviderError(f"scripted {reply.kind}: no usable response", retryable=True,
                                kind="server_error")
        body = _completion_body(req, reply)
        message = body["choices"][0]["message"]
        return Completion(
            content=message["content"],
            tool_calls=[ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                        for c in message.get("tool_calls", [])],
            prompt_tokens=body["usage"]["prompt_tokens"],
            completion_tokens=body["usage"]["completion_tokens"],
        )


class ScriptedServer:
    """Serve ``policy`` on 127.0.0.1 in a background thread; use as a context manager."""

    def __init__(self, policy: Policy = agree, *, latency_s: float = 0.0, port: int = 0) -> None:
        self.policy = policy
        self.latency_s = latency_s
        self.requests: list[ChatRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests this server was handling at once
        self._counts: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
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

    def prompt_tokens(self) -> int:
        """Prompt tokens as the benchmarks count them: characters sent / 4."""
        with self._lock:
            return sum(_tokens(r.prompt_chars()) for r in self.requests)

    def __enter__(self) -> ScriptedServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _record(self, body: dict[str, Any], headers: dict[str, str], wire: str | None = None,
                path: str = "") -> ChatRequest:
        if wire is None:
            model = str(body.get("model", ""))
            messages, tools = body.get("messages", []), body.get("tools") or []
        else:
            model, system, user = _cli_prompt(wire, body, path)
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
                wire = _wire_of(self.path)
                route = self.path.split("?", 1)[0].rstrip("/")
                if route.endswith(":generateContent") or route.endswith(":countTokens") or (
                        route.endswith("/count_tokens")):
                    self._aside(route)
                    return
                if wire is None and not route.endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}', {})
                    return
                req = server._record(body, {k.lower(): v for k, v in self.headers.items()},
                                     wire, self.path)
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(req, wire)
                finally:
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

            def _answer(self, req: ChatRequest, wire: str | None = None) -> None:
                try:
                    reply = server.policy(req)
                except Exception as exc:  # a broken script should fail loudly, not hang
                    reply = error(500, f"policy raised {exc!r}")
                time.sleep(server.latency_s + reply.delay_s)
                if reply.kind == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if reply.kind == "error":
                    payload = {"error": {"message": reply.content, "type": "scripted",
                                         "code": reply.status}}
                    self._send(reply.status, json.dumps(payload).encode(), reply.headers)
                elif reply.kind == "raw":
                    self._send(reply.status, reply.content.encode(), {})
                elif wire is not None:
                    self._stream(_wire_events(wire, req, reply), wire)
                else:
                    self._send(200, json.dumps(_completion_body(req, reply)).encode(), {})

            def do_GET(self) -> None:
                models = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                self._send(200, json.dumps(models).encode(), {})

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per response")
    args = parser.parse_args()
    with ScriptedServer(agree, latency_s=args.latency, port=args.port) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
