"""Live drafts and steering on the worker pool, for real: redis-server and ``massgen-mcp
worker`` processes (the helpers of ``test_pool.py``), the scripted server in this process, and
front ends as :class:`PoolExecutor` objects here, so a test can start a run on one front end and
steer or watch it from another.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from redis import Redis

from massgen_mcp.consensus.drafts import DRAFT_CHARS
from massgen_mcp.consensus.steering import NOTES_PER_MINUTE
from massgen_mcp.core.errors import SessionNotFoundError, SteerRefusedError
from massgen_mcp.core.records import CallPurpose, ConfigFile, RequestRecord
from massgen_mcp.core.run_state import Draft, StatusRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.pool import drafts
from massgen_mcp.pool.executor import PoolExecutor
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.records.ids import new_session_id
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Reply,
    ScriptedProvider,
    ScriptedServer,
    agree,
    answer,
)
from tests.helpers import team_for
from tests.pool_harness import REDIS, HangingVotes, Pool, follow, start

pytestmark = pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                                reason="redis-server is not installed")
SLOW_CALLS: dict[str, Any] = {"call_timeout_s": 60.0}  # held votes are not retried
ASKED = RequestRecord(question="What is 6*7?")


@pytest.fixture
def pool(tmp_path: Path, home: Path) -> Any:
    running = Pool(tmp_path, home)
    yield running
    running.close()


@pytest.fixture
async def front_ends(pool: Pool, home: Path) -> AsyncIterator[Callable[[], Any]]:
    """Open front ends in this process: ``runner = await front_ends()``, closed at the end."""
    opened: list[PoolExecutor] = []

    async def open_one() -> PoolExecutor:
        runner = await PoolExecutor(SessionStore(home), PoolConfig(pool.url)).open()
        opened.append(runner)
        return runner

    yield open_one
    for runner in opened:
        await runner.aclose()


class HeldVotes:
    """Vote calls of ``models`` hang (in the scripted server's request thread) until
    :meth:`release`; ``voting`` counts them arriving. Every other call is :func:`agree`'s."""

    def __init__(self, *models: str) -> None:
        self.models = set(models)
        self.voting = threading.Semaphore(0)
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()

    def __call__(self, req: ChatRequest) -> Reply:
        if req.vote_labels and req.model in self.models and not self.released.is_set():
            self.voting.release()
            self.released.wait(60)
        return agree(req)

    async def arrived(self, n: int) -> None:
        for _ in range(n):
            assert await asyncio.to_thread(self.voting.acquire, True, 30)


async def until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    """Poll ``check`` (state this process's front end holds) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def logs(pool: Pool) -> str:
    return "".join(p.read_text(errors="replace") for p in pool.tmp.glob("*.log"))


async def voted(runner: PoolExecutor, sid: str) -> StatusRecord:
    """The run's status once some vote is recorded (woken by the live channel)."""
    status = await runner.status(sid)
    while not any(status.tally.values()):
        assert not status.done, status
        status = await runner.wait(sid, 30, after_revision=status.revision)
    return status


def events_of(home: Path, sid: str, kind: str) -> list[dict[str, Any]]:
    lines = (home / "sessions" / sid / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == kind or not kind]


async def test_a_pool_run_is_steered_from_another_front_end(
        pool: Pool, home: Path, front_ends: Any) -> None:
    votes = HeldVotes("b", "c")  # a's vote lands; the other two are in flight
    with ScriptedServer(votes) as server:
        starter, other = await front_ends(), await front_ends()
        pool.worker()
        sid = (await starter.start(ASKED, team_for(server, **SLOW_CALLS))).session_id
        await votes.arrived(2)
        before = await voted(other, sid)
        assert sum(len(v) for v in before.tally.values()) == 1
        sent = len(server.requests)
        note = "Answer in Roman numerals, please."
        assert await other.steer(sid, note) == 1  # a's vote no longer counts
        steered = await other.status(sid)
        assert steered.notes == [note] and not any(steered.tally.values())
        votes.release()
        final = await other.wait(sid, 60, until_done=True)
    assert final.status == "completed", final
    after = server.requests[sent:]
    # a votes again, b and c (their held votes were on the old view) too, then the final.
    assert len(after) >= 4 and all(note in req.user for req in after), [
        (r.model, r.user[-200:]) for r in after if note not in r.user]
    assert all(note not in req.user for req in server.requests[:sent])
    [event] = events_of(home, sid, "steered")
    assert (event["detail"], event["count"]) == (note, 1)
    assert json.loads((home / "sessions" / sid / "status.json").read_text())["notes"] == [note]


async def test_a_run_started_on_one_front_end_is_steered_from_another_s_tool_and_the_cli(
        pool: Pool, home: Path) -> None:
    """The same through the faces: MCP ``steer_session`` on a second ``serve --http --redis``
    process, and ``massgen-mcp steer --redis`` as a third front end."""
    votes = HeldVotes("a", "b", "c")
    with ScriptedServer(votes) as server:
        front_1, front_2 = pool.front_end(), pool.front_end()
        pool.worker()
        sid = await start(front_1, server)
        await votes.arrived(3)
        async with Client(f"{front_2}/mcp") as client:
            steered = (await client.call_tool("steer_session", {
                "session_id": sid, "message": "Show the arithmetic."})).structured_content
        assert steered["votes_cleared"] == 0 and steered["message"].startswith("delivered")
        cli = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "massgen_mcp", "steer", sid,
                             "Keep it short.", "--redis", pool.url],
            env=pool.env(), capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and f"delivered to {sid}" in cli.stdout, cli.stderr
        votes.release()
        assert (await follow(front_2, sid))["status"] == "completed"
        async with Client(f"{front_1}/mcp") as client:
            refused = await client.call_tool("steer_session", {
                "session_id": sid, "message": "too late"}, raise_on_error=False)
    assert refused.is_error
    assert "is completed, not running" in str(refused.content[0]), refused.content
    assert [e["detail"] for e in events_of(home, sid, "steered")] == [
        "Show the arithmetic.", "Keep it short."]
    assert all("Show the arithmetic." in req.user and "Keep it short." in req.user
               for req in server.requests[-3:])


