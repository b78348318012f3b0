"""Scenario A on every face (``python bench/run.py --only faces``): the CLI, the stdio MCP
server, the HTTP MCP server and the Python API, each as its users meet it, in a process of
its own.

The figure is the one the engine section reports for the engine alone: the span of the
model calls ÷ the critical path (3 serial calls of 200 ms: an answer, a vote, the final
answer = 0.6 s). The span runs from the first model request the scripted server receives to
the end of its last reply, by the server's own clock (:attr:`ScriptedServer.timings`), so
process start-up, imports and the MCP handshake are not counted: only what the run puts
between its calls.

Each sample is a fresh process (a host spawns its server, a script imports the package, the
CLI runs once), whose first run pays every first-use cost; the servers and the API then run
scenario A a second time in the same process ("warm"). ``MASSGEN_BENCH_SOURCE=<dir>``
measures another checkout's ``massgen_mcp`` (the commit before a change). Runs tell their
calls apart by model names of their own (``openai/a1``, ``openai/b1``, ...; the scripted
policy ignores names).
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from massgen_mcp.testing.scripted import ScriptedServer, Timing, agree

LATENCY_S = 0.2
CRITICAL_S = 3 * LATENCY_S
QUESTION = "What is 6*7?"
TOKEN = "bench-token-0123456789abcdef"


def _models(run: int) -> list[str]:
    return [f"openai/{m}{run}" for m in "abc"]


def _ratio(server: ScriptedServer, run: int) -> float:
    """Span ÷ critical path of run ``run``'s calls (those to its own model names)."""
    names = {m.split("/", 1)[1] for m in _models(run)}
    calls: list[Timing] = [t for t in list(server.timings) if t.request.model in names]
    ended = [t.ended for t in calls if t.ended is not None]
    assert len(calls) == 7 and len(ended) == 7, [(t.request.model, t.ended) for t in calls]
    return (max(ended) - min(t.started for t in calls)) / CRITICAL_S


def _env(home: str, **extra: str) -> dict[str, str]:
    """The processes' environment: no API key; MASSGEN_BENCH_SOURCE=<dir> runs another
    checkout's massgen_mcp (e.g. the commit before a change) in every face; else this one's
    (each process runs in its record folder, so neither the working folder nor an installed
    copy decides which)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    source = os.environ.get("MASSGEN_BENCH_SOURCE") or str(Path(__file__).resolve().parents[1])
    return {**env, "MASSGEN_HOME": home, "PYTHONPATH": source, **extra}


def _cli(server: ScriptedServer, home: str, runs: int) -> None:
    for run in range(1, runs + 1):  # one run a process, as at a terminal
        subprocess.run(
            [sys.executable, "-m", "massgen_mcp", "run", QUESTION, "--quiet", "--models",
             ",".join(_models(run)), "--base-url", server.base_url],
            check=True, capture_output=True, env=_env(home), cwd=home, timeout=120)


def _api(server: ScriptedServer, home: str, runs: int) -> None:
    script = textwrap.dedent(f"""
        from massgen_mcp import run
        for n in range(1, {runs} + 1):
            result = run({QUESTION!r}, models=[f"openai/{{m}}{{n}}" for m in "abc"],
                         base_url={server.base_url!r}, home={home!r})
            assert result.status == "completed", result.errors
    """)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                   env=_env(home), cwd=home, timeout=120)


async def _call_runs(client: Any, server: ScriptedServer, runs: int) -> None:
    for run in range(1, runs + 1):
        reply = await client.call_tool("run_consensus", {
            "question": QUESTION, "wait_s": 50,
            "models": [f"{m}@{server.base_url}" for m in _models(run)]})
        assert reply.structured_content["status"] == "completed", reply.structured_content


def _stdio(server: ScriptedServer, home: str, runs: int) -> None:
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    async def go() -> None:
        with open(os.devnull, "w") as quiet:  # the server's log lines
            transport = StdioTransport(sys.executable, ["-m", "massgen_mcp"], env=_env(home),
                                       cwd=home, log_file=quiet)
            async with Client(transport, timeout=120) as client:
                await _call_runs(client, server, runs)

    asyncio.run(go())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _http(server: ScriptedServer, home: str, runs: int) -> None:
    from fastmcp import Client

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
        env=_env(home, MASSGEN_MCP_TOKEN=TOKEN), cwd=home, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # until the port takes connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no HTTP server"
                time.sleep(0.05)

        async def go() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", auth=TOKEN,
                              timeout=120) as client:
                await _call_runs(client, server, runs)

        asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(30)


# face -> (runs in one process, how to run them)
FACES: dict[str, tuple[int, Callable[[ScriptedServer, str, int], None]]] = {
    "cli": (1, _cli),
    "stdio": (2, _stdio),
    "http": (2, _http),
    "python": (2, _api),
}


def bench_faces(quick: bool) -> dict[str, Any]:
    processes = 3 if quick else 7
    samples: dict[str, dict[str, list[float]]] = {f: {"first": [], "warm": []} for f in FACES}
    with ScriptedServer(agree, latency_s=LATENCY_S) as server:
        # Interleaved, face after face, so that every face sees the same machine.
        for _ in range(processes):
            for face, (runs, go) in FACES.items():
                server.timings.clear()
                with tempfile.TemporaryDirectory() as home:
                    go(server, str(Path(home).resolve()), runs)
                samples[face]["first"].append(_ratio(server, 1))
                samples[face]["warm"] += [_ratio(server, r) for r in range(2, runs + 1)]
    out: dict[str, Any] = {"processes": processes, "critical_path_s": round(CRITICAL_S, 3),
                           "target": 1.05}
    for face, got in samples.items():
        out[face] = {kind: {"median": round(statistics.median(values), 3),
                            "min": round(min(values), 3), "max": round(max(values), 3)}
                     for kind, values in got.items() if values}
    return out


def print_faces(data: dict[str, Any]) -> None:
    print(f"\nScenario A per face: span of the model calls / critical path "
          f"({data['critical_path_s']:g} s), by the scripted server's clock; median (range) "
          f"of {data['processes']} fresh processes; target <= {data['target']}")
    print(f"{'face':>7} {'first run':>22} {'warm run':>22}")
    for face in FACES:
        row = data[face]
        cells = [f"{c['median']:.3f} ({c['min']:.3f}-{c['max']:.3f})" if (c := row.get(k))
                 else "-" for k in ("first", "warm")]
        print(f"{face:>7} {cells[0]:>22} {cells[1]:>22}")
