"""100 concurrent runs x 3 agents in one server (``python bench/run.py --only load``), in a
fresh process (``run.py --worker load``) so that its peak RSS is the scenario's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.scenarios import HERE, LATENCY_S
from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.testing.scripted import ScriptedServer, agree


def worker_load() -> dict[str, Any]:
    """Runs in a fresh process so peak RSS is this scenario's own."""
    import resource

    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    load_litellm()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    samples: list[float] = []

    async def measure(base_url: str, home: Path) -> float:
        models = [f"openai/m{i}@{base_url}" for i in range(3)]
        async with Client(create_server(home=home)) as client:
            started = time.perf_counter()
            ids = [(await client.call_tool("run_consensus", {
                "question": f"question {i}", "models": models})).structured_content["session_id"]
                for i in range(100)]
            done: set[str] = set()
            i = 0
            while len(done) < len(ids):
                sid = ids[i % len(ids)]
                i += 1
                t = time.perf_counter()
                status = (await client.call_tool("get_status", {"session_id": sid})
                          ).structured_content
                samples.append(time.perf_counter() - t)
                if status["done"]:
                    assert status["status"] == "completed", status
                    done.add(sid)
            return time.perf_counter() - started

    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree, latency_s=LATENCY_S) as srv:
        total = asyncio.run(measure(srv.base_url, Path(tmp)))
    samples.sort()
    return {"runs": 100, "agents_per_run": 3, "total_s": round(total, 2),
            "rss_before_mib": round(rss_before), "peak_rss_mib": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "status_reads": len(samples),
            "status_p50_ms": round(1000 * samples[len(samples) // 2], 2),
            "status_p95_ms": round(1000 * samples[int(len(samples) * 0.95)], 2)}


def bench_load(quick: bool) -> dict[str, Any]:
    """100 concurrent runs x 3 agents in one server (a fresh process), 200 ms per call."""
    # Lift the per-provider bound (default 16) so the figure is the server's own capacity:
    # all 300 agents here share one scripted endpoint.
    env = {**os.environ, "MASSGEN_MAX_PARALLEL_PER_PROVIDER": "400"}
    out = subprocess.run([sys.executable, str(HERE / "run.py"), "--worker", "load"], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_load(data: dict[str, Any]) -> None:
    print(f"\n{data['runs']} concurrent runs x {data['agents_per_run']} agents: all done in "
          f"{data['total_s']} s; peak RSS {data['peak_rss_mib']} MiB "
          f"(after imports {data['rss_before_mib']} MiB); get_status over {data['status_reads']} "
          f"reads: p50 {data['status_p50_ms']} ms, p95 {data['status_p95_ms']} ms")
