"""Coordination overhead and cost growth (``python bench/run.py --only engine``): scenario A's
wall time against its critical path of 3 serial calls, headless and with live drafts, and
calls and prompt tokens by team size and by rounds of disagreement.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scenarios import LATENCY_S, one_run
from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, answer


def disagree(rounds: int) -> Callable[[ChatRequest], Reply]:
    """Every agent revises its answer ``rounds`` times before it agrees."""
    def policy(req: ChatRequest) -> Reply:
        own = list(req.answers.values())[-1] if req.answers else ""
        revision = own.count("(revised)")
        if req.vote_labels and "new_answer" in req.tool_names and revision < rounds:
            return answer(own + " (revised)")
        return agree(req)
    return policy


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
