"""Reach any model litellm serves (OpenAI, Anthropic, Gemini, xAI, OpenRouter, local servers...).

litellm costs ~3 s and ~180 MB to import, so it is imported lazily, off the event loop, the first
time it is needed (or by :func:`warm_up` in the background). It is also made quiet: by default it
prints to stdout, which would corrupt an MCP stdio stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
import threading
import time
import warnings
from types import ModuleType
from typing import Any

import httpx

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.loading import loading
from massgen_mcp.core.secrets import RedactingFormatter, redact
from massgen_mcp.providers.base import (
    CallContext,
    Completion,
    TextListener,
    ToolCall,
    cut_short,
    retry_after_of,
)
from massgen_mcp.providers.endpoints import (
    connect_failure,
    endpoint_of,
    html_error,
    is_html,
    unreachable_message,
)
from massgen_mcp.providers.kinds import api_key, provider_of, routed_model
from massgen_mcp.providers.openai_direct import chat, goes_direct

_lock = threading.Lock()
_module: ModuleType | None = None
# Sent to self-hosted endpoints that need no key, so litellm never falls back to (and leaks)
# OPENAI_API_KEY from the environment to an arbitrary base_url.
_PLACEHOLDER_KEY = "no-key-needed"
# litellm names its exceptions "litellm.BadRequestError: ..."; only that prefix goes (a plain
# replace of "litellm." also cut its links, docs.litellm.ai, into docs.ai).
_CLASS_PREFIX = re.compile(r"(?<![\w./])litellm\.(?=[A-Z])")


def load_litellm() -> ModuleType:
    """Import and configure litellm once (thread-safe; blocking: call it off the event loop)."""
    global _module
    with _lock:
        if _module is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
            # In its default "DEV" mode litellm's import loads a .env into os.environ: the
            # one above the calling file, or the cwd's in a REPL, notebook, `python -c` or
            # debugger. A cloned repository's .env could then set OPENAI_BASE_URL and get
            # the user's key, and its secrets would reach every child process. Never.
            os.environ["LITELLM_MODE"] = "PRODUCTION"
            os.environ.setdefault("LITELLM_LOG", "WARNING")
            with loading():  # ~2.0 s of CPU instead of ~2.9 (core/loading.py)
                import litellm

            # A call cancelled while litellm prepares it in its executor leaves the request's
            # coroutine unstarted (litellm.main.acompletion), and Python warns about it on
            # stderr: noise in the terminal for a cancel that worked.
            warnings.filterwarnings("ignore", r"coroutine '.*acompletion' was never awaited",
                                    RuntimeWarning, append=True)
            litellm.suppress_debug_info = True
            litellm.telemetry = False
            litellm.drop_params = True
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                logger = logging.getLogger(name)
                logger.handlers.clear()
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
                logger.addHandler(handler)
                logger.setLevel(logging.WARNING)
                logger.propagate = False
            _module = litellm
            return litellm
        return _module


async def litellm_module() -> ModuleType:
    """litellm, imported off the event loop if it is not yet."""
    return _module if _module is not None else await asyncio.to_thread(load_litellm)


async def warm_up() -> None:
    """Import litellm in the background so the first run does not pay for it.

    The import runs in a daemon thread, not the loop's executor: a process that ends while it
    is under way (a host closing the server a second after starting it) then exits at once
    instead of finishing ~3 s of import nobody needs. Cancelling this only stops the wait."""
    loop = asyncio.get_running_loop()
    loaded = asyncio.Event()

    def load() -> None:
        try:
            load_litellm()
        except Exception as exc:  # the first run that needs it raises it again, in context
            logging.getLogger(__name__).warning("litellm did not import: %s", redact(str(exc)))
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(loaded.set)

    threading.Thread(target=load, name="litellm-warm-up", daemon=True).start()
    await loaded.wait()


def _retry_after(exc: Exception) -> float | None:
    """The Retry-After header in seconds; litellm keeps the provider's headers in one of
    several places depending on the code path."""
    candidates: list[Any] = [
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ]
    for headers in candidates:
        if headers:
            return retry_after_of(headers)
    return None


def _kinds(errors: ModuleType) -> tuple[tuple[Any, ErrorKind], ...]:
    """litellm's exception classes -> kind, the first match wins (a content filter and a
    context window are bad requests too), in the manner of httpx's ``HTTPCORE_EXC_MAP``."""
    return ((errors.ContentPolicyViolationError, ErrorKind.CONTENT_FILTER),
            (errors.ContextWindowExceededError, ErrorKind.CONTEXT_WINDOW),
            (errors.Timeout, ErrorKind.TIMEOUT),
            (errors.RateLimitError, ErrorKind.RATE_LIMIT),
            (errors.AuthenticationError | errors.PermissionDeniedError, ErrorKind.AUTH),
            (errors.NotFoundError | errors.BadRequestError, ErrorKind.BAD_REQUEST))


