"""The wire formats of the scripted server: OpenAI chat completions, and the APIs the
coding-agent CLIs speak (Anthropic Messages, OpenAI Responses, Gemini), each reduced to one
:class:`~massgen_mcp.testing.policies.ChatRequest` on the way in and built from one
:class:`~massgen_mcp.testing.policies.Reply` on the way out."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from massgen_mcp.testing.policies import ChatRequest, Reply

# How the CLI provider puts our system prompt into a CLI's prompt when the CLI has no flag for it.
_INSTRUCTIONS = re.compile(r"<instructions>\n(.*?)\n</instructions>\n*", re.DOTALL)


def tokens(chars: int) -> int:
    """Tokens as the benchmarks count them: characters / 4."""
    return max(1, chars // 4)


def completion_body(req: ChatRequest, reply: Reply) -> dict[str, Any]:
    """The OpenAI chat-completion body of ``reply``: tool calls, or JSON for a request
    without tools."""
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
    prompt = tokens(req.prompt_chars())
    return {
        "id": f"chatcmpl-{req.model}-{req.call_index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": tokens(out_chars),
                  "total_tokens": prompt + tokens(out_chars)},
    }


def completion_chunks(req: ChatRequest, reply: Reply, chunk_chars: int) -> list[dict[str, Any]]:
    """The same reply as :func:`completion_body`, as the ``chat.completion.chunk`` objects of
    an OpenAI stream (``"stream": true``): the text, and each tool call's arguments, in pieces
    of ``chunk_chars`` characters, as a model writes them; then the finish reason, and the
    usage (the very same counts as the whole reply's) when ``stream_options.include_usage``
    asks for it. Assembled by a client, the chunks give back the whole reply exactly."""
    body = completion_body(req, reply)
    [choice] = body["choices"]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def pieces(text: str) -> list[str]:
        return [text[i:i + chunk_chars] for i in range(0, len(text), chunk_chars)]

    # OpenAI opens a text reply with empty content, a tool-call reply with none.
    chunks = [chunk({"role": "assistant", "content": None if message.get("tool_calls") else ""})]
    chunks += [chunk({"content": piece}) for piece in pieces(message["content"] or "")]
    for index, call in enumerate(message.get("tool_calls", [])):
        chunks.append(chunk({"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in pieces(call["function"]["arguments"])]
    chunks.append(chunk({}, choice["finish_reason"]))
    if (req.body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**chunk({}), "choices": [], "usage": body["usage"]})
    return chunks


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


def cli_prompt(wire: str, body: dict[str, Any], path: str) -> tuple[str, str, str]:
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


def wire_events(wire: str, req: ChatRequest, reply: Reply) -> list[dict[str, Any]]:
    """The streamed (SSE) response to a CLI, in its wire format: the reply as plain text, or
    (a :func:`~massgen_mcp.testing.policies.tool_calls` reply) calls of the CLI's *own* tools
    by name (``Read`` for Claude Code, ``read_file`` for Gemini CLI), which the CLI runs and
    answers in its next request: how a test drives a CLI's tools from the server."""
    if reply.kind == "tool_calls":
        return _tool_call_events(wire, req, reply)
    body = completion_body(req, reply)
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


def _tool_call_events(wire: str, req: ChatRequest, reply: Reply) -> list[dict[str, Any]]:
    """:func:`wire_events` for a reply of tool calls: each call as its wire's tool-call block
    (Anthropic ``tool_use``, a Responses ``function_call`` item, a Gemini ``functionCall``
    part), the turn ending with a request for the tools' results."""
    prompt = tokens(req.prompt_chars())
    calls = [(name, json.loads(arguments or "{}")) for name, arguments in reply.calls]
    ident = f"{req.model}-{req.call_index}"
    if wire == "anthropic":
        message: dict[str, Any] = {
            "id": f"msg_{ident}", "type": "message", "role": "assistant", "model": req.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 1}}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
        for index, (name, arguments) in enumerate(calls):
            events += [
                {"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use", "id": f"toolu_{ident}_{index}", "name": name,
                    "input": {}}},
                {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(arguments)}},
                {"type": "content_block_stop", "index": index}]
        return [*events,
                {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                    "stop_sequence": None},
                 "usage": {"output_tokens": 10}},
                {"type": "message_stop"}]
    if wire == "responses":
        items = [{"type": "function_call", "id": f"fc_{ident}_{i}", "call_id": f"call_{ident}_{i}",
                  "name": name, "arguments": json.dumps(arguments), "status": "completed"}
                 for i, (name, arguments) in enumerate(calls)]
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": prompt + 10}
        stream: list[dict[str, Any]] = [{"type": "response.created", "response": {
            "id": f"resp_{ident}", "status": "in_progress", "output": []}}]
        for i, item in enumerate(items):
            stream += [{"type": "response.output_item.added", "output_index": i, "item": item},
                       {"type": "response.output_item.done", "output_index": i, "item": item}]
        return [*stream, {"type": "response.completed", "response": {
            "id": f"resp_{ident}", "status": "completed", "output": items, "usage": usage}}]
    parts = [{"functionCall": {"name": name, "args": arguments}} for name, arguments in calls]
    return [{"candidates": [{"content": {"role": "model", "parts": parts},
                             "finishReason": "STOP", "index": 0}],
             "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": 10,
                               "totalTokenCount": prompt + 10},
             "modelVersion": req.model}]


def wire_of(path: str) -> str | None:
    """Which wire API a POST path speaks; None for the OpenAI chat API."""
    route = path.split("?", 1)[0].rstrip("/")
    if route.endswith("/messages"):
        return "anthropic"
    if route.endswith("/responses"):
        return "responses"
    if route.endswith(":streamGenerateContent"):
        return "gemini"
    return None
