"""``get_status`` p50/p95 through the MCP layer while 50 runs are in flight
(``python bench/run.py --only status_latency``).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.testing.scripted import ScriptedServer, agree


def bench_status_latency(quick: bool) -> dict[str, Any]:
    """get_status p50/p95 through the MCP layer while 50 runs are in flight."""
    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    load_litellm()
    samples: list[float] = []

    async def measure(base_url: str, home: Path) -> None:
        models = [f"openai/m{i}@{base_url}" for i in range(3)]
        async with Client(create_server(home=home)) as client:
            ids = []
            for _ in range(50):
                handle = await client.call_tool("run_consensus", {
                    "question": "What is 6*7?", "models": models})
                ids.append(handle.structured_content["session_id"])
            for i in range(100 if quick else 300):
                started = time.perf_counter()
                await client.call_tool("get_status", {"session_id": ids[i % len(ids)]})
                samples.append(time.perf_counter() - started)
            for sid in ids:
                await client.call_tool("cancel_session", {"session_id": sid})

    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree, latency_s=2.0) as srv:
        asyncio.run(measure(srv.base_url, Path(tmp)))
    samples.sort()
    return {"runs_in_flight": 50, "samples": len(samples),
            "p50_ms": round(1000 * samples[len(samples) // 2], 2),
            "p95_ms": round(1000 * samples[int(len(samples) * 0.95)], 2),
            "target_p95_ms": 20}


def print_status_latency(data: dict[str, Any]) -> None:
    print(f"\nget_status with {data['runs_in_flight']} runs in flight: p50 {data['p50_ms']} ms, "
          f"p95 {data['p95_ms']} ms (target p95 <= {data['target_p95_ms']} ms)")
