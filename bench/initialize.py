"""The stdio server's cold start (``python bench/run.py --only initialize``): process start to
the ``initialize`` response, and to the first ``tools/list`` response.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def bench_initialize(quick: bool) -> dict[str, Any]:
    """Process start -> `initialize` response of the stdio server, and -> the first
    `tools/list` response (the whole server is up)."""
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}}) + "\n"
    then = (json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"
            + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}) + "\n")
    times, ready = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3 if quick else 7):
            started = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL,
                                    env={**os.environ, "MASSGEN_HOME": tmp})
            proc.stdin.write(init.encode())
            proc.stdin.flush()
            line = proc.stdout.readline()
            times.append(time.perf_counter() - started)
            assert b'"serverInfo"' in line, line
            proc.stdin.write(then.encode())
            proc.stdin.flush()
            line = proc.stdout.readline()
            ready.append(time.perf_counter() - started)
            assert b'"tools"' in line, line
            proc.kill()
            proc.wait()
    return {"initialize_s": round(statistics.median(times), 3),
            "tools_list_s": round(statistics.median(ready), 3), "target_s": 0.8}


def print_initialize(data: dict[str, Any]) -> None:
    print(f"\nstdio cold start, process start -> initialize response: "
          f"{data['initialize_s']:.3f} s (target <= {data['target_s']} s); -> first tools/list "
          f"response (the server fully up): {data['tools_list_s']:.3f} s")
