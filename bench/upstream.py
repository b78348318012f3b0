"""Scenario B beside upstream MassGen, in the same run (``python bench/run.py --only scenario_b``).

Both systems meet the same scripted OpenAI-compatible server (a fresh one per run, the same
seeded latencies: lognormal, median 500 ms, shape 0.5, the fifth model 3× slower), seed by
seed, alternating the systems run by run, so that a busy machine slows both alike. The figure
is the server's own: the span from the first request's start to the last response ÷ one median
call, with the calls and the prompt tokens (characters sent / 4) it counted
(../shared/reference/measuring.md, "Scenario B").

Upstream MassGen is found through ``MASSGEN_UPSTREAM`` (its ``massgen`` executable, installed
outside this repository, e.g. ``python3 -m venv /work/massgen-venv &&
/work/massgen-venv/bin/pip install massgen==0.1.97 'mcp<2'``); without it only our side is
measured and the result says upstream was skipped. Each upstream run is a fresh
``massgen --automation --config X`` process with chatcompletion backends at the scripted
server, in a temporary directory that is also its home, with no key of anyone's (a dummy
one), every proxy pointed at a closed local port (loopback excepted, so nothing reaches the
network), Logfire off and litellm's price table read from disk.

The scripted models follow scenario A's policy, the same for both systems: with a vote tool
offered and answers shown, vote; otherwise answer; the final presentation writes the final
answer. MassGen's requests are read in its own format (``<agent2.1> ... <end of agent2.1>``
in the user message, a ``vote`` tool with ``agent_id``, a ``new_answer`` tool with
``content``). Which answer a vote goes to comes in the two forms our latency section uses:
``agree``, the first answer the voter is shown (both systems rotate their views, so voters
differ), and ``converge``, everyone the same answer (ours: the first label in sorted order;
MassGen's: the lowest anonymous id among the answers shown).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Latency,
    Reply,
    ScriptedServer,
    agree,
    converge,
    text,
    tool_calls,
)

UPSTREAM_ENV = "MASSGEN_UPSTREAM"
B_MEDIAN_S, B_SIGMA, B_AGENTS, B_SLOW = 0.5, 0.5, 5, 3.0
QUESTION = "What is 6*7?"
ASKED = RequestRecord(question=QUESTION)
UPSTREAM_TIMEOUT_S = 300.0  # a run that takes longer is recorded as a timeout, not waited on
# MassGen's answers in its user message: "<agent2.1> text <end of agent2.1>"
_SHOWN = re.compile(r"<(agent\d+)\.\d+>")


def latency(seed: int) -> Latency:
    """Scenario B's latencies for one seed: the last agent's model is the slow one."""
    return Latency(B_MEDIAN_S, B_SIGMA, seed=seed, slower={f"m{B_AGENTS - 1}": B_SLOW})


def massgen_policy(votes: str) -> Callable[[ChatRequest], Reply]:
    """Scenario A's policy for MassGen's requests. ``votes``: ``agree`` votes for the first
    answer shown, ``converge`` for the lowest anonymous id shown (the same for every voter)."""
    def policy(req: ChatRequest) -> Reply:
        names = req.tool_names
        shown = list(dict.fromkeys(_SHOWN.findall(req.user)))
        if "vote" in names:
            valid = [v for v in _vote_ids(req) if v in shown]
            if valid:
                choice = (valid[0] if votes == "converge"
                          else next(s for s in shown if s in valid))
                return tool_calls(("vote", json.dumps({"agent_id": choice,
                                                       "reason": "it answers the question"})))
        if "new_answer" in names:
            content = f"The answer from {req.model} is 42."
            if "vote" not in names:  # the final presentation offers new_answer alone
                content = "Final: " + content
            return tool_calls(("new_answer", json.dumps({"content": content})))
        return text(f"The answer from {req.model} is 42.")
    policy.__name__ = f"massgen_{votes}"
    return policy


def _vote_ids(req: ChatRequest) -> list[str]:
    """The ids MassGen's vote tool allows, sorted as MassGen sorts them."""
    for tool in req.tools:
        if tool["function"]["name"] == "vote":
            params = tool["function"]["parameters"]["properties"]
            return sorted(params["agent_id"].get("enum", []),
                          key=lambda v: int(v.removeprefix("agent") or 0))
    return []


