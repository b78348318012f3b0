"""A host's model, scripted, on 127.0.0.1: it calls one MCP tool, then reports its result.

Claude Code, Codex and Gemini CLI each talk to their model API (Anthropic Messages, OpenAI
Responses, Gemini ``streamGenerateContent``); pointed at :class:`HostModel`, their model does
one thing: call ``tool`` (by the name the host gives our tool) with ``arguments``, then, once the
host sends the tool's result back, answer with that result's text. A host that does not offer
the tool gets a plain answer saying so. Claude Code defers MCP tools behind ``ToolSearch``: the
model searches for the tool first, as a real one does. Every request is kept (``requests``)
so a test can see what the host offered its model, and when.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from massgen_mcp.testing.scripted import STOP_POLL_S

NOT_OFFERED = "The massgen tools were not offered to me."


class HostModel:
    """Serve the scripted model in a background thread; use as a context manager."""

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self.tool = tool  # our tool's own name, e.g. run_consensus
        self.arguments = arguments
        self.requests: list[tuple[str, dict[str, Any]]] = []  # (path, body)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> HostModel:
        self._thread = threading.Thread(target=self._httpd.serve_forever,  # stops at once
                                        kwargs={"poll_interval": STOP_POLL_S}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread = None
        self._httpd.server_close()

    def conversation_requests(self) -> list[dict[str, Any]]:
        """The requests that carried tools: the host's main conversation, not its asides
        (titles, token counts, next-speaker checks)."""
        with self._lock:
            return [body for _, body in self.requests if body.get("tools")]

    def name_in(self, body: dict[str, Any]) -> str | None:
        """The name a request's tool list gives our tool (mcp__massgen__run_consensus,
        mcp_massgen_run_consensus, or run_consensus inside a namespace), if it is there."""
        names = re.findall(r'"(?:name|function)"\s*:\s*"([^"]*massgen[^"]*?' + self.tool
                           + r')"', json.dumps(body.get("tools", [])))
        if names:
            return str(names[0])
        return self.tool if f'"{self.tool}"' in json.dumps(body.get("tools", [])) else None

    # -- the three wires ---------------------------------------------------------------------

    def anthropic(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        messages = body.get("messages", [])
        result = _anthropic_tool_result(messages)
        if not body.get("tools"):
            return _anthropic_text("ok")
        if result is not None:
            return _anthropic_text(f"massgen answered: {result}")
        name = self.name_in(body)
        if name is not None:
            return _anthropic_tool_use(name, self.arguments)
        if any(t.get("name") == "ToolSearch" for t in body["tools"]) and not _searched(messages):
            return _anthropic_tool_use("ToolSearch", {
                "query": f"select:mcp__massgen__{self.tool}", "max_results": 5})
        return _anthropic_text(NOT_OFFERED)

    def responses(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        items = body.get("input", [])
        outputs = [i for i in items if isinstance(i, dict)
                   and i.get("type") == "function_call_output"]
        if outputs:
            output = outputs[-1].get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            return _responses_item(_message(f"massgen answered: {text}"))
        if not body.get("tools"):
            return _responses_item(_message("ok"))
        namespace = _namespace_of(body.get("tools", []), self.tool)
        name = self.name_in(body)
        if name is None:
            return _responses_item(_message(NOT_OFFERED))
        call: dict[str, Any] = {"type": "function_call", "id": "fc_0", "call_id": "call_0",
                                "name": name, "arguments": json.dumps(self.arguments),
                                "status": "completed"}
        if namespace is not None:
            call["namespace"] = namespace
        return _responses_item(call)

    def gemini(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        parts = [p for c in body.get("contents", []) for p in c.get("parts", [])]
        answered = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if answered:
            response = answered[-1].get("response", {})
            return _gemini_parts([{"text": f"massgen answered: {json.dumps(response)}"}])
        name = self.name_in(body)
        if name is None:
            return _gemini_parts([{"text": NOT_OFFERED if body.get("tools") else "ok"}])
        return _gemini_parts([{"functionCall": {"name": name, "args": self.arguments}}])

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _events(self, events: list[dict[str, Any]], named: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in events:
                    name = f"event: {event['type']}\n" if named else ""
                    self.wfile.write(f"{name}data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": "scripted", "object": "model"}],
                            "models": []})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                route = self.path.split("?", 1)[0].rstrip("/")
                with model._lock:
                    model.requests.append((route, body))
                if route.endswith("count_tokens") or route.endswith(":countTokens"):
                    self._json({"input_tokens": 10, "totalTokens": 10})
                elif route.endswith(":generateContent"):  # Gemini CLI's side questions
                    verdict = json.dumps({"next_speaker": "user", "reasoning": "done"})
                    self._json(_gemini_parts([{"text": verdict}])[0])
                elif route.endswith(":streamGenerateContent"):
                    self._events(model.gemini(body), named=False)
                elif route.endswith("/messages"):
                    self._events(model.anthropic(body), named=True)
                elif route.endswith("/responses"):
                    self._events(model.responses(body), named=True)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

        return Handler


def _searched(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") ==
               "ToolSearch" for m in messages for b in _blocks(m))


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _anthropic_tool_result(messages: list[dict[str, Any]]) -> str | None:
    """The text of the result of our tool call, once the host sent it back."""
    ours = {b.get("id") for m in messages for b in _blocks(m)
            if isinstance(b, dict) and b.get("type") == "tool_use"
            and b.get("name") != "ToolSearch"}
    for message in messages:
        for block in _blocks(message):
            if (isinstance(block, dict) and block.get("type") == "tool_result"
                    and block.get("tool_use_id") in ours):
                content = block.get("content")
                if isinstance(content, list):
                    return "\n".join(str(c.get("text", "")) for c in content
                                     if isinstance(c, dict))
                return str(content)
    return None


def _anthropic_message(content: list[dict[str, Any]], stop: str) -> list[dict[str, Any]]:
    start: dict[str, Any] = {
        "id": "msg_0", "type": "message", "role": "assistant", "model": "scripted",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(content):
        if block["type"] == "text":
            events += [{"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]}}]
        else:
            events += [{"type": "content_block_start", "index": index, "content_block": {
                            "type": "tool_use", "id": block["id"], "name": block["name"],
                            "input": {}}},
                       {"type": "content_block_delta", "index": index, "delta": {
                           "type": "input_json_delta",
                           "partial_json": json.dumps(block["input"])}}]
        events.append({"type": "content_block_stop", "index": index})
    return [*events,
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": 5}},
            {"type": "message_stop"}]


def _anthropic_text(text: str) -> list[dict[str, Any]]:
    return _anthropic_message([{"type": "text", "text": text}], "end_turn")


_uses = iter(range(1, 1_000_000))


def _anthropic_tool_use(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return _anthropic_message([{"type": "tool_use", "id": f"toolu_{next(_uses):04d}",
                                "name": name, "input": arguments}], "tool_use")


def _namespace_of(tools: list[dict[str, Any]], tool: str) -> str | None:
    for entry in tools:
        if entry.get("type") == "namespace" and f'"{tool}"' in json.dumps(entry):
            name = entry.get("name")
            return name if isinstance(name, str) else None
    return None


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _responses_item(item: dict[str, Any]) -> list[dict[str, Any]]:
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 15}
    return [
        {"type": "response.created",
         "response": {"id": "resp_0", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {
            "id": "resp_0", "status": "completed", "output": [item], "usage": usage}},
    ]


def _gemini_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"candidates": [{"content": {"role": "model", "parts": parts},
                             "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                               "totalTokenCount": 15},
             "modelVersion": "scripted"}]
