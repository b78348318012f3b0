"""A wait never outlasts its run (issue 33).

Every wait goes through :func:`massgen_mcp.executors.waiting.wait_for_status`. A lost wake-up
shows as a call that sleeps to its timeout (30 s) while its run took milliseconds, so these
tests bound the *maximum* call time far below the timeout: the bound is about correctness,
not speed. Runs are back to back through real MCP clients, with a scripted provider that
answers at once, and hosts that ask for progress (which is where a waiter yields mid-wait).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from fastmcp import Client
from mcp import Client as SdkClient
from mcp.client.stdio import StdioServerParameters

from massgen_mcp.core.records import Phase
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.executors.waiting import ChangeSignal, wait_for_status
from massgen_mcp.testing.scripted import ScriptedServer, agree
from tests.helpers import Scripted
from tests.servers import models_for, server_env

WAIT_S = 30
BOUND_S = 10.0  # a lost wake-up costs the whole WAIT_S; a run here takes well under 1 s


def stdio_server(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "massgen_mcp"],
                                 env=server_env(home))


async def _ignore_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


async def warm_up(client: SdkClient, server: ScriptedServer) -> None:
    """One run first, unmeasured: the server imports litellm for its first run (seconds of
    CPU, more on a busy machine), which is not what the bound is about."""
    await client.call_tool("run_consensus", {"question": "Warm up?",
                                             "models": models_for(server), "wait_s": WAIT_S})


@pytest.mark.slow
async def test_run_consensus_wait_returns_when_the_run_ends(scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    durations: list[float] = []
    async with SdkClient(stdio_server(home), mode="legacy") as client:
        await warm_up(client, server)
        for i in range(200):
            began = time.monotonic()
            started = await client.call_tool(
                "run_consensus", {"question": f"What is {i}*7?", "models": models_for(server),
                                  "wait_s": WAIT_S},
                progress_callback=_ignore_progress)
            durations.append(time.monotonic() - began)
            assert started.structured_content["status"] == "completed", started
    slowest = sorted(durations)[-5:]
    assert max(durations) < BOUND_S, f"slowest calls (s): {slowest}"


@pytest.mark.slow
async def test_get_status_wait_returns_when_the_run_moves(scripted: Scripted, home: Path) -> None:
    """Each ``get_status(wait_s, until="change", after_revision)`` returns at the next
    change, and the run moves on its own, so every wait has something to wake it."""
    server = scripted(agree)
    durations: list[float] = []
    async with SdkClient(stdio_server(home), mode="legacy") as client:
        await warm_up(client, server)
        for i in range(60):
            started = await client.call_tool(
                "run_consensus", {"question": f"What is {i}*6?", "models": models_for(server)})
            sid = started.structured_content["session_id"]
            revision = 0
            while True:
                began = time.monotonic()
                got = await client.call_tool("get_status", {
                    "session_id": sid, "wait_s": WAIT_S, "until": "change",
                    "after_revision": revision})
                durations.append(time.monotonic() - began)
                status = got.structured_content
                if status["done"]:
                    break
                assert status["revision"] != revision
                revision = status["revision"]
    assert max(durations) < BOUND_S, f"slowest calls (s): {sorted(durations)[-5:]}"


def _status(revision: int, phase: Phase = Phase.ANSWERING, status: str = "running"
            ) -> StatusRecord:
    return StatusRecord.model_validate({
        "session_id": "s", "status": status, "phase": phase, "revision": revision,
        "question": "q", "started_at": 0.0, "updated_at": 0.0, "agents": {}})


async def test_a_change_while_the_waiter_reports_progress_wakes_it() -> None:
    """The shape of the bug, in one step: the run moves (and ends) while the waiter is
    inside ``on_change``; the wait must see it at once, not sleep to its timeout."""
    signal = ChangeSignal()
    state = {"status": _status(1), "live": True}

    async def read() -> tuple[StatusRecord, bool]:
        return state["status"], bool(state["live"])  # type: ignore[return-value]

    async def on_change(status: StatusRecord) -> None:
        state["status"] = _status(3, Phase.DONE, "completed")
        state["live"] = False
        signal.pulse()  # the run ended while progress was being sent
        await asyncio.sleep(0)

    async def move() -> None:
        state["status"] = _status(2)
        signal.pulse()

    waiting = asyncio.create_task(wait_for_status(read, signal, WAIT_S, until_done=True,
                                                  on_change=on_change))
    await asyncio.sleep(0)  # let the waiter take its first look
    await move()
    status = await asyncio.wait_for(waiting, BOUND_S)
    assert status.done


@pytest.mark.slow
async def test_a_pool_run_followed_from_another_front_end(scripted: Scripted, tmp_path: Path,
                                                          home: Path) -> None:
    """Runs queued through one front end and waited on through another: the live channel
    alone must wake every waiter (the periodic re-read is pushed out of reach), whether it
    waits for the end (one call) or for each change."""
    from tests.pool_harness import REDIS, Pool, models

    if REDIS is None:
        pytest.skip("redis-server is not installed")
    server = scripted(agree)
    pool = Pool(tmp_path, home)
    pool.extra_env["MASSGEN_POOL_RECHECK_S"] = "600"
    try:
        front_1, front_2 = pool.front_end(), pool.front_end()
        pool.worker()
        pool.wait_workers(1)
        durations: list[float] = []
        async with Client(f"{front_1}/mcp") as one, Client(
                f"{front_2}/mcp", progress_handler=_ignore_progress) as two:
            # One run first, unmeasured: the worker loads litellm for its first run.
            await one.call_tool("run_consensus", {"question": "Warm up?",
                                                  "models": models(server), "wait_s": WAIT_S})
            for i in range(15):
                began = time.monotonic()
                done = await two.call_tool("run_consensus", {
                    "question": f"What is {i}*5?", "models": models(server), "wait_s": WAIT_S})
                durations.append(time.monotonic() - began)
                assert done.structured_content["status"] == "completed"
            for i in range(15):
                started = await one.call_tool("run_consensus", {
                    "question": f"What is {i}*3?", "models": models(server)})
                began = time.monotonic()
                ended = (await two.call_tool("get_status", {
                    "session_id": started.structured_content["session_id"],
                    "wait_s": WAIT_S})).structured_content
                durations.append(time.monotonic() - began)
                assert ended["status"] == "completed"  # one call, at the end
            for i in range(15):
                started = await one.call_tool("run_consensus", {
                    "question": f"What is {i}*4?", "models": models(server)})
                sid = started.structured_content["session_id"]
                revision = 0
                while True:
                    began = time.monotonic()
                    got = (await two.call_tool("get_status", {
                        "session_id": sid, "wait_s": WAIT_S, "until": "change",
                        "after_revision": revision})).structured_content
                    durations.append(time.monotonic() - began)
                    if got["done"]:
                        break
                    revision = got["revision"]
    finally:
        pool.close()
    assert max(durations) < BOUND_S, f"slowest calls (s): {sorted(durations)[-5:]}"
