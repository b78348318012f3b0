"""The protocol's knobs (``python bench/run.py --only knobs``): what ``depth: auto`` saves
when members agree, what ``require`` costs in waiting for the slow member, and how much the
agreement and dissent add to every result.

* Scenario A, agreeing members (every member votes for the same answer), 200 ms a call, real
  HTTP: calls and server-counted prompt tokens (characters / 4), ``depth: full`` against
  ``depth: auto``, for 3 and 5 agents.
* Scenario B in virtual time (the real engine, models in process: only the protocol's waits
  count), 5 agents with the last one 3× slower: the median span in median calls over the
  seeds, for today's default, ``require`` on the slow member, and ``decide: all``.
* The result's added size: the bytes of ``agreement`` in a scenario A result with a dissent.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing import virtual_time
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Latency,
    Reply,
    ScriptedProvider,
    ScriptedServer,
    converge,
    vote,
)

LATENCY_S = 0.2
B_MEDIAN_S, B_SIGMA, B_AGENTS, B_SLOW = 0.5, 0.5, 5, 3.0


def _team(server: ScriptedServer, n: int, **options: Any) -> Any:
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}", "base_url": server.base_url}
              for i in range(n)]
    return build_team({"agents": agents, "options": options})


async def _http_run(server: ScriptedServer, n: int, home: Path, **options: Any
                    ) -> dict[str, Any]:
    runner = LocalExecutor(SessionStore(home), LiteLLMProvider(), drafts=False)
    before = len(server.requests)
    run = await runner.start(RequestRecord(question="What is 6*7?"), _team(server, n, **options))
    result = await run.task
    requests = server.requests[before:]
    return {"calls": len(requests),
            "prompt_tokens": sum(max(1, r.prompt_chars() // 4) for r in requests),
            "result": result}


async def _floor_run(seed: int, home: Path, **options: Any) -> float:
    latency = Latency(B_MEDIAN_S, B_SIGMA, seed=seed,
                      slower={f"m{B_AGENTS - 1}": B_SLOW})
    provider = ScriptedProvider(converge, latency=latency)
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}"} for i in range(B_AGENTS)]
    runner = LocalExecutor(SessionStore(home), provider, drafts=False)
    run = await runner.start(RequestRecord(question="What is 6*7?"), build_team({"agents": agents,
                                                          "options": options}))
    result = await run.task
    assert result.status == "completed", result.errors
    ended = [t.ended for t in provider.timings if t.ended is not None]
    return (max(ended) - min(t.started for t in provider.timings)) / B_MEDIAN_S


def _one_dissents(req: ChatRequest) -> Reply:
    """Scenario A with one dissenter: m2 votes for its own answer, with a reason."""
    if req.vote_labels and req.model == "m2":
        return vote(list(req.answers)[-1], "mine handles the edge case the others miss")
    return converge(req)


def bench_knobs(quick: bool) -> dict[str, Any]:
    load_litellm()
    out: dict[str, Any] = {"depth": {}, "require": {}}
    repeats = 1 if quick else 3
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(
            converge, latency_s=LATENCY_S) as server:
        home = Path(tmp)
        asyncio.run(_http_run(server, 3, home))  # litellm's first-call path
        for n in (3, 5):
            row: dict[str, Any] = {}
            for depth in ("full", "auto"):
                runs = [asyncio.run(_http_run(server, n, home, depth=depth))
                        for _ in range(repeats)]
                row[depth] = {"calls": statistics.median(r["calls"] for r in runs),
                              "prompt_tokens": statistics.median(r["prompt_tokens"]
                                                                 for r in runs)}
            row["token_share"] = round(row["auto"]["prompt_tokens"]
                                       / row["full"]["prompt_tokens"], 3)
            out["depth"][n] = row
    seeds = range(100 if quick else 500)
    with tempfile.TemporaryDirectory() as tmp:
        for name, options in (("default (majority)", {}),
                              ("require the slow member", {"require": [f"agent{B_AGENTS - 1}"]}),
                              ("decide: all", {"decide": "all"})):
            ratios = [virtual_time.run(_floor_run(seed, Path(tmp), **options))
                      for seed in seeds]
            out["require"][name] = {"median": round(statistics.median(ratios), 2),
                                    "p90": round(sorted(ratios)[int(0.9 * len(ratios))], 2)}
        out["seeds"] = len(seeds)
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(_one_dissents) as server:
        run = asyncio.run(_http_run(server, 3, Path(tmp), decide="all"))
        data = run["result"].model_dump(mode="json")
        whole = len(json.dumps(data))
        added = len(json.dumps(data["agreement"]))
        out["result_size"] = {"result_bytes": whole, "agreement_bytes": added,
                              "share": round(added / whole, 3)}
    return out


def print_knobs(data: dict[str, Any]) -> None:
    print(f"\nScenario A, agreeing members, {LATENCY_S * 1000:.0f} ms a call: depth full vs "
          "auto (target: auto <= 45 % of the tokens)")
    print(f"{'agents':>6} {'full calls':>10} {'full tok':>9} {'auto calls':>10} "
          f"{'auto tok':>9} {'share':>6}")
    for n, row in data["depth"].items():
        print(f"{n:>6} {row['full']['calls']:>10} {row['full']['prompt_tokens']:>9} "
              f"{row['auto']['calls']:>10} {row['auto']['prompt_tokens']:>9} "
              f"{row['token_share']:>5.0%}")
    print(f"\nScenario B's floor, {data['seeds']} seeds (virtual time): span / one median call")
    for name, row in data["require"].items():
        print(f"  {name:<26} median {row['median']:>5.2f}x  p90 {row['p90']:>5.2f}x")
    size = data["result_size"]
    print(f"\nagreement and dissent in a result: {size['agreement_bytes']} of "
          f"{size['result_bytes']} bytes ({size['share']:.1%})")