def _measure(srv: ScriptedServer) -> dict[str, Any]:
    done = [t.ended for t in srv.timings if t.ended is not None]
    if not done:
        return {"ratio": None, "span_s": None, "calls": len(srv.timings), "prompt_tokens": 0}
    span = max(done) - min(t.started for t in srv.timings)
    return {"ratio": span / B_MEDIAN_S, "span_s": round(span, 3), "calls": len(srv.timings),
            "prompt_tokens": srv.prompttokens()}


def ours(votes: str, seed: int | None, home: Path) -> dict[str, Any]:
    """One run of ours, in process over HTTP, at default settings, through the router real
    runs use (``seed`` None: no latency)."""
    policy = converge if votes == "converge" else agree
    with ScriptedServer(policy, latency=None if seed is None else latency(seed)) as srv:
        async def go() -> Any:
            agents = [{"id": f"agent{i}", "model": f"openai/m{i}", "base_url": srv.base_url}
                      for i in range(B_AGENTS)]
            runner = LocalExecutor(SessionStore(home), ProviderRouter(), drafts=False)
            run = await runner.start(ASKED, build_team({"agents": agents}))
            return await run.task
        result = asyncio.run(go())
        return {**_measure(srv), "status": str(result.status.value)}


def upstream_config(base_url: str) -> str:
    """MassGen's config (JSON, which its YAML loader reads): one chatcompletion agent per
    scripted model, its defaults otherwise. No api_key here: 0.1.97 passes a configured key
    to the backend twice (a TypeError), so the dummy key comes from the environment."""
    agents = [{"id": f"agent_{i}", "backend": {"type": "chatcompletion", "model": f"m{i}",
                                              "base_url": base_url}}
              for i in range(B_AGENTS)]
    return json.dumps({"agents": agents, "ui": {"logging_enabled": True}}, indent=1)


