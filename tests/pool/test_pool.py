"""The worker pool for real: redis-server, two front ends and two workers as processes.

Each test starts its own Redis (Debian's redis-server, a free port, a throwaway folder) and
``massgen-mcp serve --http --redis`` / ``massgen-mcp worker --redis`` processes; the models are
the scripted server in this process, so every call is counted where it lands. ``.ci/run``
installs redis-server and sets MASSGEN_REQUIRE_REDIS=1, so a missing server fails there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client

from massgen_mcp.pool.live import redact_url
from massgen_mcp.testing.scripted import agree
from tests.pool_harness import (
    CANARY,
    REDIS,
    HangingVotes,
    Pool,
    answer_calls,
    cut_offs,
    follow,
    models,
    record,
    start,
)

pytestmark = pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                                reason="redis-server is not installed")


async def test_a_run_started_on_one_front_end_is_followed_on_another(
        pool: Pool, scripted: Any, home: Path) -> None:
    server = scripted(agree, latency_s=0.05)
    front_1, front_2 = pool.front_end(), pool.front_end()
    pool.worker()
    pool.wait_workers(1)
    sid = await start(front_1, server)
    status = await follow(front_2, sid)
    assert status["status"] == "completed"
    async with Client(f"{front_2}/mcp") as client:
        result = (await client.call_tool("get_result", {"session_id": sid})).structured_content
        listed = (await client.call_tool("list_sessions", {})).structured_content
        setup = (await client.call_tool("check_setup", {})).structured_content
    assert result["final_answer"].startswith("Final: ") and result["winner"]
    assert listed["sessions"][0]["session_id"] == sid
    assert setup["mode"] == "pool" and setup["workers"] == [pool.worker_name(pool.workers[0])]
    recorded, events = record(home, sid)
    # 3 answers, 3 votes, the final answer; a run cut off on a loaded machine and run again
    # repeats the calls it had in flight (see cut_offs).
    assert recorded["status"] == "completed"
    assert 7 <= len(server.requests) <= 7 + 3 * cut_offs(pool), len(server.requests)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert (home / "sessions" / sid / "report.html").is_file()
    status_file = json.loads((home / "sessions" / sid / "status.json").read_text())
    assert status_file["worker"] == pool.worker_name(pool.workers[0])
    # No key and no configured team: nothing here needs litellm, so the worker leaves it.
    log = pool.tmp / "worker-0.log"
    pool._until(lambda: "not loading litellm" in log.read_text(), "no word on litellm")


async def test_a_killed_worker_s_run_finishes_on_the_other_without_repeating_calls(
        pool: Pool, scripted: Any, home: Path) -> None:
    votes = HangingVotes()  # the worker dies while these are in flight
    server = scripted(votes)
    front = pool.front_end()
    first, second = pool.worker(), pool.worker()
    pool.wait_workers(2)
    sid = await start(front, server)
    await votes.arrived(3)  # every answer is recorded; the three votes hang
    answered = answer_calls(server)  # 3, or more if a run was cut off before (cut_offs)
    holder = json.loads((home / "sessions" / sid / "status.json").read_text())["worker"]
    victim = first if holder == pool.worker_name(first) else second
    survivor = second if victim is first else first
    votes.release()
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    status = await follow(front, sid)
    assert status["status"] == "completed"
    assert answer_calls(server) == answered, "the recorded answers were not asked for again"
    assert answered <= 3 + 3 * cut_offs(pool), f"{answered} answer calls"
    recorded, events = record(home, sid)
    types = [e["type"] for e in events]
    assert types.count("answer") == 3 and "resumed" in types and types[-1] == "finished"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert recorded["final_answer"].startswith("Final: ")
    final_status = json.loads((home / "sessions" / sid / "status.json").read_text())
    assert final_status["worker"] == pool.worker_name(survivor)


async def test_cancel_from_another_front_end_stops_the_run_on_its_worker(
        pool: Pool, scripted: Any, home: Path) -> None:
    votes = HangingVotes()
    server = scripted(votes)
    front_1, front_2 = pool.front_end(), pool.front_end()
    pool.worker()
    pool.wait_workers(1)
    sid = await start(front_1, server)
    await votes.arrived()
    async with Client(f"{front_2}/mcp") as client:
        cancelled = (await client.call_tool("cancel_session", {"session_id": sid})
                     ).structured_content
    assert cancelled["status"] == "cancelled", cancelled
    assert cancelled["message"].startswith("cancelled"), "this call stopped it"
    recorded, events = record(home, sid)
    assert recorded["status"] == "cancelled" and events[-1]["type"] == "finished"


async def test_a_queued_run_cancelled_with_no_worker_never_runs(
        pool: Pool, scripted: Any, home: Path) -> None:
    server = scripted(agree)
    front = pool.front_end()
    assert httpx.get(f"{front}/healthz").status_code == 503  # no worker yet
    sid = await start(front, server)
    async with Client(f"{front}/mcp") as client:
        status = (await client.call_tool("get_status", {"session_id": sid})).structured_content
        assert status["phase"] == "queued"
        cancelled = (await client.call_tool("cancel_session", {"session_id": sid})
                     ).structured_content
    assert cancelled["status"] == "cancelled"
    pool.worker()
    pool.wait_workers(1)
    sid_2 = await start(front, server, "Another question?")  # the worker skips the cancelled
    assert (await follow(front, sid_2))["status"] == "completed"  # one, runs this one
    assert record(home, sid)[0]["status"] == "cancelled"
    # Counted by question, not in all: a run cut off on a loaded machine repeats some calls.
    assert server.requests and all("Another question?" in r.user for r in server.requests), (
        "the cancelled run made no call")


async def test_a_stopped_worker_hands_its_run_back(pool: Pool, scripted: Any,
                                                   home: Path) -> None:
    votes = HangingVotes()
    server = scripted(votes)
    front = pool.front_end()
    first = pool.worker()
    pool.wait_workers(1)
    sid = await start(front, server)
    await votes.arrived(3)
    # A run asks for votes only once its answers are recorded. A loaded machine may have cut
    # a run off before that and run it again (see cut_offs), asking its answers twice; never
    # after.
    answered = answer_calls(server)
    votes.release()
    first.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(first.wait, 20) == 0
    status = json.loads((home / "sessions" / sid / "status.json").read_text())
    assert status["status"] == "running" and status["phase"] == "queued"
    pool.worker()
    assert (await follow(front, sid))["status"] == "completed"
    types = [e["type"] for e in record(home, sid)[1]]
    assert "requeued" in types and "resumed" in types and types.count("answer") == 3, types
    assert answer_calls(server) == answered, "the recorded answers were not asked for again"
    assert answered <= 3 + 3 * cut_offs(pool), f"{answered} answer calls"


@pytest.mark.slow
async def test_a_hundred_sessions_across_two_workers(pool: Pool, scripted: Any,
                                                     home: Path) -> None:
    server = scripted(agree, latency_s=0.02)
    fronts = [pool.front_end(), pool.front_end()]
    # Fifty runs at once on a worker of a loaded 2-core machine can hold its event loop past
    # the 1 s lease of the other tests, and a run cut off is (rightly) run again; this test
    # counts calls, so it gives the leases room.
    workers = [pool.worker("--redelivery-timeout", "20") for _ in range(2)]
    pool.wait_workers(2)
    sids = await asyncio.gather(*(start(fronts[i % 2], server, f"question {i}")
                                  for i in range(100)))
    finals = await asyncio.gather(*(follow(fronts[(i + 1) % 2], sid)
                                    for i, sid in enumerate(sids)))
    assert [s["status"] for s in finals] == ["completed"] * 100
    ran_on = set()
    for sid in sids:
        recorded, events = record(home, sid)
        assert recorded["final_answer"] and events[-1]["type"] == "finished"
        assert (home / "sessions" / sid / "report.html").is_file()
        ran_on.add(json.loads((home / "sessions" / sid / "status.json").read_text())["worker"])
    assert ran_on == {pool.worker_name(w) for w in workers}, "both workers took runs"
    assert len(server.requests) == 700, (  # 7 per run: none repeated, none lost
        f"{len(server.requests)} requests; by model {server.calls_by_model()}")


@pytest.mark.slow
async def test_no_key_reaches_redis(pool: Pool, scripted: Any, tmp_path: Path) -> None:
    server = scripted(agree)
    pool.extra_env["OPENAI_API_KEY"] = CANARY  # the front end's and the worker's
    front = pool.front_end()
    pool.worker()
    pool.wait_workers(1)
    sid = await start(front, server)
    await follow(front, sid)
    # With a key a run may need litellm: the worker loads it before its first such run.
    log = tmp_path / "worker-0.log"
    pool._until(lambda: "loading litellm in the background" in log.read_text(),
                "the worker did not load litellm")
    dump = tmp_path / "dump.rdb"
    subprocess.run(["redis-cli", "-p", str(pool.redis_port), "--rdb", str(dump)], check=True,
                   capture_output=True)
    keys = subprocess.run(["redis-cli", "-p", str(pool.redis_port), "--scan"], check=True,
                          capture_output=True, text=True).stdout.split()
    assert any(sid in k for k in keys), "the run's live state is in Redis"
    assert dump.stat().st_size > 0 and CANARY.encode() not in dump.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("aof", [True, False], ids=["aof", "no-persistence"])
async def test_a_redis_restart_loses_no_run(tmp_path: Path, home: Path, scripted: Any,
                                            aof: bool) -> None:
    """Restarted idle, then with one run in flight and four queued behind it (one run at a
    time): every run started before and after completes, and no request fails once Redis
    answers again. Without persistence the queue itself is gone: the worker's sweep finds
    the queued runs in their records."""
    pool = Pool(tmp_path, home, aof=aof)
    try:
        server = scripted(agree, latency_s=0.3)
        front = pool.front_end()
        pool.worker("--concurrency", "1")
        pool.wait_workers(1)
        pool.stop_redis()  # idle: every pooled connection goes stale
        pool.start_redis()
        first = await start(front, server, "after an idle restart")  # no "did not take"
        assert (await follow(front, first))["status"] == "completed"
        before = [await start(front, server, f"q{i}") for i in range(5)]
        while len(server.requests) < 7 + 3:  # the first is under way, four wait
            await asyncio.sleep(0.05)
        pool.stop_redis()
        pool.start_redis()
        after = [await start(front, server, f"after {i}") for i in range(2)]
        finals = await asyncio.gather(*(follow(front, sid) for sid in before + after))
        assert [s["status"] for s in finals] == ["completed"] * 7
        for sid in [first, *before, *after]:
            recorded, events = record(home, sid)
            assert recorded["final_answer"] and events[-1]["type"] == "finished"
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            status = json.loads((home / "sessions" / sid / "status.json").read_text())
            assert status["status"] == "completed"
    finally:
        pool.close()


@pytest.mark.usefixtures("task_clients")
async def test_an_mcp_task_client_gets_the_result_and_can_cancel(
        pool: Pool, scripted: Any, home: Path) -> None:
    from fastmcp_tasks import call_tool_task

    votes = HangingVotes(only="slow")
    server = scripted(votes)
    front_1, front_2 = pool.front_end(), pool.front_end()
    pool.worker()
    pool.wait_workers(1)
    async with Client(f"{front_1}/mcp") as client:
        task = await call_tool_task(client, "run_consensus", {
            "question": "What is 6*7?", "models": models(server)})
        result = await task.result()
        handle = result.structured_content
        assert handle is not None
        assert handle["status"] == "completed" and handle["result"]["final_answer"]
        slow = await call_tool_task(client, "run_consensus", {
            "question": "a slow one", "models": models(server)})
        await votes.arrived()
        async with Client(f"{front_2}/mcp") as other:  # any front end sees the sessions
            listed = (await other.call_tool("list_sessions", {})
                      ).structured_content["sessions"]
        assert handle["session_id"] in {s["session_id"] for s in listed}
        await slow.cancel()
    slow_sid = listed[0]["session_id"]
    assert (await follow(front_2, slow_sid))["status"] == "cancelled"


async def test_a_worker_cut_off_from_redis_stops_writing_and_its_run_goes_on(
        tmp_path: Path, home: Path, scripted: Any) -> None:
    pool = Pool(tmp_path, home, aof=True)
    try:
        votes = HangingVotes()
        server = scripted(votes)
        front = pool.front_end()
        pool.worker()
        pool.wait_workers(1)
        sid = await start(front, server)
        await votes.arrived(3)
        answered = answer_calls(server)  # all recorded (see the stopped worker's test)
        events = home / "sessions" / sid / "events.jsonl"
        pool.stop_redis()
        log = tmp_path / "worker-0.log"
        await asyncio.to_thread(pool._until, lambda: b"without writing" in log.read_bytes(),
                                "the worker did not fence itself")
        left = events.read_bytes()
        votes.release()
        pool.start_redis()
        assert (await follow(front, sid))["status"] == "completed"
        after = events.read_bytes()
        assert after.startswith(left)
        types = [json.loads(line)["type"] for line in after[len(left):].splitlines()]
        assert types[0] == "resumed", "the fenced worker wrote nothing after it stopped"
        assert "requeued" not in types and "cancelled" not in types
        assert answer_calls(server) == answered, "the recorded answers were not asked again"
    finally:
        pool.close()


@pytest.mark.slow
@pytest.mark.usefixtures("task_clients")
async def test_a_front_end_that_stops_leaves_its_task_s_run_going(
        pool: Pool, scripted: Any, home: Path, tmp_path: Path) -> None:
    from fastmcp_tasks import call_tool_task

    votes = HangingVotes()
    server = scripted(votes)
    front_1 = pool.front_end()  # alone, so it is the one following the task
    pool.worker()
    pool.wait_workers(1)
    async with Client(f"{front_1}/mcp") as client:
        await call_tool_task(client, "run_consensus", {
            "question": "What is 6*7?", "models": models(server)})
        await votes.arrived(3)
        sid = (await client.call_tool("list_sessions", {})
               ).structured_content["sessions"][0]["session_id"]
    front_2 = pool.front_end()
    proc = pool.procs[0]
    proc.send_signal(signal.SIGTERM)
    # Within the drain: the task steps aside instead of holding the shutdown for the run.
    assert await asyncio.to_thread(proc.wait, 30) in (0, -signal.SIGTERM)
    log = next(tmp_path.glob(f"front-{front_1.rsplit(':', 1)[1]}.log")).read_text()
    assert "Application shutdown complete" in log
    status = json.loads((home / "sessions" / sid / "status.json").read_text())
    assert status["status"] == "running", "the session was not cancelled with the task"
    votes.release()
    assert (await follow(front_2, sid))["status"] == "completed"


def test_doctor_shows_the_pool(pool: Pool) -> None:
    proc = subprocess.run([sys.executable, "-m", "massgen_mcp", "doctor", "--redis", pool.url],
                          env=pool.env(), capture_output=True, text=True, timeout=60)
    assert f"on the worker pool at {pool.url}; 0 worker(s) live" in proc.stdout, proc.stderr


def test_a_redis_password_is_never_shown() -> None:
    assert redact_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("redis://user:s3cret@host/0") == "redis://user:***@host/0"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"


def redis_cli(pool: Pool, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(pool.redis_port), *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a record, by path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


async def test_a_paused_worker_never_writes_again(pool: Pool, scripted: Any, home: Path,
                                                   tmp_path: Path) -> None:
    votes = HangingVotes(first=3)  # the owner's votes hang; the next worker's are answered
    server = scripted(votes)
    front = pool.front_end()
    first, second = pool.worker(), pool.worker()
    pool.wait_workers(2)
    sid = await start(front, server)
    await votes.arrived(3)
    folder = home / "sessions" / sid
    holder = json.loads((folder / "status.json").read_text())["worker"]
    owner = first if holder == pool.worker_name(first) else second
    other = second if owner is first else first
    # Every answer is recorded (see test_a_stopped_worker_hands_its_run_back) and the owner's
    # three votes hang, never to be recorded.
    paused_at, answered, cut_before = len(server.requests), answer_calls(server), cut_offs(pool)
    owner.send_signal(signal.SIGSTOP)  # frozen past its lease, with its votes in flight
    try:
        assert (await follow(front, sid))["status"] == "completed"  # taken over, finished
        await asyncio.to_thread(pool._until, lambda: redis_cli(
            pool, "exists", f"massgen:claim:{sid}") == "0", "the claim was not released")
        settled, calls = snapshot(folder), len(server.requests)
        cut_after = cut_offs(pool) - cut_before  # the other worker's, while the owner slept
    finally:
        owner.send_signal(signal.SIGCONT)
    votes.release()  # the frozen worker's votes are answered now that it runs again
    log = tmp_path / f"worker-{pool.workers.index(owner)}.log"

    # It wakes to one of two ends, both without a write: its renewal finds the claim taken
    # (fenced), or, when the renewal itself is slow to come back on a loaded machine, the
    # claim has gone unrenewed for longer than it may keep writing, and it hands the session
    # back (the next worker finds it finished and leaves it).
    ends = {"fenced": b"it is another worker's now",
            "claim unrenewed": b"handed back to the queue"}

    def stopped() -> bool:
        return (any(end in log.read_bytes() for end in ends.values())
                or len(server.requests) > calls or snapshot(folder) != settled)

    try:
        await asyncio.to_thread(pool._until, stopped, "the paused worker did nothing")
    except AssertionError as exc:  # what the woken worker was doing, for whoever reads CI
        raise AssertionError(f"{exc}; its log:\n{log.read_text()[-4000:]}") from None
    text = log.read_text()
    assert [why for why, end in ends.items() if why in text and end.decode() in text], text
    assert len(server.requests) == calls, "the paused worker made no call once it woke"
    assert snapshot(folder) == settled, "the paused worker wrote nothing once it woke"
    # After the pause, the other worker asks each agent's vote (the third may be cancelled
    # before it is sent, once two agree) and the final answer: 3 or 4 calls. On a loaded
    # machine the other worker may itself be cut off and run the session again, repeating
    # the calls it had in flight (cut_offs): the earlier count, (9, 10) in all, held only
    # while no worker but the paused one ever lost a claim.
    assert 3 <= calls - paused_at <= 4 + 3 * cut_after, (calls, paused_at, cut_after)
    assert answer_calls(server) == answered <= 3 + 3 * cut_before, (answered, cut_before)
    recorded, events = record(home, sid)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1)), "seq strictly increasing and unique"
    types = [e["type"] for e in events]
    assert types.count("answer") == 3 and types.count("vote") in (2, 3), types
    assert types.count("finished") == 1 and types[-1] == "finished", types
    assert recorded["status"] == "completed"
    published = json.loads(redis_cli(pool, "get", f"massgen:status:{sid}"))
    assert published["status"] == "completed" and published["worker"] == pool.worker_name(other)


async def test_a_worker_that_stops_leaves_no_task_behind(pool: Pool, home: Path) -> None:
    """serve owns every task it starts (the stop signal's waiter too): when it returns,
    nothing it started is still pending."""
    from massgen_mcp.pool.live import PoolConfig
    from massgen_mcp.pool.worker import PoolWorker
    from massgen_mcp.records.store import SessionStore
    from massgen_mcp.testing.scripted import ScriptedProvider

    before = asyncio.all_tasks()
    worker = PoolWorker(PoolConfig(pool.url), SessionStore(home), ScriptedProvider())
    stop = asyncio.Event()
    stop.set()  # serve still connects, starts its tasks and takes runs before it sees this
    serving = asyncio.create_task(worker.serve(stop))
    await asyncio.wait_for(serving, 30)
    left = {t for t in asyncio.all_tasks() - before - {serving} if not t.done()}
    assert not left, [t.get_name() for t in left]


async def test_a_front_end_does_not_load_litellm(pool: Pool, home: Path) -> None:
    """A front end calls no model (its workers do), so it does not warm litellm: ~2 s of
    CPU and ~150 MB saved on every front end. A local server does warm it."""
    from massgen_mcp.pool.live import PoolConfig
    from massgen_mcp.server.app import create_server

    async def tasks_while_serving(**options: Any) -> set[str]:
        async with Client(create_server(home=home, **options)):
            return {task.get_name() for task in asyncio.all_tasks()}

    in_a_pool = await tasks_while_serving(pool=PoolConfig(pool.url))
    assert "massgen-pool-membership" in in_a_pool and "litellm-warm-up" not in in_a_pool
    assert "litellm-warm-up" in await tasks_while_serving()
