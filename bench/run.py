"""Benchmarks: python bench/run.py [--quick] [--only SECTION ...]

Prints a table per section and writes bench/results.json. Everything runs against the scripted
OpenAI-compatible server on 127.0.0.1 (massgen_mcp.testing.scripted); nothing touches the network.
Scenario definitions follow ../shared/reference/measuring.md ("Scenario A": 3 agents behind a
200 ms scripted server, everyone agrees; prompt tokens = characters sent / 4, server-counted).
``--only scenario_b`` runs scenario B for us and, with MASSGEN_UPSTREAM=<path to a massgen
0.1.97 executable>, for upstream MassGen in the same run, seed by seed (bench/upstream.py).
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

from bench.faces import bench_faces, print_faces  # noqa: E402
from bench.knobs import bench_knobs, print_knobs  # noqa: E402
from bench.review import bench_review, print_review  # noqa: E402
from bench.review_parts import bench_review_parts, print_review_parts  # noqa: E402
from bench.upstream import bench_scenario_b, print_scenario_b  # noqa: E402
from massgen_mcp.core.records import RequestRecord  # noqa: E402
from massgen_mcp.core.spec import build_team  # noqa: E402
from massgen_mcp.executors.local import LocalExecutor  # noqa: E402
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm  # noqa: E402
from massgen_mcp.records.store import SessionStore  # noqa: E402
from massgen_mcp.testing import virtual_time  # noqa: E402
from massgen_mcp.testing.scripted import (  # noqa: E402
    ChatRequest,
    Latency,
    Reply,
    ScriptedProvider,
    ScriptedServer,
    agree,
    answer,
    converge,
    vote,
)

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


def bench_engine(quick: bool) -> dict[str, Any]:
    """Overhead vs the critical path (3 serial calls) and calls/tokens by team size and rounds."""
    load_litellm()
    repeats = 3 if quick else 7
    out: dict[str, Any] = {"overhead": {}, "cost_growth": {}}
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree, latency_s=LATENCY_S) as srv:
        asyncio.run(one_run(srv, 3, Path(tmp)))  # warm litellm's first-call path
        for n in (3, 5, 8):
            # Interleaved, so that both modes see the same machine.
            runs = {False: [], True: []}
            for _ in range(repeats):
                for drafts in (False, True):
                    runs[drafts].append(asyncio.run(one_run(srv, n, Path(tmp), drafts=drafts)))
            wall = statistics.median(r["wall_s"] for r in runs[False])
            live = statistics.median(r["wall_s"] for r in runs[True])
            out["overhead"][n] = {
                "wall_s": round(wall, 3),
                "critical_path_s": 3 * LATENCY_S,
                "ratio": round(wall / (3 * LATENCY_S), 3),
                "live_ratio": round(live / (3 * LATENCY_S), 3),
                "calls": statistics.median(r["calls"] for r in runs[False]),
                "prompt_tokens": statistics.median(r["prompt_tokens"] for r in runs[False]),
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
    print("  ratio: headless (CLI without a terminal, Python API, eval); live: with live "
          "drafts (servers, the CLI on a terminal), every call streamed")
    print(f"{'agents':>6} {'calls':>6} {'prompt tok':>10} {'wall s':>7} {'ratio':>6} "
          f"{'live':>6}")
    for n, row in data["overhead"].items():
        print(f"{n:>6} {row['calls']:>6} {row['prompt_tokens']:>10} {row['wall_s']:>7.3f} "
              f"{row['ratio']:>6.3f} {row.get('live_ratio', float('nan')):>6.3f}")
    print("\nCost growth with disagreement (each agent revises its answer `rounds` times)")
    print(f"{'agents':>6} {'rounds':>6} {'calls':>6} {'prompt tok':>10}")
    for row in data["cost_growth"].values():
        print(f"{row['agents']:>6} {row['rounds']:>6} {row['calls']:>6} "
              f"{row['prompt_tokens']:>10}")


# Scenario B (../shared/reference/measuring.md): real latency, one straggler.
B_MEDIAN_S, B_SIGMA, B_AGENTS, B_SLOW = 0.5, 0.5, 5, 3.0


def _b_latency(seed: int) -> Latency:
    """Scenario B's latencies for one seed: the last agent's model is the slow one."""
    return Latency(B_MEDIAN_S, B_SIGMA, seed=seed, slower={f"m{B_AGENTS - 1}": B_SLOW})


def _latency_run(policy: Callable[[ChatRequest], Reply], seed: int, home: Path,
                 **options: Any) -> dict[str, Any]:
    with ScriptedServer(policy, latency=_b_latency(seed)) as srv:
        result = asyncio.run(_run_once(srv, home, **options))
        done = [t for t in srv.timings if t.ended is not None]
        span = max(t.ended for t in done if t.ended) - min(t.started for t in srv.timings)
        return {"ratio": span / B_MEDIAN_S, "calls": len(srv.timings),
                "answered": len(done), "cancelled": result.usage.cancelled_calls,
                "prompt_tokens": srv.prompttokens(), "status": result.status}


async def _run_once(srv: ScriptedServer, home: Path, **options: Any) -> Any:
    runner = LocalExecutor(SessionStore(home), LiteLLMProvider(), drafts=False)
    run = await runner.start(RequestRecord(question="What is 6*7?"), team(srv, B_AGENTS, **options))
    return await run.task


def bench_latency(quick: bool) -> dict[str, Any]:
    """Scenario B: what a user waits under uneven latency, in units of one median call."""
    load_litellm()
    seeds = range(7 if quick else 25)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with ScriptedServer(agree) as warm:
            asyncio.run(one_run(warm, 3, Path(tmp)))  # litellm's first-call path
        for policy in (agree, converge):
            for decide in ("all", "majority"):
                runs = [_latency_run(policy, seed, Path(tmp), decide=decide) for seed in seeds]
                ratios = sorted(r["ratio"] for r in runs)
                out[f"{policy.__name__}/{decide}"] = {
                    "policy": policy.__name__, "decide": decide, "runs": len(runs),
                    "median": round(statistics.median(ratios), 2),
                    "p90": round(ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))], 2),
                    "calls": statistics.median(r["calls"] for r in runs),
                    "max_calls": max(r["calls"] for r in runs),
                    "cancelled": statistics.median(r["cancelled"] for r in runs),
                    "prompt_tokens": statistics.median(r["prompt_tokens"] for r in runs),
                    "ratios": [round(r["ratio"], 3) for r in runs],  # by seed, for pairing
                }
    return out


def print_latency(data: dict[str, Any]) -> None:
    print(f"\nScenario B: {B_AGENTS} agents, lognormal latency (median {B_MEDIAN_S * 1000:.0f} ms, "
          f"shape {B_SIGMA}), one {B_SLOW:g}x slower; wall span / one median call "
          "(upstream MassGen beside it, in the same run: --only scenario_b)")
    print(f"{'votes':>9} {'decide':>9} {'median':>7} {'p90':>6} {'calls':>6} {'max':>4} "
          f"{'cut':>4} {'prompt tok':>10} {'faster (same seeds)':>20}")
    for row in data.values():
        # The same seeds under MassGen's rule: the median of the per-seed speed-ups is far
        # steadier than the difference of two medians.
        base = data[f"{row['policy']}/all"]["ratios"]
        faster = statistics.median(a / b for a, b in zip(base, row["ratios"], strict=True))
        print(f"{row['policy']:>9} {row['decide']:>9} {row['median']:>6.2f}x {row['p90']:>5.2f}x "
              f"{row['calls']:>6} {row['max_calls']:>4} {row['cancelled']:>4} "
              f"{row['prompt_tokens']:>10} {faster:>19.2f}x")


# The rules' floor: the real engine in virtual time (massgen_mcp.testing.virtual_time), every
# model in process, so only the protocol's waits count. Late factors besides the default show
# what opening review sooner buys when a late first answer, as any new answer, clears votes.
FLOOR_RULES: tuple[dict[str, Any], ...] = (
    {"decide": "all"}, {"decide": "majority"}, {"decide": "majority", "late_factor": 2.0},
    {"decide": "majority", "late_factor": 1.5},
    # Who writes the final answer (issue 60): nobody, or the leader's author speculatively.
    {"decide": "majority", "final": "answer"}, {"decide": "majority", "final": "speculative"},
    {"decide": "all", "final": "speculative"})


async def _floor_run(policy: Callable[[ChatRequest], Reply], seed: int, home: Path,
                     **options: Any) -> dict[str, Any]:
    provider = ScriptedProvider(policy, latency=_b_latency(seed))
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}"} for i in range(B_AGENTS)]
    store = SessionStore(home)
    runner = LocalExecutor(store, provider, drafts=False)
    run = await runner.start(RequestRecord(question="What is 6*7?"), build_team({"agents": agents,
                                                          "options": options}))
    result = await run.task
    ended = [t.ended for t in provider.timings if t.ended is not None]
    span = max(ended) - min(t.started for t in provider.timings)
    speculated = [e.reason for e in store.read_events(run.session_id)
                  if e.type == "final_speculated"]
    return {"ratio": span / B_MEDIAN_S, "calls": len(provider.timings),
            "cancelled": result.usage.cancelled_calls, "status": result.status,
            "speculations": speculated.count("started"),
            "wasted": speculated.count("discarded")}


def bench_latency_floor(quick: bool) -> dict[str, Any]:
    """Scenario B in virtual time: each rule's own floor, over many seeds."""
    seeds = range(100 if quick else 500)
    out: dict[str, Any] = {"seeds": len(seeds)}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in (agree, converge):
            for rule in FLOOR_RULES:
                started = time.process_time()
                runs = [virtual_time.run(_floor_run(policy, seed, Path(tmp), **rule))
                        for seed in seeds]
                assert all(r["status"] == "completed" for r in runs)
                ratios = sorted(r["ratio"] for r in runs)
                name = "/".join([policy.__name__, *(f"{v}" for v in rule.values())])
                out[name] = {
                    "policy": policy.__name__, **rule,
                    "wasted_share": round(sum(r["wasted"] for r in runs)
                                          / max(1, sum(r["speculations"] for r in runs)), 3),
                    "median": round(statistics.median(ratios), 2),
                    "p90": round(ratios[int(0.9 * len(ratios))], 2),
                    "calls": statistics.median(r["calls"] for r in runs),
                    "max_calls": max(r["calls"] for r in runs),
                    "cancelled": statistics.median(r["cancelled"] for r in runs),
                    "cpu_ms_per_run": round(1000 * (time.process_time() - started)
                                            / len(runs), 1)}
    return out


