"""Worker-pool figures: python bench/pool.py [--workers 1,2] [--frontends 1] [--sessions 100]

Starts redis-server (Debian's, a free port, no persistence), ``massgen-mcp worker`` and
``massgen-mcp serve --http`` processes, the scripted model server(s) (``python -m
massgen_mcp.testing.scripted``) and the MCP clients, each in a process of its own, so that
nothing this process does caps what it measures. For each latency, worker count and front-end
count it prints:

* sessions per second through the pool: ``--sessions`` runs of 3 agents (7 calls each),
  split over the client processes (one per front end unless ``--clients``), each client
  starting its share together through its own front end and polling the shared record folder
  until every one has its result (each is then checked done through the front end, outside
  the timed window). The scripted server answers at once (0 ms: CPU-bound) or after 200 ms
  (I/O-bound);
* where the CPU went in the timed window, per session, from /proc (psutil): the workers, the
  front ends, Redis, the model server(s) and the clients. The last two are the bench itself:
  their CPU per session is the bench's own limit (one model-server process cannot serve more
  than ``1000 / its ms`` sessions a second, whatever the pool does);
* with ``--status`` (default 200): ``get_status`` latency (p50/p95) across two front ends
  while that many sessions are in flight.

Every front end's ``/healthz`` must count every worker before a run starts. Set
``MASSGEN_BENCH_PROFILE=DIR`` to run the workers and front ends under cProfile (one
``.prof`` file per process in DIR, written when the bench stops them); the figures are then
the profiler's, not the pool's.

The embedded mode's figures are bench/run.py's (the pool code is not imported there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import httpx
import psutil
from fastmcp import Client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

# ``python -m massgen_mcp ARGS`` under cProfile, its stats written to OUT however it exits
# (a front end ends by re-raising SIGTERM, which skips atexit). The main thread only.
_PROFILED = """
import atexit, cProfile, os, runpy, signal, sys
out = sys.argv.pop(1)
sys.argv[0] = "massgen_mcp"
profile = cProfile.Profile()
real_exit = os._exit
def dump():
    profile.disable()
    profile.dump_stats(out)
def _exit(code):
    dump()
    real_exit(code)
os._exit = _exit
atexit.register(dump)
# uvicorn re-raises the SIGTERM it stopped on once it has stopped, with this handler back.
signal.signal(signal.SIGTERM, lambda *_: _exit(0))
profile.enable()
runpy.run_module("massgen_mcp", run_name="__main__", alter_sys=True)
"""

PARTS = ("workers", "front ends", "redis", "model server", "clients")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process and its live children (/proc, psutil)."""
    try:
        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += sum(child.cpu_times()[:2])
        return total
    except psutil.NoSuchProcess:
        return 0.0


def _read_line(stream: IO[str], deadline: float, what: str) -> str:
    line = stream.readline()
    if not line:
        sys.exit(f"{what} ended before it was ready")
    if time.monotonic() > deadline:
        sys.exit(f"{what} was not ready in time")
    return line.strip()


