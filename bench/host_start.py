"""How fast a host sees the server (``python bench/run.py --only host_start``): spawn to each
reply a host waits for, the way Claude Code, Gemini CLI and Codex open, then a first tool
call and a run.
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

from bench.scenarios import HERE, LATENCY_S
from massgen_mcp.testing.scripted import ScriptedServer, agree

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
