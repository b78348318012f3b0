"""The benchmarks' virtual time (massgen_mcp.testing.virtual_time): the loop's clock jumps to
its next timer, a thread still wakes it, and the real engine's timing rules read that clock,
so a run in virtual time keeps the quorum's arithmetic exactly (bench --only latency_floor)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from pathlib import Path

from massgen_mcp.consensus.pace import late_at
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing import virtual_time
from massgen_mcp.testing.scripted import Latency, ScriptedProvider, converge


def test_an_hour_of_sleep_takes_no_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.gather(asyncio.sleep(3600), asyncio.sleep(1800))
        return loop.time()

    started = time.perf_counter()
    assert virtual_time.run(main()) == 3600
    assert time.perf_counter() - started < 5


def test_a_thread_still_wakes_the_loop() -> None:
    """With no timer due the loop waits for real, so a thread's result arrives; with one due,
    the clock does not run ahead of a thread that is already done."""
    ran_in: list[int] = []

    def work() -> int:
        ran_in.append(threading.get_ident())
        return 7

    async def main() -> tuple[int, float]:
        value = await asyncio.to_thread(work)
        return value, asyncio.get_running_loop().time()

    assert virtual_time.run(main()) == (7, 0.0)
    assert ran_in and ran_in[0] != threading.get_ident()


def test_the_real_engine_opens_review_at_the_quorum_s_exact_time(tmp_path: Path) -> None:
    """Five agents, two of them 20x slower: review opens when the three first answers'
    median times the late factor has passed, to the microsecond of virtual time, and the
    slow agents' first answers are cut when the three others agree (a strict majority)."""
    provider = ScriptedProvider(converge, latency=Latency(1.0, 0.5, seed=3,
                                                          slower={"d": 20.0, "e": 20.0}))
    agents = [{"id": f"agent_{m}", "model": f"openai/{m}"} for m in "abcde"]
    team = build_team({"agents": agents, "options": {"late_factor": 2.0}})

    async def main() -> dict[str, object]:
        store = SessionStore(tmp_path)
        run = await LocalExecutor(store, provider, drafts=False).start(
            RequestRecord(question="Q?"), team)
        result = await run.task
        assert result.status == "completed"
        events = store.read_events(run.session_id)
        [quorum] = [e.as_dict() for e in events if e.type == "quorum"]
        cut = {e.as_dict()["agent_id"]: e.as_dict() for e in events
               if e.type == "turn_cancelled"}
        return {"quorum": quorum, "cut": cut}

    out = virtual_time.run(main())
    first = sorted(t.ended - t.started for t in provider.timings[:5] if t.ended is not None)
    due = late_at(first[:3], 5, 2.0)
    assert due is not None and due == 2.0 * statistics.median(first[:3])
    assert out["quorum"]["late"] == ["agent_d", "agent_e"]  # type: ignore[index]
    assert abs(out["quorum"]["after_s"] - round(due, 3)) < 1e-6  # type: ignore[index]
    assert {agent: cut["purpose"] for agent, cut in out["cut"].items()} == {  # type: ignore[attr-defined]
        "agent_d": "answer", "agent_e": "answer"}
