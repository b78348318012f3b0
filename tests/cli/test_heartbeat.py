"""Without a terminal (a CI log, a pipe) the command line's progress says something at least
every 10 s: a slow member must not look like a hung command. The real engine runs in virtual
time (:mod:`massgen_mcp.testing.virtual_time`) with members that take 25 s a call, and the
CLI's own progress writer follows it; the gaps are measured on the loop's clock."""

from __future__ import annotations

import asyncio
import itertools

from massgen_mcp.cli.run import HEARTBEAT_S, Heartbeat
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing import virtual_time
from massgen_mcp.testing.scripted import Latency, ScriptedProvider, agree
from tests.helpers import team_for


def test_a_line_at_least_every_10_s_while_members_are_slow() -> None:
    said: list[tuple[float, str]] = []

    async def follow() -> float:
        loop = asyncio.get_running_loop()
        provider = ScriptedProvider(agree, latency=Latency(25.0, 0.0))
        runner = LocalExecutor(SessionStore(), provider, drafts=False)
        heart = Heartbeat(lambda line: said.append((loop.time(), line)))
        runner.add_event_listener(heart.event)
        team = team_for(provider, call_timeout_s=120.0)
        run = await runner.start(RequestRecord(question="What is 6*7?"), team)
        beat = loop.create_task(heart.beat(lambda: runner.status(run.session_id)))
        started = loop.time()
        await run.task
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        return loop.time() - started

    took = virtual_time.run(follow())
    assert took >= 74.0  # answers, votes and the final answer: three 25 s calls at least
    times = [0.0] + [t for t, _ in said]
    assert max(b - a for a, b in itertools.pairwise(times)) <= HEARTBEAT_S + 1e-6
    waiting = [line for _, line in said if "still running" in line]
    assert waiting[0].endswith("] still running, answering: waiting on agent_a, agent_b, "
                               "agent_c")
    assert len(waiting) >= 6  # two in each 25 s call
