"""What one call costs by the path it takes (``python bench/run.py --only streaming``): CPU
and wall per call through litellm or the direct OpenAI wire, whole or streamed.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, vote


def bench_streaming(quick: bool) -> dict[str, Any]:
    """What one call costs by the path it takes: CPU and wall per call, for a short tool call
    (a vote's ~40 characters of arguments) and a 2,000-character answer, 4 characters (~1
    token) a chunk when streamed, as hosted APIs stream. ``direct``: openai/ at a base_url,
    called by providers.openai_direct, whole (headless runs) or streamed to a live draft
    (``direct-sse``); ``litellm``: the same call through litellm (MASSGEN_OPENAI_DIRECT=0), as
    every hosted provider is called, whole or streamed (``litellm-sse``). The scripted server
    runs in this process: its share is in the CPU."""
    from massgen_mcp.consensus.prompts import workflow_tools
    from massgen_mcp.consensus.state import View
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.providers.base import CallContext
    from massgen_mcp.testing.scripted import text

    load_litellm()
    calls = 20 if quick else 50
    long_text = ("The answer is 42. " * 120)[:2000]
    tools = workflow_tools(View(0, (), may_answer=True, first_round=True))
    messages = [{"role": "user", "content": "What is 6*7?"}]

    def policy(req: ChatRequest) -> Reply:
        return text(long_text) if req.model == "long" else vote("A1", "it answers")

    async def per_call(agent: AgentSpec, offered: Any, stream: bool) -> tuple[float, float]:
        provider = LiteLLMProvider()
        context = CallContext("bench", on_text=lambda t, n: None) if stream else None
        for _ in range(3):  # litellm's first-call setup
            await provider.complete(agent, messages, tools=offered, timeout_s=30,
                                    context=context)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await provider.complete(agent, messages, tools=offered, timeout_s=30,
                                    context=context)
        return ((time.process_time() - cpu) / calls * 1000,
                (time.perf_counter() - wall) / calls * 1000)

    out: dict[str, Any] = {"calls": calls}
    with ScriptedServer(policy) as srv:
        for name, model, offered in (("tool_call", "short", tools), ("text_2000", "long", None)):
            for mode, direct, stream in (("litellm", "0", False), ("direct", "1", False),
                                         ("litellm-sse", "0", True), ("direct-sse", "1", True)):
                agent = AgentSpec(id="a", model=f"openai/{model}", base_url=srv.base_url)
                os.environ["MASSGEN_OPENAI_DIRECT"] = direct
                runs = [asyncio.run(per_call(agent, offered, stream)) for _ in range(3)]
                out[f"{name}_{mode}"] = {
                    "cpu_ms": round(statistics.median(c for c, _ in runs), 2),
                    "wall_ms": round(statistics.median(w for _, w in runs), 2)}
    os.environ.pop("MASSGEN_OPENAI_DIRECT")
    return out


def print_streaming(data: dict[str, Any]) -> None:
    print(f"\nOne call by its path (median of 3 x {data['calls']} calls): litellm (hosted "
          "providers) or direct (openai/ at a base_url), whole (headless) or streamed to a "
          "live draft (-sse)")
    print(f"{'reply':>10} {'mode':>12} {'CPU ms':>7} {'wall ms':>8}")
    for key, row in data.items():
        if key != "calls" and "_" in key:
            name, mode = key.rsplit("_", 1)
            print(f"{name:>10} {mode:>12} {row['cpu_ms']:>7.2f} {row['wall_ms']:>8.2f}")
