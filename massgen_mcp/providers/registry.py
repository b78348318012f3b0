"""Route each agent to the provider that serves its model: ``local/*`` runs embedded
(llama.cpp), ``cli/*`` runs a coding-agent CLI, everything else goes through litellm.

The router also bounds how many calls run at once against one provider endpoint, across all
runs in this process, so a burst of sessions queues here instead of turning into a 429 storm.
The bound is ``MASSGEN_MAX_PARALLEL_PER_PROVIDER`` (default 16).
"""

from __future__ import annotations

import asyncio
from typing import Any

from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import CallContext, Completion, Provider
from massgen_mcp.providers.cli_agents import CliProvider
from massgen_mcp.providers.litellm_provider import LiteLLMProvider
from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider


class ProviderRouter:
    """A Provider that dispatches on the model string's prefix."""

    def __init__(self, remote: Provider | None = None, local: Provider | None = None,
                 max_parallel: int | None = None, cli: Provider | None = None) -> None:
        self.remote = remote or LiteLLMProvider()
        self.local = local or LlamaCppProvider()
        self.cli = cli or CliProvider()
        self.max_parallel = max_parallel or SETTINGS.max_parallel_per_provider.read()
        self._slots: dict[tuple[str, str], asyncio.Semaphore] = {}

    def slots(self, agent: AgentSpec) -> asyncio.Semaphore:
        """The semaphore shared by every call to the same provider endpoint."""
        key = (agent.provider or agent.model, agent.base_url or "")
        if key not in self._slots:
            self._slots[key] = asyncio.Semaphore(self.max_parallel)
        return self._slots[key]

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion:
        provider = (self.cli if agent.cli else
                    self.local if agent.model.startswith("local/") else self.remote)
        return await provider.complete(agent, messages, tools=tools, timeout_s=timeout_s,
                                       context=context)