def kind_of(exc: Exception, status: int | None, litellm: ModuleType) -> ErrorKind:
    """The kind of a litellm/openai exception. Where its class names only the status's
    family, the status decides: a 429 is a rate limit whatever class litellm chose, and a
    5xx "bad request" is the server's failure, worth another try. Anything else (a dropped
    connection, a truncated or garbled response) is a server error."""
    kind = next((kind for types, kind in _kinds(litellm.exceptions) if isinstance(exc, types)),
                ErrorKind.SERVER_ERROR)
    if status == 429 and kind in (ErrorKind.AUTH, ErrorKind.BAD_REQUEST, ErrorKind.SERVER_ERROR):
        return ErrorKind.RATE_LIMIT
    if kind is ErrorKind.BAD_REQUEST and status is not None and status >= 500:
        return ErrorKind.SERVER_ERROR
    return kind


def map_error(exc: Exception, litellm: ModuleType) -> ProviderError:
    """Translate any litellm/openai exception into a ProviderError with a redacted message."""
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    # litellm quotes the whole traceback of a response it could not convert, and the error
    # that broke a stream again after its own: keep the why, once.
    text = redact(str(exc)).split("Traceback (most recent call last)")[0].replace("\n", " ")
    text = text.split(" Original exception: ")[0]
    text = _CLASS_PREFIX.sub("", text).replace("OpenAIException - ", "")
    message = text[:400]
    if is_html(message):  # a web server answered, not a model's: no retry will change it
        return html_error(status)
    kind = kind_of(exc, status, litellm)
    return ProviderError.of(kind, message, status=429 if kind is ErrorKind.RATE_LIMIT else status,
                            retry_after=_retry_after(exc))


def _cost(response: Any) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    return float(cost) if isinstance(cost, int | float) else None


async def _streamed(litellm: ModuleType, kwargs: dict[str, Any], on_text: TextListener) -> Any:
    """The reply to ``kwargs`` streamed: each piece of its text, and of its tool calls'
    arguments, goes to ``on_text`` as it arrives (one streamed chunk is a token), and the
    whole reply is assembled by litellm's own builder, so that its content, tool calls, usage
    and cost are those of the same call made without streaming. The HTTP stream is closed
    however the call ends: a cancelled call leaves nothing running on the server."""
    stream = await litellm.acompletion(**kwargs, stream=True,
                                       stream_options={"include_usage": True})
    chunks: list[Any] = []
    try:
        async for chunk in stream:
            chunks.append(chunk)
            for choice in chunk.choices:
                if choice.delta.content:
                    on_text(choice.delta.content, 1)
                for call in choice.delta.tool_calls or ():
                    if call.function is not None and call.function.arguments:
                        on_text(call.function.arguments, 1)
    finally:
        await stream.aclose()
    # A stream cut short between two events ends like a finished one, and litellm then makes
    # up a final chunk of its own: only its note of the finish reason the wire sent tells
    # them apart (what it checks itself when a connection breaks mid-stream; a litellm that
    # kept no such note would be taken at its word). A reply cut short is a failed call,
    # retried as a truncated whole reply would be.
    notes = [getattr(stream, name, "not kept")
             for name in ("received_finish_reason", "intermittent_finish_reason")]
    finished = any(note is not None for note in notes)
    response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
    if response is None or not finished:
        raise cut_short()
    return response


