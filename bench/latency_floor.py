"""Scenario B's floor (``python bench/run.py --only latency_floor``): the real engine in virtual
time (:mod:`massgen_mcp.testing.virtual_time`), every model in process, so only the
protocol's waits count; each rule's floor over many seeds.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scenarios import B_AGENTS, B_MEDIAN_S, b_latency
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing import virtual_time
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedProvider, agree, converge

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
    provider = ScriptedProvider(policy, latency=b_latency(seed))
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}"} for i in range(B_AGENTS)]
    store = SessionStore(home)
    runner = LocalExecutor(store, provider, drafts=False)
    team = build_team({"agents": agents, "options": options})
    run = await runner.start(RequestRecord(question="What is 6*7?"), team)
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