class Deployment:
    """Redis, the model server(s), the workers and the front ends, each its own process."""

    def __init__(self, folder: Path, workers: int, front_ends: int, *, latency_s: float,
                 model_servers: int = 1) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        subprocess.run(["redis-server", "--port", str(self.port), "--save", "",
                        "--appendonly", "no", "--daemonize", "yes", "--dir", str(folder),
                        "--pidfile", str(folder / "redis.pid")], check=True,
                       capture_output=True)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          env.get("PYTHONPATH")]))
        self.home = folder / "home"
        self.models: list[subprocess.Popen[str]] = []
        self.model_urls: list[str] = []
        for _ in range(model_servers):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "massgen_mcp.testing.scripted", "--port", str(port),
                 "--latency", str(latency_s)], env=env, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            self.model_urls.append(_read_line(proc.stdout, time.monotonic() + 60,
                                              "the scripted model server"))
            self.models.append(proc)
        # One scripted endpoint stands in for many providers: lift the per-provider cap on
        # calls in flight (16 per process), which would otherwise be what is measured.
        env.update(MASSGEN_HOME=str(self.home), MASSGEN_REDIS_URL=self.url,
                   MASSGEN_MAX_PARALLEL_PER_PROVIDER="256")
        profile = os.environ.get("MASSGEN_BENCH_PROFILE")

        def command(role: str, *args: str) -> list[str]:
            if not profile:
                return [sys.executable, "-m", "massgen_mcp", *args]
            out = Path(profile, f"{role}-{len(self.procs)}.prof")
            return [sys.executable, "-c", _PROFILED, str(out), *args]

        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers = []
        for _ in range(workers):
            self.workers.append(subprocess.Popen(command("worker", "worker"), env=env,
                                                 stderr=subprocess.DEVNULL))
            self.procs.append(self.workers[-1])
        self.front_procs = []
        self.fronts = []
        for _ in range(front_ends):
            port = free_port()
            self.front_procs.append(subprocess.Popen(
                command("front", "serve", "--http", "--port", str(port)),
                env=env, stderr=subprocess.DEVNULL))
            self.procs.append(self.front_procs[-1])
            self.fronts.append(f"http://127.0.0.1:{port}")
        self.env = env
        deadline = time.monotonic() + 90
        with httpx.Client(timeout=2) as http:
            # Every front end up, and each counting every worker, before any run starts.
            while not all(self._workers(http, front) == workers for front in self.fronts):
                if time.monotonic() > deadline:
                    self.close()
                    sys.exit("the pool did not start")
                time.sleep(0.1)

    @staticmethod
    def _workers(http: httpx.Client, front: str) -> int | None:
        try:
            return int(http.get(f"{front}/healthz").json()["workers"])
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def cpu(self, clients: list[subprocess.Popen[str]]) -> dict[str, float]:
        """CPU seconds used so far by each part."""
        redis_pid = int((self.folder / "redis.pid").read_text())
        return {"workers": sum(cpu_s(p.pid) for p in self.workers),
                "front ends": sum(cpu_s(p.pid) for p in self.front_procs),
                "redis": cpu_s(redis_pid),
                "model server": sum(cpu_s(p.pid) for p in self.models),
                "clients": sum(cpu_s(p.pid) for p in clients)}

    def client(self, index: int, count: int) -> subprocess.Popen[str]:
        """A client process for ``count`` runs on front end ``index % fronts``; it says
        ``ready`` once connected and starts them when told ``go``."""
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--as-client",
             self.fronts[index % len(self.fronts)],
             self.model_urls[index % len(self.model_urls)], str(count), str(self.home)],
            env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def close(self) -> None:
        procs: list[subprocess.Popen[bytes] | subprocess.Popen[str]] = [*self.procs,
                                                                          *self.models]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                       capture_output=True)


# -- the client process ------------------------------------------------------------------------

async def start_runs(client: Client[Any], model_url: str, n: int, tag: str) -> list[str]:
    models = [f"openai/{m}@{model_url}" for m in "abc"]
    started = await asyncio.gather(*(client.call_tool(
        "run_consensus", {"question": f"{tag} q{i}", "models": models}) for i in range(n)))
    return [str((r.structured_content or {})["session_id"]) for r in started]


async def wait_records(sids: list[str], home: Path) -> None:
    """Until every run has its result.json in the shared record folder (following each
    with get_status(wait_s) would make the front end answer ~10 calls per run: a client's
    polling cost, which the get_status figure measures, not the pool's throughput)."""
    pending = set(sids)
    while pending:
        pending = {sid for sid in pending
                   if not (home / "sessions" / sid / "result.json").is_file()}
        if pending:
            await asyncio.sleep(0.02)


async def client_main(front: str, model_url: str, count: int, home: Path) -> None:
    async with Client(f"{front}/mcp") as client:
        await client.list_tools()
        print("ready", flush=True)
        command = await asyncio.to_thread(sys.stdin.readline)
        if command.strip() != "go":
            return
        sids = await start_runs(client, model_url, count, str(os.getpid()))
        await wait_records(sids, home)
        print("done", flush=True)
        for sid in sids:
            # Redis's copy of the status may trail result.json by the worker's last write.
            status = (await client.call_tool("get_status", {"session_id": sid, "wait_s": 30})
                      ).structured_content
            assert status["done"], status
        print(json.dumps(sids), flush=True)


# -- the bench ---------------------------------------------------------------------------------

