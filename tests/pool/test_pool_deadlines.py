"""A pool's Redis that accepts and never answers (another service on its port, or a frozen
Redis): `doctor` and `serve --http --redis` end with one line naming it, and doctor never
reports "0 worker(s) live" for a Redis it could not read.

The silent service is a bare listening socket: the kernel completes every connection into its
backlog and nothing is ever written back.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.pool.live import CHECK_S
from tests.pool_harness import REDIS, Pool, free_port

pytestmark = pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                                reason="redis-server is not installed")
# Each command must end well within this (its own check gives up after CHECK_S).
LIMIT_S = 6 * CHECK_S


@pytest.fixture
def closed() -> str:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


@pytest.fixture
def silent() -> Iterator[str]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def massgen(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MASSGEN_REDIS_URL"}
    return subprocess.run([sys.executable, "-m", "massgen_mcp", *args], capture_output=True,
                          text=True, timeout=LIMIT_S, env={**env, "MASSGEN_HOME": str(home)})


@pytest.mark.slow
def test_doctor_against_a_silent_service_says_it_could_not_tell(silent: str,
                                                                home: Path) -> None:
    done = massgen(home, "doctor", "--redis", silent)
    assert done.returncode == 1, done.stderr  # the check failed, as docs/safety.md says
    runs = [line for line in done.stdout.splitlines() if line.startswith("runs:")]
    assert runs == [f"runs:          on the worker pool at {silent}; could not tell how many "
                    f"workers are live: redis did not answer within {CHECK_S:g} s"]
    assert "worker(s) live" not in done.stdout


@pytest.mark.slow
def test_serve_against_a_silent_service_is_one_line_naming_it(silent: str, home: Path) -> None:
    done = massgen(home, "serve", "--http", "--port", str(free_port()), "--redis", silent)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"massgen-mcp: the pool's Redis ({silent}) did not answer a front end joining the pool "
        f"within {CHECK_S:g} s; check that --redis names a running Redis (not another "
        "service) that is not frozen"]


@pytest.mark.slow
def test_doctor_against_a_frozen_redis_does_not_say_no_worker_is_live(
        tmp_path: Path, home: Path) -> None:
    pool = Pool(tmp_path, home)
    try:
        pool.front_end()
        pool.worker()
        pool.wait_workers(1)
        assert "1 worker(s) live" in massgen(home, "doctor", "--redis", pool.url).stdout
        pid = int((tmp_path / "redis" / "redis.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            done = massgen(home, "doctor", "--json", "--redis", pool.url)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert done.returncode == 1, done.stderr
        assert '"pool_problem": "redis did not answer within' in done.stdout
    finally:
        pool.close()


@pytest.mark.slow
def test_doctor_against_a_closed_port_exits_1(closed: str, home: Path) -> None:
    done = massgen(home, "doctor", "--redis", closed)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "worker(s) live" not in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("redis", ["silent", "closed"])
def test_a_worker_at_a_redis_that_does_not_answer_is_one_line_and_exit_1(
        redis: str, request: pytest.FixtureRequest, home: Path) -> None:
    """It checks Redis as serve and doctor do before it says it takes runs: no "taking runs"
    followed by minutes of silence."""
    url = request.getfixturevalue(redis)
    env = {k: v for k, v in os.environ.items() if k != "MASSGEN_REDIS_URL"}
    proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp", "worker", "--redis", url],
                            stderr=subprocess.PIPE, text=True,
                            env={**env, "MASSGEN_HOME": str(home)})
    assert proc.stderr is not None
    try:
        lines = []
        for line in proc.stderr:  # until it exits; a worker that takes runs fails at once
            assert "taking runs" not in line, line
            lines.append(line)
        assert proc.wait(LIMIT_S) == 1
    finally:
        proc.kill()
        proc.wait()
    said = [line for line in lines if "INFO" not in line]
    assert len(said) == 1, lines
    assert said[0].startswith(f"massgen-mcp: the pool's Redis ({url}) did not answer a worker "
                              "starting"), said