async def test_a_note_survives_the_run_s_hand_over_to_another_worker(
        pool: Pool, home: Path, front_ends: Any) -> None:
    votes = HeldVotes("a", "b", "c")
    with ScriptedServer(votes) as server:
        runner = await front_ends()
        first = pool.worker()
        sid = (await runner.start(ASKED, team_for(server, **SLOW_CALLS))).session_id
        await votes.arrived(3)
        note = "Mention the units."
        assert await runner.steer(sid, note) == 0
        first.send_signal(signal.SIGTERM)  # hands the run back, its votes still in flight
        assert await asyncio.to_thread(first.wait, 30) == 0
        sent = len(server.requests)
        votes.release()
        pool.worker()
        final = await runner.wait(sid, 60, until_done=True)
    assert final.status == "completed" and final.notes == [note], final
    after = server.requests[sent:]
    assert len(after) >= 4 and all(note in req.user for req in after)
    types = [e["type"] for e in events_of(home, sid, "")]
    assert types.count("steered") == 1 and "requeued" in types
    assert types.index("steered") < types.index("requeued") < types.index("resumed")


async def test_steering_what_is_not_running_on_a_worker_is_refused(
        pool: Pool, home: Path, front_ends: Any) -> None:
    votes = HangingVotes(only="hold")
    with ScriptedServer(votes) as server:
        runner = await front_ends()
        with pytest.raises(SessionNotFoundError):
            await runner.steer(new_session_id(), "a note")
        team = team_for(server, **SLOW_CALLS)
        queued = (await runner.start(ASKED, team)).session_id  # no worker yet
        with pytest.raises(SteerRefusedError, match=r"is queued, waiting for a worker of the "
                                                    r"pool"):
            await runner.steer(queued, "a note")
        worker = pool.worker()
        assert (await runner.wait(queued, 60, until_done=True)).status == "completed"
        with pytest.raises(SteerRefusedError, match=r"is completed, not running: .* "
                                                    r"\(continue_session"):
            await runner.steer(queued, "a note")
        held = (await runner.start(RequestRecord(question="hold this one"), team)).session_id
        await votes.arrived(3)
        worker.send_signal(signal.SIGKILL)  # its record still says it runs the session
        worker.wait()
        with pytest.raises(SteerRefusedError, match=r"no worker took the note for session "
                                                    rf"{held} within 5 s \(its status names "
                                                    r"worker .*#\d+\)"):
            await runner.steer(held, "a note")
        votes.release()
    assert events_of(home, queued, "steered") == events_of(home, held, "steered") == []


async def test_the_note_rate_limit_holds_through_the_pool(
        pool: Pool, home: Path, front_ends: Any) -> None:
    votes = HeldVotes("a", "b", "c")
    with ScriptedServer(votes) as server:
        starter, steerer = await front_ends(), await front_ends()
        pool.worker()
        sid = (await starter.start(ASKED, team_for(server, **SLOW_CALLS))).session_id
        await votes.arrived(3)
        for i in range(NOTES_PER_MINUTE):
            assert await steerer.steer(sid, f"note {i}") == 0
        with pytest.raises(SteerRefusedError, match=rf"{NOTES_PER_MINUTE} notes in the last "
                                                    r"minute is the most a run takes; send "
                                                    r"this one in \d+ s"):
            await starter.steer(sid, "one too many")  # counted on the worker, not here
        votes.release()
        assert (await starter.wait(sid, 60, until_done=True)).status == "completed"
    assert [e["detail"] for e in events_of(home, sid, "steered")] == [
        f"note {i}" for i in range(NOTES_PER_MINUTE)]


