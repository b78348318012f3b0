"""The worker pool as processes: redis-server, front ends and workers on free ports, and the
calls that start and follow a run on it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client

from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree

REDIS = shutil.which("redis-server")


CANARY = "sk-canary-5f1e2d3c4b5a69788796a5b4c3d2e1f0"


REDELIVERY_S = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Pool:
    """Redis plus massgen-mcp processes, all stopped at the end of the test."""

    def __init__(self, tmp: Path, home: Path, *, aof: bool = False) -> None:
        self.tmp, self.home, self.aof = tmp, home, aof
        self.redis_port = free_port()
        self.url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.front_ends: list[str] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.extra_env: dict[str, str] = {}  # for the processes started from now on
        # One client for every health check: httpx.get makes a client (and its TLS context)
        # each time, ~20 ms of CPU, twenty times a second while a test waits.
        self.http = httpx.Client(timeout=2)
        (tmp / "redis").mkdir(exist_ok=True)
        self.start_redis()

    def start_redis(self) -> None:
        assert REDIS is not None
        subprocess.run([REDIS, "--port", str(self.redis_port), "--bind", "127.0.0.1",
                        "--dir", str(self.tmp / "redis"), "--save", "",
                        "--appendonly", "yes" if self.aof else "no", "--daemonize", "yes",
                        "--pidfile", str(self.tmp / "redis" / "redis.pid")], check=True,
                       capture_output=True)
        self._until(self._redis_answers, "redis did not start")

    def stop_redis(self) -> None:
        subprocess.run(["redis-cli", "-p", str(self.redis_port), "shutdown", "nosave"],
                       capture_output=True)
        self._until(lambda: not self._redis_answers(), "redis did not stop")

    def _redis_answers(self) -> bool:
        return subprocess.run(["redis-cli", "-p", str(self.redis_port), "ping"],
                              capture_output=True, text=True).stdout.strip() == "PONG"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(MASSGEN_HOME=str(self.home), **self.extra_env)
        return env

    def _spawn(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp", *args], env=self.env(),
                                stdout=subprocess.DEVNULL,
                                stderr=(self.tmp / log).open("wb"))
        self.procs.append(proc)
        return proc

    def front_end(self) -> str:
        port = free_port()
        self._spawn("serve", "--http", "--port", str(port), "--redis", self.url,
                    log=f"front-{port}.log")
        url = f"http://127.0.0.1:{port}"
        self._until(lambda: self._health(url) is not None, "front end did not start")
        self.front_ends.append(url)
        return url

    def worker(self, *extra: str) -> subprocess.Popen[bytes]:
        proc = self._spawn("worker", "--redis", self.url, "--redelivery-timeout",
                           str(REDELIVERY_S), *extra, log=f"worker-{len(self.workers)}.log")
        self.workers.append(proc)
        return proc

    def wait_workers(self, n: int) -> None:
        self._until(lambda: (self._health(self.front_ends[0]) or {}).get("workers") == n,
                    f"{n} workers did not show up")

    def worker_name(self, proc: subprocess.Popen[bytes]) -> str:
        return f"{socket.gethostname()}#{proc.pid}"

    def _health(self, url: str) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = self.http.get(f"{url}/healthz").json()
            return body
        except (httpx.HTTPError, ValueError):
            return None

    @staticmethod
    def _until(check: Any, message: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, message
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.stop_redis()
        self.http.close()


@pytest.fixture
def pool(tmp_path: Path, home: Path) -> Iterator[Pool]:
    running = Pool(tmp_path, home)
    yield running
    running.close()


def models(server: ScriptedServer) -> list[str]:
    return [f"openai/{m}@{server.base_url}" for m in "abc"]


class HangingVotes:
    """A policy whose vote calls hang (up to 60 s, in the scripted server's request thread)
    until :meth:`release`, for the calls in flight when a worker dies, stops or is
    cancelled; ``voting`` counts them arriving. ``only`` limits it to requests whose
    messages contain that text, ``first`` to the first that many votes."""

    def __init__(self, only: str | None = None, first: int | None = None) -> None:
        self.voting = threading.Semaphore(0)
        self.released = threading.Event()
        self.only = only
        self.first = first
        self._votes = 0
        self._lock = threading.Lock()

    def release(self) -> None:
        """Every vote from now on, and the ones hanging, is answered at once."""
        self.released.set()

    def __call__(self, req: ChatRequest) -> Reply:
        if req.vote_labels and not self.released.is_set() and (
                self.only is None or self.only in json.dumps(req.messages)):
            with self._lock:
                self._votes += 1
                hang = self.first is None or self._votes <= self.first
            if hang:
                self.voting.release()
                self.released.wait(60)
        return agree(req)

    async def arrived(self, n: int = 1) -> None:
        for _ in range(n):
            assert await asyncio.to_thread(self.voting.acquire, True, 30)


async def start(url: str, server: ScriptedServer, question: str = "What is 6*7?") -> str:
    async with Client(f"{url}/mcp") as client:
        started = await client.call_tool("run_consensus", {"question": question,
                                                           "models": models(server)})
    return str(started.structured_content["session_id"])


async def follow(url: str, session_id: str) -> dict[str, Any]:
    """Poll get_status on ``url`` until the run is done; the last status."""
    async with Client(f"{url}/mcp") as client:
        while True:
            status = (await client.call_tool("get_status", {
                "session_id": session_id, "wait_s": 20})).structured_content
            if status["status"] != "running":
                return dict(status)


# What a worker logs when it stops a run without writing: its claim went unrenewed, a renewal
# found the claim taken, or the record refused a write under an older fencing token.
STOPS = ("stopping here without writing", "stopping the run without writing")


def cut_offs(pool: Pool) -> int:
    """How many times a worker has stopped a run without writing so far (from the workers'
    logs). A loaded machine can hold a worker's event loop past the harness's 1 s lease, and
    the pool's rules then take the run away from it; the next worker runs it from its record,
    so each such stop repeats only the model calls that were in flight when it came: at most
    one per agent (an agent's turn is one call at a time; the final answer is one call)."""
    return sum(log.read_text(errors="replace").count(stop)
               for log in pool.tmp.glob("worker-*.log") for stop in STOPS)


def answer_calls(server: ScriptedServer) -> int:
    """The answer turns the models were asked for (not votes, final answers or checks)."""
    return len([r for r in server.requests
                if not r.vote_labels and not r.is_final and not r.is_check])


def record(home: Path, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    folder = home / "sessions" / session_id
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    return json.loads((folder / "result.json").read_text()), events


