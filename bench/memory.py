"""Flat memory (``python bench/run.py --only memory``): resident memory after 100 and after
2,000 sessions back to back in one server process (``run.py --worker memory``).
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

from bench.scenarios import HERE
from massgen_mcp.providers.litellm_provider import load_litellm


def _rss_mib() -> float:
    """Resident memory now (not the peak), from /proc."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker_memory(sessions: int) -> dict[str, Any]:
    """One MCP server (in-memory client) runs ``sessions`` short sessions back to back
    (2 agents, no final presentation, through litellm over HTTP to scripted models); resident
    memory after 100 sessions and at the end."""
    import gc

    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    load_litellm()
    marks: dict[int, float] = {}

    async def measure(base_url: str, home: Path) -> float:
        models = [f"openai/m{i}@{base_url}" for i in range(2)]
        async with Client(create_server(home=home)) as client:
            started = time.perf_counter()
            for i in range(1, sessions + 1):
                handle = (await client.call_tool("run_consensus", {
                    "question": f"question {i}", "models": models, "wait_s": 30,
                    "options": {"skip_final_presentation": True}})).structured_content
                assert handle["status"] == "completed", handle
                if i in (100, sessions):
                    gc.collect()
                    marks[i] = _rss_mib()
            return time.perf_counter() - started

    # The scripted models run in a process of their own, so the figure is the server's alone
    # (the scripted server keeps every request it was sent).
    models = subprocess.Popen([sys.executable, "-m", "massgen_mcp.testing.scripted", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert models.stdout is not None
        base_url = models.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            total = asyncio.run(measure(base_url, Path(tmp)))
    finally:
        models.kill()
        models.wait()
    first, last = marks[100], marks[sessions]
    return {"sessions": sessions, "total_s": round(total, 1),
            "rss_after_100_mib": round(first, 1), f"rss_after_{sessions}_mib": round(last, 1),
            "growth_pct": round(100 * (last - first) / first, 1), "target_growth_pct": 10}


def bench_memory(quick: bool) -> dict[str, Any]:
    """Flat memory: RSS after 100 and after 2,000 sessions in one server process."""
    out = subprocess.run([sys.executable, str(HERE / "run.py"), "--worker", "memory",
                          "--sessions", "500" if quick else "2000"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_memory(data: dict[str, Any]) -> None:
    n = data["sessions"]
    print(f"\n{n} sessions back to back in one server: RSS {data['rss_after_100_mib']} MiB "
          f"after 100, {data[f'rss_after_{n}_mib']} MiB after {n} ({data['growth_pct']:+} %, "
          f"target within {data['target_growth_pct']} %); {data['total_s']} s")