def long_answer(model: str) -> str:
    return f"zq-{model} " + " ".join(f"w{i}" for i in range(40))


def slow_answers(req: ChatRequest) -> Reply:
    """Long answers, distinct per model (streamed a few characters at a time)."""
    if req.vote_labels or req.is_final or req.is_check:
        return agree(req)
    return answer(long_answer(req.model))


def redis_values(url: str) -> list[bytes]:
    """Every value Redis holds, whatever its type: strings, hashes, lists, sets, streams."""
    redis: Any = Redis.from_url(url)  # redis-py's types do not follow the key's type
    values: list[bytes] = []
    for key in redis.scan_iter():
        kind = redis.type(key)
        if kind == b"string":
            values.append(redis.get(key) or b"")
        elif kind == b"hash":
            values += [k + b"=" + v for k, v in redis.hgetall(key).items()]
        elif kind == b"list":
            values += redis.lrange(key, 0, -1)
        elif kind in (b"set", b"zset"):
            values += list(redis.smembers(key) if kind == b"set" else redis.zrange(key, 0, -1))
        elif kind == b"stream":
            values += [b"".join(k + v for k, v in fields.items())
                       for _, fields in redis.xrange(key)]
    return values


async def test_drafts_reach_a_front_end_s_status_and_watch_and_never_a_key(
        pool: Pool, home: Path, front_ends: Any) -> None:
    with ScriptedServer(slow_answers, chunk_chars=4, chunk_delay_s=0.05) as server:
        starter, watcher = await front_ends(), await front_ends()
        pool.worker()
        sid = (await starter.start(ASKED, team_for(server, **SLOW_CALLS))).session_id
        seen: tuple[str, Draft] | None = None
        last: StatusRecord | None = None
        revisions = []
        async for status in watcher.watch(sid):
            revisions.append(status.drafts_revision)
            writing = [(aid, a.draft) for aid, a in status.agents.items()
                       if a.draft is not None and a.draft.purpose is CallPurpose.ANSWER
                       and a.answers == 0 and len(a.draft.text) >= 12]
            if seen is None and writing:
                seen = writing[0]
                # While it streams: in this front end's status too, and in no Redis key.
                aid, draft = seen
                shown = (await watcher.status(sid)).agents[aid].draft
                assert shown is not None and shown.text.startswith(draft.text[:12])
                values = await asyncio.to_thread(redis_values, pool.url)
                assert values and not [v for v in values if draft.text.encode() in v]
            last = status
    assert seen is not None, "no draft was seen while the answers streamed"
    aid, draft = seen
    full = json.dumps({"content": long_answer(aid.removeprefix("agent_"))})
    assert draft.text in full and draft.tokens > 0 and draft.chars >= len(draft.text)
    assert max(revisions) > 0
    assert last is not None and last.done and last.status == "completed"
    assert all(a.draft is None for a in last.agents.values())
    assert all(a.draft is None for a in (await starter.status(sid)).agents.values())
    assert sid not in watcher.drafts and sid not in starter.drafts, "ended: forgotten"
    # Nothing of a draft was ever written: the record has the answers, which hold every
    # draft's text, but no draft field; Redis holds no value with one.
    assert not [v for v in await asyncio.to_thread(redis_values, pool.url)
                if b'"draft"' in v or b'"drafts"' in v]
    for name in ("status.json", "events.jsonl", "result.json"):
        assert '"draft"' not in (home / "sessions" / sid / name).read_text()


def drafts_message(sid: str, worker: str, text: str = "well-formed", *,
                   agents: dict[str, Any] | None = None, inner: str | None = None,
                   **extra: Any) -> str:
    draft = {"purpose": "evaluate", "text": text, "chars": len(text), "tokens": 3,
             "first_token_s": 0.1, "elapsed_s": 0.5}
    body = {"session_id": inner or sid, "worker": worker, "revision": 7,
            "agents": agents if agents is not None else {"agent_a": draft}, **extra}
    return compact({"sid": sid, "drafts": body})


def compact(message: Any) -> str:
    """JSON as the workers publish it (the front end reads the session from the envelope)."""
    return json.dumps(message, separators=(",", ":"))


