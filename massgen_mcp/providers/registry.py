"""Route each agent to the provider that serves its model: ``local/*`` runs embedded
(llama.cpp), ``cli/*`` runs a coding-agent CLI, everything else goes through litellm.

The router also bounds how many calls run at once against one provider endpoint, across all
runs in this process, so a burst of sessions queues here instead of turning into a 429 storm.
The bound is ``MASSGEN_MAX_PARALLEL_PER_PROVIDER`` (default 16).

For that bound to hold, and for the embedded model to be loaded once, a process has one router:
:func:`shared_router`, made on first use and closed at interpreter exit (or by
:func:`close_shared_router`). Services use it unless they are given a provider of their own.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import Refusal
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers import endpoints, preflight
from massgen_mcp.providers.base import Bounded, CallContext, Completion, Provider
from massgen_mcp.providers.cli.provider import CliProvider
from massgen_mcp.providers.kinds import Route, kind_of, provider_of
from massgen_mcp.providers.litellm_provider import LiteLLMProvider
from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider
from massgen_mcp.providers.openai_direct import goes_direct


def served_by(agent: AgentSpec) -> Route:
    """Which of the router's providers serves ``agent``: its coding CLI, the embedded model,
    or the remote one (litellm, which calls an OpenAI-format server at a base_url directly);
    its row's (:mod:`massgen_mcp.providers.kinds`)."""
    return kind_of(agent).route


def through_litellm(agent: AgentSpec) -> bool:
    """Whether ``agent``'s calls go through litellm itself."""
    return served_by(agent) == "remote" and not goes_direct(agent)


class ProviderRouter:
    """A Provider that dispatches on the model string's prefix."""

    def __init__(self, remote: Provider | None = None, local: Provider | None = None,
                 max_parallel: int | None = None, cli: Provider | None = None) -> None:
        self.remote = remote or LiteLLMProvider()
        self.local = local or LlamaCppProvider()
        self.cli = cli or CliProvider()
        self.max_parallel = max_parallel or SETTINGS.max_parallel_per_provider.read()
        # Per event loop: an asyncio semaphore belongs to one loop, and ``run()`` starts a
        # loop per call (one after the other, so the bound still holds).
        self._slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary())

    def providers(self) -> dict[Route, Provider]:
        """The provider that serves each route (a row's ``route``,
        :mod:`massgen_mcp.providers.kinds`)."""
        return {"cli": self.cli, "local": self.local, "remote": self.remote}

    def slots(self, agent: AgentSpec) -> AbstractAsyncContextManager[Any]:
        """The semaphore shared by every call to the same provider endpoint; then the
        provider's own gate, if it bounds its calls (:class:`~.base.Bounded`: the embedded
        model's seat at this machine's cores, ``LlamaCppProvider.slots``), so processes that
        run it queue for the cores outside their calls' timeouts."""
        key = (provider_of(agent) or agent.model, agent.base_url or "")
        slots = self._slots.setdefault(asyncio.get_running_loop(), {})
        if key not in slots:
            slots[key] = asyncio.Semaphore(self.max_parallel)
        provider = self.providers()[served_by(agent)]
        if isinstance(provider, Bounded):
            return _both(slots[key], provider.slots(agent))
        return slots[key]

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion:
        provider = self.providers()[served_by(agent)]
        return await provider.complete(agent, messages, tools=tools, timeout_s=timeout_s,
                                       context=context)

    async def unreachable(self, team: TeamConfig, *, probe_base_urls: bool = True
                          ) -> list[str]:
        """One line per agent whose server takes no connection now, asked before a run
        here (:mod:`massgen_mcp.providers.endpoints`: only servers the user runs, and no
        ``base_url`` a model's call chose unless ``probe_base_urls``). A remote provider
        other than litellm's connects its own way, if at all: nothing to ask."""
        if not isinstance(self.remote, LiteLLMProvider):
            return []
        return await endpoints.unreachable(team.agents, probe_base_urls=probe_base_urls)

    async def problems(self, team: TeamConfig, *, probe_base_urls: bool = True
                       ) -> list[Refusal]:
        """Why ``team`` cannot run here, asked before its record exists: keys, CLIs missing,
        not logged in or too old, servers that take no connection (see :meth:`unreachable`
        for ``probe_base_urls``), offline models that do not exist or were never pulled."""
        return await preflight.here(team, await self.unreachable(
            team, probe_base_urls=probe_base_urls))

    def close(self) -> None:
        """Free what the providers hold (the embedded model's memory and threads)."""
        for provider in self.providers().values():
            close = getattr(provider, "close", None)
            if close is not None:
                close()


@asynccontextmanager
async def _both(outer: AbstractAsyncContextManager[Any], inner: AbstractAsyncContextManager[Any]
                ) -> AsyncIterator[None]:
    async with outer, inner:
        yield


_shared: ProviderRouter | None = None
_shared_lock = threading.Lock()


def shared_router() -> ProviderRouter:
    """This process's router, made on first use: every service that runs models here goes
    through it, so the per-provider bound and the loaded embedded model are shared."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ProviderRouter()
        return _shared


def close_shared_router() -> None:
    """Close this process's router (the next :func:`shared_router` makes a new one)."""
    global _shared
    with _shared_lock:
        router, _shared = _shared, None
    if router is not None:
        router.close()


# Freed before the interpreter tears down: llama.cpp's threads must not outlive it.
atexit.register(close_shared_router)