def upstream_env(home: Path) -> dict[str, str]:
    """An environment that cannot reach the network nor see a real key: built from nothing
    but PATH, every proxy at a closed local port (loopback excepted), a dummy key."""
    dead = "http://127.0.0.1:9"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "LANG": "C.UTF-8", "OPENAI_API_KEY": "scripted-not-a-key",
           "MASSGEN_LOGFIRE_ENABLED": "false", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = dead
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def upstream(massgen: str, votes: str, seed: int | None) -> dict[str, Any]:
    """One upstream run: a fresh ``massgen --automation`` process, killed with its whole
    process group if it outlives the timeout (``seed`` None: no latency). ``cpu_s``: the
    process's CPU, its imports (~9 s of it on a quiet machine) included."""
    with tempfile.TemporaryDirectory() as tmp, \
            ScriptedServer(massgen_policy(votes),
                           latency=None if seed is None else latency(seed)) as srv:
        config = Path(tmp) / "scenario_b.yaml"
        config.write_text(upstream_config(srv.base_url))
        started, cpu = time.perf_counter(), _children_cpu()
        proc = subprocess.Popen(
            [massgen, "--automation", "--no-session-registry", "--config", str(config),
             QUESTION], cwd=tmp, env=upstream_env(Path(tmp)), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=UPSTREAM_TIMEOUT_S)
            status = "completed" if proc.returncode == 0 and "WINNER:" in out else (
                f"exit {proc.returncode}")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            status = "timeout"
        wall = time.perf_counter() - started
        return {**_measure(srv), "status": status, "process_s": round(wall, 2),
                "cpu_s": round(_children_cpu() - cpu, 2)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    return {
        "runs": len(runs), "completed": sum(r["status"] == "completed" for r in runs),
        "median": round(statistics.median(ratios), 2) if ratios else None,
        "min": round(min(ratios), 2) if ratios else None,
        "max": round(max(ratios), 2) if ratios else None,
        "calls": statistics.median(r["calls"] for r in runs),
        "calls_range": [min(r["calls"] for r in runs), max(r["calls"] for r in runs)],
        "prompt_tokens": statistics.median(r["prompt_tokens"] for r in runs),
        "tokens_range": [min(r["prompt_tokens"] for r in runs),
                         max(r["prompt_tokens"] for r in runs)],
        "ratios": [None if r["ratio"] is None else round(r["ratio"], 3) for r in runs],
        "span_s": statistics.median(r["span_s"] for r in runs if r["span_s"] is not None),
        **({"process_s": statistics.median(r["process_s"] for r in runs),
            "cpu_s": statistics.median(r["cpu_s"] for r in runs)}
           if "process_s" in runs[0] else {}),
    }


def bench_scenario_b(quick: bool) -> dict[str, Any]:
    """Scenario B, ours and upstream MassGen's, alternating run by run on the same seeds."""
    load_litellm()
    seeds = list(range(int(os.environ.get("MASSGEN_BENCH_B_SEEDS", 7 if quick else 15))))
    massgen = os.environ.get(UPSTREAM_ENV, "")
    if massgen and not Path(massgen).is_file():
        raise SystemExit(f"{UPSTREAM_ENV}={massgen}: no such file")
    systems = ["ours"] + (["upstream"] if massgen else [])
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with ScriptedServer(agree) as warm:  # litellm's first-call path, off the figures
            asyncio.run(_warm(warm, Path(tmp)))
        for seed in seeds:
            for votes in ("agree", "converge"):
                for system in systems:
                    run = (ours(votes, seed, Path(tmp)) if system == "ours"
                           else upstream(massgen, votes, seed))
                    runs.setdefault(f"{system}/{votes}", []).append(run)
                    print(f"  seed {seed} {system}/{votes}: "
                          + (f"{run['ratio']:.2f}x" if run["ratio"] else "no response")
                          + f", {run['calls']} calls, {run['prompt_tokens']} tokens, "
                          f"{run['status']}", flush=True)
        # The same with no latency at all: each system's own time between the calls (its
        # CPU and bookkeeping on this machine), to read the spans above against.
        for _ in range(3):
            for system in systems:
                run = (ours("converge", None, Path(tmp)) if system == "ours"
                       else upstream(massgen, "converge", None))
                runs.setdefault(f"{system}/no latency", []).append(run)
    out: dict[str, Any] = {"seeds": seeds, **{k: _summary(v) for k, v in runs.items()}}
    if not massgen:
        out["upstream"] = (f"skipped: set {UPSTREAM_ENV} to upstream MassGen's massgen "
                           "executable (e.g. python3 -m venv /work/massgen-venv && "
                           "/work/massgen-venv/bin/pip install massgen==0.1.97 'mcp<2')")
    return out


async def _warm(srv: ScriptedServer, home: Path) -> None:
    agents = [{"id": f"agent{i}", "model": f"openai/m{i}", "base_url": srv.base_url}
              for i in range(3)]
    runner = LocalExecutor(SessionStore(home), ProviderRouter(), drafts=False)
    await (await runner.start(ASKED, build_team({"agents": agents}))).task


def print_scenario_b(data: dict[str, Any]) -> None:
    print(f"\nScenario B beside upstream MassGen, same run: {B_AGENTS} agents, lognormal "
          f"latency (median {B_MEDIAN_S * 1000:.0f} ms, shape {B_SIGMA}), one {B_SLOW:g}x "
          f"slower; seeds {data['seeds'][0]}-{data['seeds'][-1]}, alternating; "
          "span / one median call; vs ours: the median over seeds of the two spans' ratio")
    print(f"{'system':>9} {'votes':>9} {'median':>7} {'range':>13} {'calls':>6} "
          f"{'prompt tok':>10} {'done':>5} {'vs ours':>8}")
    for key, row in data.items():
        if isinstance(row, dict) and "median" in row and not key.endswith("no latency"):
            system, votes = key.split("/")
            span = (f"{row['min']:.2f}-{row['max']:.2f}" if row["median"] is not None
                    else "-")
            median = f"{row['median']:.2f}x" if row["median"] is not None else "-"
            ours_row = data.get(f"ours/{votes}", {})
            pairs = [a / b for a, b in zip(row["ratios"], ours_row.get("ratios", []), strict=True)
                     if a and b] if system != "ours" else []
            paired = f"{statistics.median(pairs):.2f}x" if pairs else ""
            print(f"{system:>9} {votes:>9} {median:>7} {span:>13} {row['calls']:>6} "
                  f"{row['prompt_tokens']:>10} {row['completed']:>2}/{row['runs']} {paired:>8}")
    idle = {k.split("/")[0]: v for k, v in data.items() if k.endswith("/no latency")}
    if idle:
        print("  no latency (each system's own time between calls; converge votes): "
              + "; ".join(f"{k} {v['span_s']:.2f} s, {v['calls']} calls" for k, v in idle.items())
              + (f"; upstream's process {idle['upstream']['process_s']:.1f} s wall, "
                 f"{idle['upstream']['cpu_s']:.1f} s CPU" if "upstream" in idle else ""))
    if "upstream" in data:
        print(f"  upstream MassGen {data['upstream']}")