async def test_hostile_messages_on_the_live_and_steer_channels_are_ignored(
        pool: Pool, home: Path, front_ends: Any) -> None:
    votes = HeldVotes("a", "b", "c")
    with ScriptedServer(votes) as server:
        runner = await front_ends()
        worker = pool.worker()
        sid = (await runner.start(ASKED, team_for(server, **SLOW_CALLS))).session_id
        await votes.arrived(3)
        status = await runner.status(sid)
        assert status.worker is not None
        redis = Redis.from_url(pool.url)

        def shown() -> str | None:
            draft = runner.drafts.merged(status).agents["agent_a"].draft
            return draft.text if draft is not None else None

        # Drafts from a worker that does not run the session are kept but never shown; each
        # message after it, were it taken, would be (they name the true worker). A
        # well-formed message for another session marks the end.
        hostile: list[str | bytes] = [
            drafts_message(sid, "elsewhere#1"),
            b"\xff\xfe", b"not json", f'{{"sid":"{sid}","drafts":'.encode() + b"[" * 100_000,
            drafts_message(sid, status.worker, "x" * (DRAFT_CHARS + 1)),
            drafts_message(sid, status.worker, inner=new_session_id()),
            drafts_message(sid, status.worker, agents={f"agent_{i}": {} for i in range(500)}),
            drafts_message(sid, status.worker, revision=-1),
            drafts_message(sid, status.worker, extra="field"),
            drafts_message("../../etc/passwd", status.worker),
            compact({"sid": sid, "drafts": "agent_a"}),
        ]
        for message in hostile:
            redis.publish("massgen:live", message)
        marker = new_session_id()
        redis.publish("massgen:live", drafts_message(marker, "w#1"))
        await until(lambda: marker in runner.drafts, "the front end stopped hearing")
        assert shown() is None
        # The positive control: the same message, well-formed, is shown (anyone who can
        # write to Redis can publish it, as they can a status).
        redis.publish("massgen:live", drafts_message(sid, status.worker, "a forged draft"))
        await until(lambda: shown() == "a forged draft", "a well-formed message was not heard")
        # A flood of sessions costs a bounded memory.
        for _ in range(2 * drafts.MAX_SESSIONS):
            redis.publish("massgen:live", drafts_message(new_session_id(), "w#1"))
        last = new_session_id()
        redis.publish("massgen:live", drafts_message(last, "w#1"))
        await until(lambda: last in runner.drafts, "the flood was not heard")
        assert len(runner.drafts) == drafts.MAX_SESSIONS

        # The steer channel: garbage is dropped, and one request delivered twice is applied
        # once (the second delivery is a duplicate, whoever sends it).
        steer_garbage: list[str | bytes] = [b"\xff\xfe", b"[" * 100_000, json.dumps(
            {"sid": "../../x", "id": "0" * 32, "note": "n"}), json.dumps(
            {"sid": sid, "id": "not-hex", "note": "n"}), json.dumps(
            {"sid": sid, "id": "1" * 32, "note": "n" * 5_000})]
        for message in steer_garbage:
            redis.publish("massgen:steer", message)
        twice = json.dumps({"sid": sid, "id": "2" * 32, "note": "delivered twice"})
        assert redis.publish("massgen:steer", twice) == redis.publish("massgen:steer", twice) == 1
        popped = redis.blpop(["massgen:steer-reply:" + "2" * 32], timeout=10)
        assert popped is not None and json.loads(popped[1]) == {
            "ok": True, "message": "", "cleared": 0}
        assert await runner.steer(sid, "through the front end") == 0  # still serving
        votes.release()
        assert (await runner.wait(sid, 60, until_done=True)).status == "completed"
    assert worker.poll() is None
    assert [e["detail"] for e in events_of(home, sid, "steered")] == [
        "delivered twice", "through the front end"]
    text = logs(pool)
    assert text.count("dropped a steering request") == len(steer_garbage), text[-3000:]
    assert "Traceback" not in text and len(max(text.splitlines(), key=len)) < 2000
    assert not re.search(r"subscription to \S+ lost", text)


async def test_a_pool_run_records_what_was_asked_as_a_local_run_does(
        pool: Pool, home: Path, tmp_path: Path, front_ends: Any) -> None:
    """Both executors record the request the door built, field for field: the config file
    of a team with inline keys included (the pool dropped it)."""
    team = team_for(ScriptedProvider(agree))
    asked = RequestRecord(
        question="What is 6*7?", context="the context", parent_session_id=new_session_id(),
        notes=["a note"], config_file=ConfigFile(path=str(tmp_path / "team.yaml"),
                                                 sha256="0" * 64))
    local_store = SessionStore(tmp_path / "local")
    local = LocalExecutor(local_store, ScriptedProvider(agree), drafts=False)
    ran = await local.start(asked, team)
    await ran.task
    queued = await (await front_ends()).start(asked, team)
    recorded = SessionStore(home).read_request(queued.session_id)
    assert recorded == local_store.read_request(ran.session_id) == asked
    assert queued.notes == ran.notes == ["a note"]