def run_clients(pool: Deployment, sessions: int, clients: int
                ) -> tuple[float, dict[str, float]]:
    """Start ``sessions`` runs over ``clients`` client processes at once; the seconds until
    the last has its result, and the CPU seconds each part used meanwhile."""
    shares = [sessions // clients + (i < sessions % clients) for i in range(clients)]
    procs = [pool.client(i, n) for i, n in enumerate(shares) if n]
    try:
        deadline = time.monotonic() + 60
        for proc in procs:
            assert proc.stdout is not None
            if _read_line(proc.stdout, deadline, "a client") != "ready":
                sys.exit("a client failed to connect")
        cpu0 = pool.cpu(procs)
        t0 = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout is not None
            if _read_line(proc.stdout, time.monotonic() + 3600, "a client") != "done":
                sys.exit("a client failed")
        elapsed = time.perf_counter() - t0
        cpu1 = pool.cpu(procs)
        for proc in procs:
            assert proc.stdout is not None
            json.loads(_read_line(proc.stdout, time.monotonic() + 600, "a client's check"))
            if proc.wait() != 0:
                sys.exit("a client's check failed")
        return elapsed, {k: cpu1[k] - cpu0[k] for k in PARTS}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def throughput(workers: int, front_ends: int, latency_s: float, sessions: int, clients: int,
               model_servers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        pool = Deployment(Path(tmp), workers, front_ends, latency_s=latency_s,
                          model_servers=model_servers)
        try:
            # Warm: litellm loaded and a run done in every worker, every front end used.
            run_clients(pool, 3 * max(workers, front_ends), front_ends)
            elapsed, used = run_clients(pool, sessions, clients)
            ms = {k: v / sessions * 1000 for k, v in used.items()}
            pool_ms = ms["workers"] + ms["front ends"] + ms["redis"]
            bench_ms = {k: ms[k] for k in ("model server", "clients")}
            print(f"{latency_s * 1000:>6.0f}ms {workers:>8} {front_ends:>6} "
                  f"{sessions / elapsed:>11.1f}   pool {pool_ms:5.1f} ms/session ("
                  + ", ".join(f"{k} {ms[k]:.1f}" for k in PARTS[:3])
                  + f"); bench {sum(bench_ms.values()):.1f} (" + ", ".join(
                      f"{k} {v:.1f}" for k, v in bench_ms.items())
                  + f"); busy {sum(used.values()) / elapsed:.2f} of {os.cpu_count()} cores",
                  flush=True)
            limits = [f"{model_servers * 1000 / bench_ms['model server']:.0f}/s "
                      f"({model_servers} model server{'s' * (model_servers > 1)})"
                      if bench_ms["model server"] else "",
                      f"{min(clients, sessions) * 1000 / bench_ms['clients']:.0f}/s "
                      f"({clients} client process{'es' * (clients > 1)})"
                      if bench_ms["clients"] else ""]
            print(f"{'':>8} bench's own limit (its processes' CPU, one core each): "
                  + ", ".join(x for x in limits if x), flush=True)
            return sessions / elapsed
        finally:
            pool.close()


async def status_latency(in_flight: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        pool = Deployment(Path(tmp), 2, 2, latency_s=5.0)
        try:
            times = []
            async with Client(f"{pool.fronts[0]}/mcp") as c1, \
                    Client(f"{pool.fronts[1]}/mcp") as c2:
                sids = await start_runs(c1, pool.model_urls[0], in_flight, "status")
                for i, sid in enumerate(sids * 2):
                    t0 = time.perf_counter()
                    await (c1 if i % 2 else c2).call_tool("get_status", {"session_id": sid})
                    times.append(time.perf_counter() - t0)
            times.sort()
            return statistics.median(times), times[int(len(times) * 0.95)]
        finally:
            pool.close()


def counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    if sys.argv[1:2] == ["--as-client"]:
        front, model_url, count, home = sys.argv[2:6]
        asyncio.run(client_main(front, model_url, int(count), Path(home)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100, help="runs per timed window")
    parser.add_argument("--workers", type=counts, default=[1, 2], help="e.g. 1,2,4,8")
    parser.add_argument("--frontends", type=counts, default=[1], help="e.g. 1,2,4")
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.2],
                        metavar="S", help="the model server's seconds per call")
    parser.add_argument("--clients", type=int, default=0,
                        help="client processes (default: one per front end)")
    parser.add_argument("--model-servers", type=int, default=1)
    parser.add_argument("--status", type=int, default=200, metavar="N",
                        help="get_status latency with N in flight (0: skip)")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("needs redis-server (apt-get install redis-server)")
    print(f"{'latency':>8} {'workers':>8} {'fronts':>6} {'sessions/s':>11}", flush=True)
    for latency in args.latency:
        for front_ends in args.frontends:
            rates = []
            for workers in args.workers:
                rates.append(throughput(workers, front_ends, latency, args.sessions,
                                        args.clients or front_ends, args.model_servers))
            if len(rates) > 1:
                print(f"{'':>8} scaling vs {args.workers[0]} worker(s): " + ", ".join(
                    f"{w}: {r / rates[0]:.2f}x" for w, r in zip(args.workers, rates,
                                                                 strict=True)), flush=True)
    if args.status:
        p50, p95 = asyncio.run(status_latency(args.status))
        print(f"get_status across 2 front ends, {args.status} in flight: p50 "
              f"{p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")


if __name__ == "__main__":
    main()
