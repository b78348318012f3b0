"""Benchmarks: python bench/run.py [--quick] [--only SECTION ...]

Prints a table per section and writes bench/results.json. Everything runs against the scripted
OpenAI-compatible server on 127.0.0.1 (massgen_mcp.scripted); nothing touches the network.
Scenario definitions follow ../shared/reference/measuring.md ("Scenario A": 3 agents behind a
200 ms scripted server, everyone agrees; prompt tokens = characters sent / 4, server-counted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from massgen_mcp.config import build_team  # noqa: E402
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm  # noqa: E402
from massgen_mcp.scripted import ChatRequest, Reply, ScriptedServer, agree, answer  # noqa: E402
from massgen_mcp.sessions.runner import SessionRunner  # noqa: E402
from massgen_mcp.sessions.store import SessionStore  # noqa: E402

LATENCY_S = 0.2


def team(server: ScriptedServer, n: int, **options: Any):
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}", "base_url": server.base_url}
              for i in range(n)]
    return build_team({"agents": agents, "options": options})


def disagree(rounds: int) -> Callable[[ChatRequest], Reply]:
    """Every agent revises its answer ``rounds`` times before it agrees."""
    def policy(req: ChatRequest) -> Reply:
        own = list(req.answers.values())[-1] if req.answers else ""
        revision = own.count("(revised)")
        if req.vote_labels and "new_answer" in req.tool_names and revision < rounds:
            return answer(own + " (revised)")
        return agree(req)
    return policy


async def one_run(server: ScriptedServer, n: int, home: Path, **options: Any) -> dict[str, Any]:
    runner = SessionRunner(SessionStore(home), LiteLLMProvider())
    before_requests = len(server.requests)
    started = time.perf_counter()
    run = await runner.start("What is 6*7?", team(server, n, **options))
    result = await run.task
    wall = time.perf_counter() - started
    requests = server.requests[before_requests:]
    tokens = sum(max(1, r.prompt_chars() // 4) for r in requests)
    return {"wall_s": wall, "calls": len(requests), "prompt_tokens": tokens,
            "status": result["status"]}


def bench_engine(quick: bool) -> dict[str, Any]:
    """Overhead vs the critical path (3 serial calls) and calls/tokens by team size and rounds."""
    load_litellm()
    repeats = 3 if quick else 7
    out: dict[str, Any] = {"overhead": {}, "cost_growth": {}}
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree, latency_s=LATENCY_S) as srv:
        asyncio.run(one_run(srv, 3, Path(tmp)))  # warm litellm's first-call path
        for n in (3, 5, 8):
            runs = [asyncio.run(one_run(srv, n, Path(tmp))) for _ in range(repeats)]
            wall = statistics.median(r["wall_s"] for r in runs)
            out["overhead"][n] = {
                "wall_s": round(wall, 3),
                "critical_path_s": 3 * LATENCY_S,
                "ratio": round(wall / (3 * LATENCY_S), 3),
                "calls": statistics.median(r["calls"] for r in runs),
                "prompt_tokens": statistics.median(r["prompt_tokens"] for r in runs),
            }
    with tempfile.TemporaryDirectory() as tmp:
        for rounds in (1, 2, 3):
            with ScriptedServer(disagree(rounds), latency_s=0.0) as srv:
                for n in (3, 5, 8):
                    runs = [asyncio.run(one_run(srv, n, Path(tmp), max_answers_per_agent=4))
                            for _ in range(max(1, repeats // 2))]
                    out["cost_growth"][f"{n}x{rounds}"] = {
                        "agents": n, "rounds": rounds,
                        "calls": statistics.median(r["calls"] for r in runs),
                        "prompt_tokens": statistics.median(r["prompt_tokens"] for r in runs),
                    }
    return out


def print_engine(data: dict[str, Any]) -> None:
    print("\nCoordination overhead (scenario A: all agree, scripted latency "
          f"{LATENCY_S * 1000:.0f} ms; target ratio <= 1.10)")
    print(f"{'agents':>6} {'calls':>6} {'prompt tok':>10} {'wall s':>7} {'ratio':>6}")
    for n, row in data["overhead"].items():
        print(f"{n:>6} {row['calls']:>6} {row['prompt_tokens']:>10} {row['wall_s']:>7.3f} "
              f"{row['ratio']:>6.3f}")
    print("\nCost growth with disagreement (each agent revises its answer `rounds` times)")
    print(f"{'agents':>6} {'rounds':>6} {'calls':>6} {'prompt tok':>10}")
    for row in data["cost_growth"].values():
        print(f"{row['agents']:>6} {row['rounds']:>6} {row['calls']:>6} "
              f"{row['prompt_tokens']:>10}")


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


def bench_initialize(quick: bool) -> dict[str, Any]:
    """Process start -> `initialize` response of the stdio server."""
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}}) + "\n"
    times = []
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
            proc.kill()
            proc.wait()
    return {"initialize_s": round(statistics.median(times), 3), "target_s": 1.0}


def print_initialize(data: dict[str, Any]) -> None:
    print(f"\nstdio cold start, process start -> initialize response: "
          f"{data['initialize_s']:.3f} s (target <= {data['target_s']} s)")


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


def bench_tools_list(quick: bool) -> dict[str, Any]:
    """Size of the tools/list payload a host puts in its model's context."""
    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    async def listed() -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            async with Client(create_server(home=Path(tmp)), mode="legacy") as client:
                return [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                        for t in await client.list_tools()]

    tools = asyncio.run(listed())
    chars = len(json.dumps(tools, separators=(",", ":")))
    return {"tools": len(tools), "chars": chars, "tokens_approx": chars // 4}


def print_tools_list(data: dict[str, Any]) -> None:
    print(f"\ntools/list: {data['tools']} tools, {data['chars']} characters "
          f"(~{data['tokens_approx']} tokens at 4 characters per token)")


SECTIONS = {
    "engine": (bench_engine, print_engine),
    "cold_start": (bench_cold_start, print_cold_start),
    "initialize": (bench_initialize, print_initialize),
    "status_latency": (bench_status_latency, print_status_latency),
    "tools_list": (bench_tools_list, print_tools_list),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS))
    args = parser.parse_args()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
    }
    for name in args.only or SECTIONS:
        measure, show = SECTIONS[name]
        results[name] = measure(args.quick)
        show(results[name])
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {HERE / 'results.json'}")


if __name__ == "__main__":
    main()
