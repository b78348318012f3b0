"""The embedded model (``python bench/run.py --only embedded``): its tokens per second and a
whole 3-agent offline run.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.records.store import SessionStore


def bench_embedded(quick: bool) -> dict[str, Any]:
    """Tokens per second of the embedded model and a whole 3-agent offline run."""
    from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider, embedded_model_name
    from massgen_mcp.providers.registry import ProviderRouter
    from massgen_mcp.team.discover import PERSONAS

    if embedded_model_name() is None:
        return {"skipped": "pip install 'massgen-mcp[local]'"}
    agents = [{"id": f"agent{i}", "model": "local/smollm2", "system_message": p,
               "temperature": t} for i, (p, t) in enumerate(PERSONAS)]
    team = build_team({"agents": agents})
    provider = LlamaCppProvider()

    async def throughput() -> float:
        await provider.complete(team.agents[0], [{"role": "user", "content": "hi"}],
                                tools=None, timeout_s=60)
        started = time.perf_counter()
        out = await provider.complete(
            team.agents[1], [{"role": "user", "content": "Describe the sea in detail."}],
            tools=None, timeout_s=120)
        return out.completion_tokens / (time.perf_counter() - started)

    async def offline_run(home: Path) -> tuple[float, str]:
        runner = LocalExecutor(SessionStore(home), ProviderRouter(local=provider))
        started = time.perf_counter()
        run = await runner.start(RequestRecord(question="What is the capital of France?"), team)
        result = await run.task
        return time.perf_counter() - started, result.status.value

    rates = [asyncio.run(throughput()) for _ in range(3)]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [asyncio.run(offline_run(Path(tmp))) for _ in range(3 if quick else 5)]
    return {"tokens_per_s": round(statistics.median(rates), 1),
            "offline_run_s": round(statistics.median(t for t, _ in runs), 2),
            "completed": sum(1 for _, s in runs if s == "completed"), "runs": len(runs)}


def print_embedded(data: dict[str, Any]) -> None:
    if "skipped" in data:
        print(f"\nembedded model: skipped ({data['skipped']})")
        return
    print(f"\nembedded SmolLM2-135M: {data['tokens_per_s']} tokens/s; 3-agent offline run "
          f"{data['offline_run_s']} s ({data['completed']}/{data['runs']} completed)")
