"""The provider seam: one async method that sends chat messages to a model.

The engine only knows :class:`Provider`; litellm, the embedded model and the coding-agent CLIs
sit behind it. Retries with backoff live here, once, for every provider: rate limits, 5xx,
timeouts and broken connections are retried, honouring Retry-After; anything else fails at once.
A provider that bounds concurrent calls (:class:`Bounded`, the router) is asked for a slot
before each attempt. What an executor runs a whole team on (:class:`TeamProvider`: the router,
or a test's scripted provider) also says, before a run starts, why the team cannot run here.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError, Refusal
from massgen_mcp.core.secrets import redactor
from massgen_mcp.core.spec import TeamConfig

MAX_RETRY_AFTER_S = 60.0
# What one call may claim to have used: a count beyond this (or negative, or not a whole
# number) is a server's lie, and would lift or break every budget.
MAX_CALL_TOKENS = 10_000_000


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, validated by the consensus layer


@dataclass(frozen=True)
class Completion:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None: the provider's price is unknown
    latency_s: float = 0.0

    def redacted(self) -> Completion:
        """This reply with every known secret masked: model output is untrusted, and an
        echoed key must not reach the record, the user or another provider's agent."""
        clean = redactor()
        return replace(self, content=self.content and clean(self.content), tool_calls=[
            replace(call, arguments=clean(call.arguments)) for call in self.tool_calls])

    def assistant_message(self) -> dict[str, Any]:
        """This reply as an OpenAI-format assistant message, for corrective retries."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


# Called with each piece of a reply as it streams in (reply text, or the text of a tool call's
# arguments) and how many tokens that piece holds (the provider's best count: one per streamed
# chunk where the wire sends a token per chunk). Always on the event loop's thread.
TextListener = Callable[[str, int], None]


@dataclass(frozen=True)
class CallContext:
    """What a provider may need to know about the run a call belongs to: where a CLI agent's
    stderr goes (the session's ``cli.log``), and who wants the reply's text while it is
    written (``on_text``: the live draft), and the folder a coding CLI works in
    (``work_folder``: a review's read-only snapshot of the reviewed code; None: an empty
    folder of the call's own). The HTTP providers stream only when ``on_text`` is
    set (a whole reply is cheaper to parse); the coding CLIs always print their streaming
    format and only call it when set. Where a model or wire cannot stream, ``on_text`` is
    never called. The :class:`Completion` returned is the same either way."""

    session_id: str
    log_path: Path | None = None
    on_text: TextListener | None = None
    work_folder: Path | None = None


class Provider(Protocol):
    """Anything that can complete a chat for an agent."""

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion: ...


class TeamProvider(Provider, Protocol):
    """A provider for every agent of a team, which an executor runs on: it answers "may this
    team run here?" as well as the calls, since only it knows where its models live. The
    router asks every check (keys, CLIs, servers, pulled models); a provider of scripted
    replies asks those that need no server (it has none to probe)."""

    async def problems(self, team: TeamConfig, *, probe_base_urls: bool = True
                       ) -> list[Refusal]:
        """Why ``team`` cannot run here, asked before its record exists (``probe_base_urls``:
        whether to try a connection to each declared server)."""
        ...


@runtime_checkable
class Bounded(Protocol):
    """A provider that bounds how many calls run at once (see ``ProviderRouter.slots``)."""

    def slots(self, agent: AgentSpec) -> AbstractAsyncContextManager[Any]:
        """The gate every call for ``agent`` passes through: held for the whole call."""
        ...


RetryHook = Callable[[int, ProviderError, float], Awaitable[None]]


def retry_after_of(headers: Any) -> float | None:
    """A response's Retry-After in seconds (None: absent, or an HTTP date, which our own
    backoff then replaces); ``headers`` is any mapping, of either case."""
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def cut_short() -> ProviderError:
    """A streamed reply whose stream ended before the server said the reply was finished: a
    failed call, retried as a truncated whole reply would be."""
    return ProviderError.of(ErrorKind.SERVER_ERROR,
                            "the reply's stream ended before the reply did")


def backoff_delay(attempt: int, error: ProviderError, base_s: float) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): Retry-After if given, else jittered
    exponential backoff."""
    if error.retry_after is not None:
        return min(max(error.retry_after, 0.0), MAX_RETRY_AFTER_S)
    return float(min(base_s * 2 ** (attempt - 1), 30.0) * random.uniform(0.5, 1.0))


async def complete_with_retries(
    provider: Provider,
    agent: AgentSpec,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
    on_retry: RetryHook,
    context: CallContext | None = None,
) -> Completion:
    """Call the provider, retrying transient failures; raise the last ProviderError."""
    # Time spent queueing for a slot does not count against the call's timeout.
    attempt = 0
    while True:
        try:
            gate: AbstractAsyncContextManager[Any] = (
                provider.slots(agent) if isinstance(provider, Bounded)
                else contextlib.nullcontext())
            async with gate:
                async with asyncio.timeout(timeout_s):
                    return await provider.complete(agent, messages, tools=tools,
                                                   timeout_s=timeout_s, context=context)
        except TimeoutError:
            # A CLI turn that ran out of time already cost minutes: trying again would only
            # double the wait, so the agent is dropped instead.
            error = ProviderError(
                f"no response within {timeout_s:g} s "
                f"({'cli_call_timeout_s' if agent.cli else 'call_timeout_s'})",
                retryable=agent.cli is None, kind=ErrorKind.TIMEOUT,
            )
        except ProviderError as exc:
            error = exc
        if not error.retryable or attempt >= max_retries:
            raise error
        attempt += 1
        delay = backoff_delay(attempt, error, backoff_s)
        await on_retry(attempt, error, delay)
        await asyncio.sleep(delay)
