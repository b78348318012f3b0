"""Scenario B (``python bench/run.py --only latency``): what a user waits under uneven
latency, in units of one median call, over real HTTP, by votes and by ``decide``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scenarios import B_AGENTS, B_MEDIAN_S, B_SIGMA, B_SLOW, b_latency, one_run, team
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, converge


def _latency_run(policy: Callable[[ChatRequest], Reply], seed: int, home: Path,
                 **options: Any) -> dict[str, Any]:
    with ScriptedServer(policy, latency=b_latency(seed)) as srv:
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