def print_latency_floor(data: dict[str, Any]) -> None:
    print(f"\nScenario B's floor: the real engine in virtual time (no CPU, HTTP or server "
          f"cost), {data['seeds']} seeds; wall span / one median call")
    print(f"{'votes':>9} {'decide':>9} {'late':>5} {'final':>12} {'median':>7} {'p90':>6} "
          f"{'calls':>6} {'max':>4} {'cut':>4} {'wasted':>7}")
    for row in data.values():
        if isinstance(row, dict):
            print(f"{row['policy']:>9} {row['decide']:>9} {row.get('late_factor', 3.0):>5g} "
                  f"{row.get('final', 'present'):>12} {row['median']:>6.2f}x "
                  f"{row['p90']:>5.2f}x {row['calls']:>6} {row['max_calls']:>4} "
                  f"{row['cancelled']:>4} {row.get('wasted_share', 0):>6.0%}")


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


# How each host opens (../shared/reference/hosts-in-practice.md): the requests it sends at
# once, then what it sends after each reply it waits for.
_ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
             "io.modelcontextprotocol/clientCapabilities": {},
             "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2"}}
HOST_OPENINGS: dict[str, list[list[tuple[int | None, str, dict[str, Any] | None]]]] = {
    "claude": [[(1, "server/discover", {"_meta": _ENVELOPE})],
               [(2, "prompts/list", {"_meta": _ENVELOPE}),
                (3, "resources/list", {"_meta": _ENVELOPE}),
                (4, "tools/list", {"_meta": _ENVELOPE})]],
    "gemini": [[(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "gemini-cli", "version": "1"}})],
               [(None, "notifications/initialized", None), (2, "prompts/list", None)],
               [(3, "tools/list", None), (4, "resources/list", None)]],
    "codex": [[(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "codex", "version": "1"}})],
              [(None, "notifications/initialized", None), (4, "tools/list", None)]],
}
HOST_START_METHODS = {1: "first", 2: "prompts/list", 3: "resources/list", 4: "tools/list",
                      5: "tools/call", 6: "first_call"}


