"""Route each agent to the provider that serves its model: ``local/*`` runs embedded
(llama.cpp), everything else goes through litellm."""

from __future__ import annotations

from typing import Any

from massgen_mcp.config import AgentSpec
from massgen_mcp.providers.base import Completion, Provider
from massgen_mcp.providers.litellm_provider import LiteLLMProvider
from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider


class ProviderRouter:
    """A Provider that dispatches on the model string's prefix."""

    def __init__(self, remote: Provider | None = None, local: Provider | None = None) -> None:
        self.remote = remote or LiteLLMProvider()
        self.local = local or LlamaCppProvider()

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
    ) -> Completion:
        provider = self.local if agent.model.startswith("local/") else self.remote
        return await provider.complete(agent, messages, tools=tools, timeout_s=timeout_s)
