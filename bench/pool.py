"""Worker-pool figures: python bench/pool.py [--sessions 100]

Starts redis-server (Debian's, a free port, no persistence), front ends and 1 or 2
``massgen-mcp worker`` processes, with the scripted model server in this process, and prints:

* sessions per second through the pool with 1 and with 2 workers, the scripted server
  answering at once (0 ms: CPU-bound) and after 200 ms (I/O-bound): ``--sessions`` runs of
  3 agents (7 calls each) started together through one front end, timed until the last one's
  record has its result (each then checked done through the front end);
* where the CPU went in each timed window, per session: workers, the front end, Redis, and
  this process (the scripted models and the MCP clients). Everything shares this machine's
  cores, so when the sum reaches them a second worker cannot add throughput;
* ``get_status`` latency (p50/p95) across two front ends while 200 sessions are in flight.

The embedded mode's figures are bench/run.py's (the pool code is not imported there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from fastmcp import Client

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from massgen_mcp.testing.scripted import ScriptedServer, agree  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Deployment:
    def __init__(self, folder: Path, workers: int, front_ends: int = 1) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        subprocess.run(["redis-server", "--port", str(self.port), "--save", "",
                        "--appendonly", "no", "--daemonize", "yes", "--dir", str(folder),
                        "--pidfile", str(folder / "redis.pid")], check=True,
                       capture_output=True)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        self.home = folder / "home"
        # One scripted endpoint stands in for many providers: lift the per-provider cap on
        # calls in flight (16 per process), which would otherwise be what is measured.
        env.update(MASSGEN_HOME=str(self.home), MASSGEN_REDIS_URL=self.url,
                   MASSGEN_MAX_PARALLEL_PER_PROVIDER="256")
        self.workers = [subprocess.Popen(
            [sys.executable, "-m", "massgen_mcp", "worker"],
            env=env, stderr=subprocess.DEVNULL) for _ in range(workers)]
        self.procs = list(self.workers)
        self.fronts = []
        for _ in range(front_ends):
            port = free_port()
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
                env=env, stderr=subprocess.DEVNULL))
            self.fronts.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while self._workers() != workers:
            assert time.monotonic() < deadline, "the pool did not start"
            time.sleep(0.1)

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each part of the deployment."""
        redis_pid = int((self.folder / "redis.pid").read_text())
        fronts = [p for p in self.procs if p not in self.workers]
        return {"workers": sum(cpu_s(p.pid) for p in self.workers),
                "front end": sum(cpu_s(p.pid) for p in fronts),
                "redis": cpu_s(redis_pid), "models+clients": cpu_s(os.getpid())}

    def _workers(self) -> int | None:
        try:
            return int(httpx.get(f"{self.fronts[0]}/healthz", timeout=2).json()["workers"])
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait()
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                       capture_output=True)


async def start_all(front: str, server: ScriptedServer, n: int) -> list[str]:
    models = [f"openai/{m}@{server.base_url}" for m in "abc"]
    async with Client(f"{front}/mcp") as client:
        started = await asyncio.gather(*(client.call_tool(
            "run_consensus", {"question": f"q{i}", "models": models}) for i in range(n)))
    return [str(r.structured_content["session_id"]) for r in started]


async def until_done(front: str, sids: list[str], home: Path) -> None:
    """Wait until every run has its result.json in the shared record folder, then check
    through the front end that each says done. (Following each run with get_status(wait_s)
    would make the front end answer ~10 calls per run: a client's polling cost, which the
    get_status figure below measures, not the pool's throughput.)"""
    pending = set(sids)
    while pending:
        pending = {sid for sid in pending
                   if not (home / "sessions" / sid / "result.json").is_file()}
        await asyncio.sleep(0.02)
    async with Client(f"{front}/mcp") as client:
        for sid in sids:
            status = (await client.call_tool("get_status", {"session_id": sid})
                      ).structured_content
            assert status["done"], status


async def throughput(workers: int, latency_s: float, sessions: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree,
                                                               latency_s=latency_s) as server:
        pool = Deployment(Path(tmp), workers)
        try:
            await start_all(pool.fronts[0], server, 3)  # warm: litellm loaded in every worker
            await until_done(pool.fronts[0], await start_all(pool.fronts[0], server, 6),
                             pool.home)
            t0, cpu0 = time.perf_counter(), pool.cpu()
            sids = await start_all(pool.fronts[0], server, sessions)
            await until_done(pool.fronts[0], sids, pool.home)
            elapsed = time.perf_counter() - t0
            used = {k: v - cpu0[k] for k, v in pool.cpu().items()}
            print(f"{'':>8} {'':>8} {'':>11}  CPU ms/session: " + ", ".join(
                f"{k} {v / sessions * 1000:.0f}" for k, v in used.items())
                + f"; busy {sum(used.values()) / elapsed:.2f} of {os.cpu_count()} cores")
            return sessions / elapsed
        finally:
            pool.close()


async def status_latency(in_flight: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(agree, latency_s=5.0) as server:
        pool = Deployment(Path(tmp), 2, front_ends=2)
        try:
            sids = await start_all(pool.fronts[0], server, in_flight)
            times = []
            async with Client(f"{pool.fronts[0]}/mcp") as c1, \
                    Client(f"{pool.fronts[1]}/mcp") as c2:
                for i, sid in enumerate(sids * 2):
                    t0 = time.perf_counter()
                    await (c1 if i % 2 else c2).call_tool("get_status", {"session_id": sid})
                    times.append(time.perf_counter() - t0)
            times.sort()
            return statistics.median(times), times[int(len(times) * 0.95)]
        finally:
            pool.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("needs redis-server (apt-get install redis-server)")
    print(f"{'latency':>8} {'workers':>8} {'sessions/s':>11}")
    for latency in (0.0, 0.2):
        rates = []
        for workers in (1, 2):
            rates.append(await throughput(workers, latency, args.sessions))
            print(f"{latency * 1000:>6.0f}ms {workers:>8} {rates[-1]:>11.1f}", flush=True)
        print(f"{'':>8} {'2 vs 1':>8} {rates[1] / rates[0]:>10.2f}x", flush=True)
    p50, p95 = await status_latency(200)
    print(f"get_status across 2 front ends, 200 in flight: p50 {p50 * 1000:.1f} ms, "
          f"p95 {p95 * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
