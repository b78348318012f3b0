"""The pool against someone who can write to its Redis: nothing they put there runs.

Real redis-server, front end and worker processes (the helpers of ``test_pool.py``); the
attacker is this test, writing Docket's streams and keys with a Redis client the way
``redis-cli XADD`` would.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docket
import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError
from redis import Redis
from test_pool import REDIS, Pool, follow, models, start

from massgen_mcp.pool import payloads
from massgen_mcp.scripted import agree

pytestmark = pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                                reason="redis-server is not installed")


@pytest.fixture
def pool(tmp_path: Path, home: Path) -> Iterator[Pool]:
    running = Pool(tmp_path, home)
    yield running
    running.close()


class Command:
    """A pickle that runs a shell command when loaded (what an attacker would write)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def evil(marker: Path) -> bytes:
    return pickle.dumps((Command(f"touch {marker}"),))


def run_message(marker: Path, key: str, function: str) -> dict[str, Any]:
    """A stream message as Docket writes one, with a command as the task's arguments."""
    return {"key": key, "when": "2026-01-01T00:00:00+00:00", "function": function,
            "args": evil(marker), "kwargs": pickle.dumps({}), "attempt": "1",
            "generation": "0"}


def strike_message(marker: Path) -> dict[str, Any]:
    return {"direction": "strike", "function": "massgen.run_session",
            "parameter": "session_id", "operator": "==", "value": evil(marker)}


def logs(pool: Pool) -> str:
    return "".join(p.read_text(errors="replace") for p in pool.tmp.glob("*.log"))


async def test_no_pickle_from_redis_runs_on_a_worker_or_front_end(
        pool: Pool, scripted: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastmcp.client import extension_hooks
    from fastmcp_tasks import _build_tasks_client_extension, call_tool_task

    monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])

    server = scripted(agree)
    front = pool.front_end()
    worker = pool.worker()
    pool.wait_workers(1)
    redis = Redis.from_url(pool.url)
    markers = {name: tmp_path / f"pwned-{name}" for name in (
        "run-stream", "tasks-stream", "strikes", "tasks-strikes", "result", "stored-task")}
    redis.xadd("massgen:stream", run_message(markers["run-stream"], "evil-1",
                                             "massgen.run_session"))
    redis.xadd("massgen-tasks:stream", run_message(markers["tasks-stream"], "evil-2",
                                                   "run_consensus"))
    redis.xadd("massgen:strikes", strike_message(markers["strikes"]))
    redis.xadd("massgen-tasks:strikes", strike_message(markers["tasks-strikes"]))

    # Both still run sessions: a plain run, then an MCP task whose stored result and
    # stored arguments are swapped for commands before the client reads them.
    sid = await start(front, server)
    assert (await follow(front, sid))["status"] == "completed"
    extension_hooks.register_internal_client_extension_factory(_build_tasks_client_extension)
    try:
        async with Client(f"{front}/mcp") as client:
            task = await call_tool_task(client, "run_consensus", {
                "question": "What is 6*7?", "models": models(server)})
            assert (await task.result()).structured_content["status"] == "completed"
            results = [k for k in redis.scan_iter("massgen-tasks:results:*")]
            assert results, "no stored task result to tamper with"
            for key in results:  # py-key-value's entry; Docket's own value inside
                entry = json.loads(redis.get(key))
                entry["value"]["data"] = base64.b64encode(evil(markers["result"])).decode()
                redis.set(key, json.dumps(entry))
            with pytest.raises(MCPError):
                await task.status()
            runs = [k for k in redis.scan_iter("massgen-tasks:runs:*")
                    if redis.hget(k, "args")]
            assert runs, "no stored task to tamper with"
            for key in runs:
                redis.hset(key, "args", evil(markers["stored-task"]))
            with pytest.raises(MCPError):
                await task.status()
    finally:
        monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])

    assert [name for name, marker in markers.items() if marker.exists()] == []
    text = logs(pool)
    assert len(re.findall(r"refused a payload read from the pool's Redis: it names "
                          r"posix\.system", text)) >= 6, text[-3000:]
    assert "dropped task 'evil-1'" in text and "dropped task 'evil-2'" in text
    assert text.count("dropped a strike instruction") >= 2
    # Dropped, not left pending for redelivery, and nobody stopped.
    for group_stream in ("massgen:stream", "massgen-tasks:stream"):
        for group in redis.xinfo_groups(group_stream):
            assert group["pending"] == 0, (group_stream, group)
    assert worker.poll() is None and pool.procs[0].poll() is None
    sid = await start(front, server, "after the attack")
    assert (await follow(front, sid))["status"] == "completed"


def test_the_guard_is_checked_against_this_pydocket() -> None:
    """The guard replaces ``cloudpickle.loads`` and wraps the two ``from_message``: a new
    pydocket must be checked again (guard_docket refuses any other version)."""
    from importlib import metadata

    assert metadata.version("pydocket") == payloads.TESTED_PYDOCKET
    root = Path(docket.__file__).parent
    sites = {}
    for source in sorted(root.rglob("*.py")):
        text = source.read_text()
        assert not re.search(r"\bimport pickle\b|\bfrom (cloud)?pickle import\b|\bmarshal\b",
                             text), source
        found = len(re.findall(r"\bloads\(", text)) - len(re.findall(r"json\.loads\(", text))
        if found:
            sites[str(source.relative_to(root))] = (
                found, len(re.findall(r"\bcloudpickle\.loads\(", text)))
    assert sites == {"execution.py": (4, 4), "strikelist.py": (1, 1), "docket.py": (2, 2)}


def test_only_plain_data_and_our_records_load() -> None:
    from massgen_mcp.config import RunOptions
    from massgen_mcp.errors import ConfigError

    payloads.guard_docket()
    plain = ("s", 1, 2.5, None, [1], {"a": (1, 2)}, {3}, frozenset({4}), b"x",
             RunOptions(timeout_s=30), ConfigError("bad"), ValueError("x"))
    loaded = payloads.loads(pickle.dumps(plain))
    assert loaded[:9] == plain[:9] and loaded[9] == plain[9]
    assert isinstance(loaded[10], ConfigError) and str(loaded[10]) == "bad"
    for hostile in (Command("true"), eval, Path, pickle.Unpickler, Client):
        with pytest.raises(payloads.UnsafePayloadError):
            payloads.loads(pickle.dumps(hostile))
