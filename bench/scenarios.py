"""The scenarios the benches share (``../shared/reference/measuring.md``): scenario A, a team
of agreeing members behind a scripted server at 200 ms a call (:func:`team`, :func:`one_run`),
and scenario B, lognormal latency with one straggler (:func:`b_latency`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.litellm_provider import LiteLLMProvider
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import Latency, ScriptedServer

HERE = Path(__file__).resolve().parent
LATENCY_S = 0.2



def team(server: ScriptedServer, n: int, **options: Any):
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}", "base_url": server.base_url}
              for i in range(n)]
    return build_team({"agents": agents, "options": options})


async def one_run(server: ScriptedServer, n: int, home: Path, *, drafts: bool = False,
                  **options: Any) -> dict[str, Any]:
    """One run on a headless runner (``drafts``: with live drafts, as servers keep them:
    every call streams)."""
    runner = LocalExecutor(SessionStore(home), LiteLLMProvider(), drafts=drafts)
    before_requests = len(server.requests)
    started = time.perf_counter()
    run = await runner.start(RequestRecord(question="What is 6*7?"), team(server, n, **options))
    result = await run.task
    wall = time.perf_counter() - started
    requests = server.requests[before_requests:]
    tokens = sum(max(1, r.prompt_chars() // 4) for r in requests)
    return {"wall_s": wall, "calls": len(requests), "prompt_tokens": tokens,
            "status": result.status}


# Scenario B (../shared/reference/measuring.md): real latency, one straggler.
B_MEDIAN_S, B_SIGMA, B_AGENTS, B_SLOW = 0.5, 0.5, 5, 3.0


def b_latency(seed: int) -> Latency:
    """Scenario B's latencies for one seed: the last agent's model is the slow one."""
    return Latency(B_MEDIAN_S, B_SIGMA, seed=seed, slower={f"m{B_AGENTS - 1}": B_SLOW})
