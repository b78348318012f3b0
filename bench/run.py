"""Benchmarks: python bench/run.py [--quick] [--only SECTION ...]

Prints a table per section and writes bench/results.json. Everything runs against the scripted
OpenAI-compatible server on 127.0.0.1 (massgen_mcp.testing.scripted); nothing touches the network.
Scenario definitions follow ../shared/reference/measuring.md ("Scenario A": 3 agents behind a
200 ms scripted server, everyone agrees; prompt tokens = characters sent / 4, server-counted).
``--only scenario_b`` runs scenario B for us and, with MASSGEN_UPSTREAM=<path to a massgen
0.1.97 executable>, for upstream MassGen in the same run, seed by seed (bench/upstream.py).

Each section is a module of its own (``bench/<section>.py``: ``bench_<section>`` measures,
``print_<section>`` shows); the scenarios they share are in ``bench/scenarios.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.cold_start import bench_cold_start, print_cold_start  # noqa: E402
from bench.embedded import bench_embedded, print_embedded  # noqa: E402
from bench.engine import bench_engine, print_engine  # noqa: E402
from bench.faces import bench_faces, print_faces  # noqa: E402
from bench.host_start import bench_host_start, print_host_start  # noqa: E402
from bench.initialize import bench_initialize, print_initialize  # noqa: E402
from bench.install_size import bench_install_size, print_install_size  # noqa: E402
from bench.knobs import bench_knobs, print_knobs  # noqa: E402
from bench.latency import bench_latency, print_latency  # noqa: E402
from bench.latency_floor import bench_latency_floor, print_latency_floor  # noqa: E402
from bench.load import bench_load, print_load, worker_load  # noqa: E402
from bench.memory import bench_memory, print_memory, worker_memory  # noqa: E402
from bench.redaction import bench_redaction, print_redaction  # noqa: E402
from bench.review import bench_review, print_review  # noqa: E402
from bench.review_parts import bench_review_parts, print_review_parts  # noqa: E402
from bench.status_latency import bench_status_latency, print_status_latency  # noqa: E402
from bench.streaming import bench_streaming, print_streaming  # noqa: E402
from bench.tools_list import bench_tools_list, print_tools_list  # noqa: E402
from bench.upstream import bench_scenario_b, print_scenario_b  # noqa: E402

SECTIONS = {
    "engine": (bench_engine, print_engine),
    "redaction": (bench_redaction, print_redaction),
    "latency": (bench_latency, print_latency),
    "latency_floor": (bench_latency_floor, print_latency_floor),
    "scenario_b": (bench_scenario_b, print_scenario_b),
    "cold_start": (bench_cold_start, print_cold_start),
    "initialize": (bench_initialize, print_initialize),
    "host_start": (bench_host_start, print_host_start),
    "status_latency": (bench_status_latency, print_status_latency),
    "tools_list": (bench_tools_list, print_tools_list),
    "load": (bench_load, print_load),
    "memory": (bench_memory, print_memory),
    "embedded": (bench_embedded, print_embedded),
    "streaming": (bench_streaming, print_streaming),
    "install_size": (bench_install_size, print_install_size),
    "review": (bench_review, print_review),
    "review_parts": (bench_review_parts, print_review_parts),
    "knobs": (bench_knobs, print_knobs),
    "faces": (bench_faces, print_faces),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS))
    parser.add_argument("--worker", choices=["load", "memory"], help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=2000, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "load":
        print(json.dumps(worker_load()))
        return
    if args.worker == "memory":
        print(json.dumps(worker_memory(args.sessions)))
        return
    path = HERE / "results.json"
    # Sections measured separately (--only) accumulate in one file.
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    results.update({
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
    })
    for name in args.only or SECTIONS:
        measure, show = SECTIONS[name]
        results[name] = measure(args.quick)
        show(results[name])
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