class LiteLLMProvider:
    """The default provider: one litellm ``acompletion`` per call, no retries of its own.

    A call with a live-draft listener (``CallContext.on_text``) streams; one without is made
    whole. A server the user runs that speaks OpenAI's format is called directly
    (:mod:`.openai_direct`: a millisecond or two a call, a few microseconds a streamed token);
    every other provider through litellm, whose stream costs far more CPU than its whole
    reply (``bench/run.py --only streaming``: ~12 ms more for a short reply, ~0.4 ms more per
    token), hidden behind a hosted model's own pace.

    A connection that cannot be made to a server the user runs (a ``base_url``, Ollama) that
    has never answered in this process is not worth a retry (nothing listens, the name does
    not resolve, it is not TLS): the call fails at once, naming the URL but not the reason
    (:mod:`massgen_mcp.providers.endpoints`). Once it has answered, the same failure is a blip
    and is retried like any other, as is every connection failure to a hosted API."""

    def __init__(self) -> None:
        self._answered: set[tuple[str, str]] = set()  # (provider, base_url) that replied

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion:
        key = api_key(agent)
        listener = context.on_text if context is not None else None
        if goes_direct(agent):
            return await self._direct(agent, messages, tools, timeout_s, listener,
                                      key or _PLACEHOLDER_KEY)
        litellm = await litellm_module()
        kwargs: dict[str, Any] = {
            "model": routed_model(agent),
            "messages": messages,
            "timeout": timeout_s,
            "num_retries": 0,
            "max_retries": 0,
        }
        if tools:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = "required"
        if agent.base_url:
            kwargs["api_base"] = agent.base_url
        if key:
            kwargs["api_key"] = key
        elif agent.base_url:
            kwargs["api_key"] = _PLACEHOLDER_KEY
        if agent.web_search:  # litellm maps this to each provider's own web search
            kwargs["web_search_options"] = {"search_context_size": "medium"}
        for name in ("temperature", "top_p", "max_tokens"):
            value = getattr(agent, name)
            if value is not None:
                kwargs[name] = value
        started = time.perf_counter()
        try:
            if listener is None:
                response = await litellm.acompletion(**kwargs)
            else:
                response = await _streamed(litellm, kwargs, listener)
            message = response.choices[0].message
            usage = getattr(response, "usage", None)
            calls = [
                ToolCall(
                    id=call.id or f"call_{i}",
                    name=call.function.name or "",
                    arguments=call.function.arguments or "",
                )
                for i, call in enumerate(message.tool_calls or [])
            ]
        except (asyncio.CancelledError, ProviderError):
            raise
        except Exception as exc:
            raise self._failure(agent, exc, map_error(exc, litellm)) from None
        self._answered.add(self._key(agent))
        return Completion(
            content=message.content,
            tool_calls=calls,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cost_usd=_cost(response),
            latency_s=time.perf_counter() - started,
        )

    async def _direct(self, agent: AgentSpec, messages: list[dict[str, Any]],
                      tools: list[dict[str, Any]] | None, timeout_s: float,
                      listener: TextListener | None, key: str) -> Completion:
        """A call to an OpenAI-format server the user runs (:mod:`.openai_direct`), its
        failures worded as litellm's are."""
        try:
            completion = await chat(agent, messages, tools, api_key=key, timeout_s=timeout_s,
                                    on_text=listener)
        except (asyncio.CancelledError, ProviderError):
            raise
        except Exception as exc:  # httpx's: the connection broke, or could not be made
            kind = (ErrorKind.TIMEOUT if isinstance(exc, httpx.TimeoutException)
                    else ErrorKind.SERVER_ERROR)
            raise self._failure(agent, exc, ProviderError.of(
                kind, redact(str(exc) or type(exc).__name__)[:400])) from None
        self._answered.add(self._key(agent))
        return completion

    def _failure(self, agent: AgentSpec, exc: Exception, otherwise: ProviderError
                 ) -> ProviderError:
        """What a failed call raises: ``otherwise``, unless the connection could not be
        made. A hosted API that fails to connect is a network blip (DNS, Wi-Fi) until shown
        otherwise: retried as before. A server the user runs fails at once, with its URL but
        not why: the URL may be a model's call's, whose caller must not learn which hosts
        refuse, do not resolve or are not TLS (endpoints' docstring); the user's own were
        told that before the run."""
        why = connect_failure(exc)
        if why is None:
            return otherwise
        url = endpoint_of(agent)
        return ProviderError(unreachable_message(agent, url, None if url else why),
                             retryable=url is None or self._key(agent) in self._answered,
                             kind=ErrorKind.UNREACHABLE)

    @staticmethod
    def _key(agent: AgentSpec) -> tuple[str, str]:
        return provider_of(agent), agent.base_url or ""