def _host_start_once(opening: list[list[tuple[int | None, str, dict[str, Any] | None]]],
                     home: str, env: dict[str, str], call: dict[str, Any]) -> dict[int, float]:
    """Spawn the server, open as a host does, then call a tool: seconds from spawn to each
    reply, by request id."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=home,
                            env={**os.environ, "MASSGEN_HOME": home, **env})
    assert proc.stdin is not None and proc.stdout is not None
    seen: dict[int, float] = {}
    try:
        modern = "_meta" in (opening[0][0][2] or {})
        cheap = {"name": "list_sessions", "arguments": {}}
        calls = [[(6, "tools/call", cheap)], [(5, "tools/call", call)]]
        for batch in [*opening, *([(id_, method, {**params, "_meta": _ENVELOPE} if modern
                                    else params) for id_, method, params in batch]
                                  for batch in calls)]:
            for id_, method, params in batch:
                message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
                if id_ is not None:
                    message["id"] = id_
                if params is not None:
                    message["params"] = params
                proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            waiting = {id_ for id_, _, _ in batch if id_ is not None}
            while waiting:
                reply = json.loads(proc.stdout.readline())
                if reply.get("id") in waiting:
                    assert "result" in reply, reply
                    seen[reply["id"]] = time.perf_counter() - started
                    waiting.discard(reply["id"])
    finally:
        proc.kill()
        proc.wait()
    return seen


def bench_host_start(quick: bool) -> dict[str, Any]:
    """Spawn -> each reply a host waits for, the way Claude Code, Gemini CLI and Codex open
    (median of fresh spawns), then -> the reply to a first tools/call (list_sessions, sent
    as soon as tools/list is answered: what litellm's warm-up in the background may delay),
    then -> run_consensus with wait_s=50 on scenario A's scripted team.
    With early replies (as shipped) and without (MASSGEN_EARLY_INITIALIZE=0: the SDK alone).
    MASSGEN_BENCH_SOURCE=<dir> measures another checkout's massgen_mcp (e.g. a release; the
    server runs in a temporary folder, so that PYTHONPATH, not this checkout, supplies it)."""
    repeats = 3 if quick else 5
    source = os.environ.get("MASSGEN_BENCH_SOURCE")
    base_env = {"PYTHONPATH": source} if source else {}
    subprocess.run([sys.executable, "-m", "compileall", "-q", source or str(HERE.parent)],
                   check=False, capture_output=True)  # bytecode compiled, as after a first run
    out: dict[str, Any] = {"targets_s": {"first": 0.15, "lists": 0.30}}
    with ScriptedServer(agree, latency_s=LATENCY_S) as srv:
        call = {"name": "run_consensus", "arguments": {
            "question": "What is 6*7?", "wait_s": 50,
            "models": [f"openai/{m}@{srv.base_url}" for m in "abc"]}}
        for mode, env in (("early", {}), ("sdk_alone", {"MASSGEN_EARLY_INITIALIZE": "0"})):
            for host, opening in HOST_OPENINGS.items():
                runs = []
                for _ in range(repeats):
                    with tempfile.TemporaryDirectory() as home:
                        runs.append(_host_start_once(opening, home, {**base_env, **env}, call))
                out[f"{host}_{mode}"] = {
                    HOST_START_METHODS[id_]: round(statistics.median(r[id_] for r in runs), 3)
                    for id_ in sorted(runs[0])}
    return out


def print_host_start(data: dict[str, Any]) -> None:
    print("\nHost start, spawn -> reply (s, median of fresh spawns; targets: first reply "
          f"{data['targets_s']['first']}, lists {data['targets_s']['lists']})")
    print(f"{'host':>8} {'mode':>10} {'first':>7} {'prompts':>8} {'resources':>9} "
          f"{'tools':>7} {'1st call':>8} {'run':>7}")
    for key, row in data.items():
        if key == "targets_s":
            continue
        host, mode = key.split("_", 1)
        cells = [row.get(m) for m in ("first", "prompts/list", "resources/list", "tools/list",
                                      "first_call", "tools/call")]
        print(f"{host:>8} {mode:>10} " + " ".join(
            f"{c:>7.3f}" if c is not None else f"{'-':>7}" for c in cells))


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
    # Claude Code and Codex turn each MCP tool into a function definition for their model:
    # name, description and input schema; the rest (annotations, _meta) stays in the host.
    in_context = len(json.dumps([{k: t[k] for k in ("name", "description", "inputSchema")}
                                 for t in tools], separators=(",", ":")))
    return {"tools": len(tools), "chars": chars, "tokens_approx": chars // 4,
            "model_context_chars": in_context, "target_chars": 13_000}  # the suite's budget


def print_tools_list(data: dict[str, Any]) -> None:
    print(f"\ntools/list: {data['tools']} tools, {data['chars']} characters "
          f"(~{data['tokens_approx']} tokens at 4 characters per token; target <= "
          f"{data['target_chars']}); name + description + input schema, what Claude Code and "
          f"Codex give their model: {data['model_context_chars']} characters")


def _worker_load() -> dict[str, Any]:
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
    out = subprocess.run([sys.executable, __file__, "--worker", "load"], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_load(data: dict[str, Any]) -> None:
    print(f"\n{data['runs']} concurrent runs x {data['agents_per_run']} agents: all done in "
          f"{data['total_s']} s; peak RSS {data['peak_rss_mib']} MiB "
          f"(after imports {data['rss_before_mib']} MiB); get_status over {data['status_reads']} "
          f"reads: p50 {data['status_p50_ms']} ms, p95 {data['status_p95_ms']} ms")


def _rss_mib() -> float:
    """Resident memory now (not the peak), from /proc."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _worker_memory(sessions: int) -> dict[str, Any]:
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
    out = subprocess.run([sys.executable, __file__, "--worker", "memory",
                          "--sessions", "500" if quick else "2000"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_memory(data: dict[str, Any]) -> None:
    n = data["sessions"]
    print(f"\n{n} sessions back to back in one server: RSS {data['rss_after_100_mib']} MiB "
          f"after 100, {data[f'rss_after_{n}_mib']} MiB after {n} ({data['growth_pct']:+} %, "
          f"target within {data['target_growth_pct']} %); {data['total_s']} s")


def _site_packages_mib(venv: Path) -> float:
    site = next(venv.glob("lib/python*/site-packages"))
    total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    return round(total / 2**20, 1)


def bench_install_size(quick: bool) -> dict[str, Any]:
    """Installed size of massgen-mcp with its dependencies in a fresh virtualenv."""
    root = HERE.parent
    out: dict[str, Any] = {"target_mib": 450}
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
               "-c", str(root / ".ci" / "constraints.txt")]
        base = _site_packages_mib(venv)
        subprocess.run([*pip, str(root)], check=True, capture_output=True)
        out["installed_mib"] = round(_site_packages_mib(venv) - base, 1)
        subprocess.run([*pip, f"{root}[local]"], check=True, capture_output=True)
        out["with_local_mib"] = round(_site_packages_mib(venv) - base, 1)
    return out


def print_install_size(data: dict[str, Any]) -> None:
    print(f"\ninstalled size: {data['installed_mib']} MiB (target <= {data['target_mib']}); "
          f"with [local]: {data['with_local_mib']} MiB")


def bench_embedded(quick: bool) -> dict[str, Any]:
    """Tokens per second of the embedded model and a whole 3-agent offline run."""
    from massgen_mcp.core.spec import build_team
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


# The key shapes redaction masked before trust round 3: the baseline for the one alternation.
_OLD_KEY_SHAPES = r"\b(sk|pk|rk|gsk|xai|AIza)[-_][A-Za-z0-9_\-]{12,}"


def bench_redaction(quick: bool) -> dict[str, Any]:
    """CPU per call of redact() on the hot path's texts: a 4 KB answer and a 400-character
    draft excerpt (every draft tick and status write goes through it), with today's shapes
    and with the provider-only shapes of before, on the same text."""
    import re

    from massgen_mcp.core import secrets

    answer = ("The service reads its settings from config/app.yaml and retries with backoff; "
              "see https://example.com/docs?q=retry for details. ") * 32
    excerpt = answer[:400]
    reps = 2_000 if quick else 20_000
    out: dict[str, Any] = {}
    current = secrets._KEY_SHAPES
    for label, pattern in (("before", re.compile(_OLD_KEY_SHAPES)), ("now", current)):
        secrets._KEY_SHAPES = pattern
        try:
            clean = secrets.redactor()
            for name, text in (("answer_4k", answer), ("excerpt_400", excerpt)):
                start = time.process_time()
                for _ in range(reps):
                    clean(text)
                out[f"{label}_{name}_us"] = round((time.process_time() - start) / reps * 1e6, 2)
        finally:
            secrets._KEY_SHAPES = current
    return out


def print_redaction(data: dict[str, Any]) -> None:
    print("redact() CPU per call (us)      before    now")
    for name in ("answer_4k", "excerpt_400"):
        print(f"  {name:<28} {data[f'before_{name}_us']:>8} {data[f'now_{name}_us']:>6}")


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
        print(json.dumps(_worker_load()))
        return
    if args.worker == "memory":
        print(json.dumps(_worker_memory(args.sessions)))
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
