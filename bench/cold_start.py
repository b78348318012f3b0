"""A headless ``massgen-mcp run`` process for scenario A, start to exit
(``python bench/run.py --only cold_start``).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.scenarios import LATENCY_S
from massgen_mcp.testing.scripted import ScriptedServer, agree


def bench_cold_start(quick: bool) -> dict[str, Any]:
    """Whole headless `massgen-mcp run` process for scenario A, start to exit."""
    repeats = 3 if quick else 5
    times = []
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree, latency_s=LATENCY_S) as srv:
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "massgen_mcp", "--home", tmp, "run", "What is 6*7?",
                 "--quiet", "--models", "openai/a,openai/b,openai/c", "--base-url",
                 srv.base_url], check=True, capture_output=True)
            times.append(time.perf_counter() - started)
    return {"headless_run_s": round(statistics.median(times), 3), "target_s": 5.5}


def print_cold_start(data: dict[str, Any]) -> None:
    print(f"\nHeadless run process (scenario A): {data['headless_run_s']:.2f} s "
          f"(target <= {data['target_s']} s)")
