"""Fast under real latency: the decision rule (decide: majority|all), the first-round quorum,
and the turns a decision overtakes. Real engine, litellm and HTTP to the scripted server.

A slow model here is a scripted reply with a long ``delay_s`` (30 s, far beyond any test):
the run must *not* wait for it, and the server must see the call hung up. Where the order of
two things matters, the scripted models wait on events the run itself emits, never on time.
"""

from __future__ import annotations

import asyncio
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from massgen_mcp.consensus.pace import late_at, quorum
from massgen_mcp.consensus.state import Coordination
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import Refusal
from massgen_mcp.core.records import Decision, Event, EventType, RequestRecord, RunStatus
from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.base import CallContext, Completion
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.render.html import render_report
from massgen_mcp.render.text import coordination_table, describe_event
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Latency,
    Reply,
    ScriptedProvider,
    ScriptedServer,
    agree,
    answer,
    text,
    vote,
)
from tests.helpers import NEVER_S, Scripted, by_model, run_team, team_for


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events scripted models wait on; all set at the end so no server thread lingers."""
    made: list[threading.Event] = []
    yield made
    for gate in made:
        gate.set()


def gate(gates: list[threading.Event]) -> threading.Event:
    made = threading.Event()
    gates.append(made)
    return made


def for_a(req: ChatRequest, delay_s: float = 0.0) -> Reply:
    """Vote for agent a's answer (every agent agrees on one answer, as a majority does)."""
    if req.is_final:
        return text("Final: 42.")
    [label] = [lb for lb, content in req.answers.items() if "from a " in content]
    return vote(label, "a's answer is right", delay_s=delay_s)


def no_agent_tasks() -> bool:
    return not [t for t in asyncio.all_tasks() if ":agent_" in t.get_name()]


# -- the decision rule ------------------------------------------------------------------------

@pytest.mark.parametrize("pending", ["vote", "new answer"])
async def test_a_majority_decides_and_the_turn_in_flight_is_cancelled(
        scripted: Scripted, pending: str) -> None:
    """a and b vote for a's answer: 2 of 3 is a strict majority, so c's turn (a vote or a
    better answer, 30 s away) is cancelled: recorded, counted, hung up, no task left."""
    def c_policy(req: ChatRequest) -> Reply:
        if not req.vote_labels or req.is_final:
            return agree(req)
        if pending == "vote":
            return for_a(req, delay_s=NEVER_S)
        return answer("C's better answer: 42, since 6*7=42.", delay_s=NEVER_S)

    def ab_policy(req: ChatRequest) -> Reply:
        return for_a(req) if req.vote_labels or req.is_final else agree(req)

    server = scripted(by_model(ab_policy, c=c_policy))
    out = await run_team(team_for(server, late_factor=100))
    r = out.result
    assert r["status"] == "completed" and r["decided_by"] == "majority"
    assert r["winner"]["agent_id"] == "agent_a" and r["tally"][r["winner"]["label"]] == 2
    [consensus] = out.events("consensus")
    assert consensus["reason"] == "majority"
    [cut] = out.events("turn_cancelled")
    assert cut["agent_id"] == "agent_c" and cut["purpose"] == "evaluate" and cut["count"] == 1
    assert cut["reason"] == "decided: majority" and cut["seq"] > consensus["seq"]
    assert not [e for e in out.events("answer") if e["agent_id"] == "agent_c"
                and e["revision"] == 2], "the pending new answer never joined"
    assert r["usage"]["calls"] == 3 + 3 + 1 and r["usage"]["cancelled_calls"] == 1
    assert r["agents"]["agent_c"]["usage"]["cancelled_calls"] == 1
    assert no_agent_tasks()
    [c_review] = [t for t in server.timings if t.request.model == "c" and t.request.vote_labels]
    assert await asyncio.to_thread(c_review.over.wait, 10)
    assert c_review.ended is None, "the server saw the call hung up, and replied to nobody"
    table = coordination_table([Event.model_validate(e) for e in out.events()],
                               ["agent_a", "agent_b", "agent_c"])
    assert "CUT" in table.splitlines()[4]


async def test_decide_all_is_massgen_s_rule_and_waits_for_every_vote(
        scripted: Scripted, gates: list[threading.Event]) -> None:
    """The same majority under ``decide: all`` decides nothing: c's vote, released only once
    a and b have voted, is awaited and counts; no turn is cancelled."""
    votes_in = gate(gates)

    def c_policy(req: ChatRequest) -> Reply:
        if req.vote_labels:
            votes_in.wait(NEVER_S)
            return for_a(req)
        return agree(req)

    seen: list[str] = []

    def on_event(_sid: str, event: dict[str, Any]) -> None:
        if event["type"] == "vote":
            seen.append(event["agent_id"])
            if len(seen) == 2:
                votes_in.set()

    def ab_policy(req: ChatRequest) -> Reply:
        return for_a(req) if req.vote_labels or req.is_final else agree(req)

    server = scripted(by_model(ab_policy, c=c_policy))
    out = await run_team(team_for(server, decide="all"), listener=on_event)
    r = out.result
    assert r["decided_by"] == "all_voted" and r["tally"][r["winner"]["label"]] == 3
    assert seen[-1] == "agent_c" and r["usage"]["calls"] == 7
    assert r["usage"]["cancelled_calls"] == 0 and not out.events("turn_cancelled")
    assert out.events("consensus")[0]["reason"] == "all_voted"


async def test_decide_all_waits_for_a_straggler_s_first_answer(scripted: Scripted) -> None:
    """MassGen's rule has no quorum: a first answer 20x slower than its peers' is awaited,
    and every vote is cast on all three answers."""
    def c_policy(req: ChatRequest) -> Reply:
        reply = agree(req)
        if req.call_index == 0:
            reply.delay_s = 0.4
        return reply

    server = scripted(by_model(agree, c=c_policy), latency_s=0.02)
    out = await run_team(team_for(server, decide="all"))
    assert out.result["decided_by"] == "all_voted" and not out.events("quorum")
    assert all(len(q.answers) == 3 for q in server.requests if q.vote_labels)


# -- the first-round quorum -------------------------------------------------------------------

async def test_a_straggler_joins_late_under_the_protocol_s_rules(
        scripted: Scripted, gates: list[threading.Event]) -> None:
    """c is late: review opens for a and b (QUORUM, late=[agent_c]); c's first answer, written
    without seeing theirs, joins when it comes, and a's and b's turns, deciding on a view
    without it, are not awaited: hung up, counted, and started again on a view with it."""
    quorum_seen = gate(gates)
    deciding = {"a": gate(gates), "b": gate(gates)}

    def c_policy(req: ChatRequest) -> Reply:
        if req.call_index == 0:
            quorum_seen.wait(NEVER_S)
            for started in deciding.values():
                started.wait(NEVER_S)  # a and b are deciding without c's answer
            return agree(req)
        return for_a(req, delay_s=NEVER_S)  # then too slow to matter

    def ab_policy(req: ChatRequest) -> Reply:
        if req.vote_labels and req.call_index == 1:  # on a view without c's answer
            deciding[req.model].set()
            return for_a(req, delay_s=NEVER_S)  # never waited for
        return for_a(req) if req.vote_labels else agree(req)

    statuses: list[Any] = []

    def on_event(_sid: str, event: dict[str, Any]) -> None:
        if event["type"] == "quorum":
            quorum_seen.set()

    server = scripted(by_model(ab_policy, c=c_policy))
    store = SessionStore()
    runner = LocalExecutor(store, ProviderRouter())
    runner.add_event_listener(lambda sid, e: on_event(sid, e.as_dict()))
    runner.add_status_listener(statuses.append)
    run = await runner.start(RequestRecord(question="What is 6*7?"), team_for(server))
    result = await run.task
    events = store.read_events(run.session_id)
    kinds = [e.type for e in events]
    [q] = [e for e in events if e.type is EventType.QUORUM]
    assert q.late == ["agent_c"] and "2 of 3 answered" in (q.detail or "")
    assert kinds.index(EventType.QUORUM) < max(
        i for i, e in enumerate(events) if e.type is EventType.ANSWER)
    assert any(s.late == ["agent_c"] and s.phase == "voting" for s in statuses)
    [c_label] = [e.label for e in events if e.type is EventType.ANSWER
                 and e.agent_id == "agent_c"]
    restarted = [e for e in events if e.type is EventType.TURN_RESTARTED]
    assert sorted((e.agent_id, e.purpose, e.count, e.by) for e in restarted) == [
        ("agent_a", "evaluate", 1, c_label), ("agent_b", "evaluate", 1, c_label)]
    assert kinds.count(EventType.VOTE_DISCARDED) == 0
    for model in "ab":
        first, again = [t for t in server.timings if t.request.model == model
                        and t.request.vote_labels][:2]
        assert await asyncio.to_thread(first.over.wait, 10)
        assert first.ended is None, "the server saw the outdated call hung up"
        assert c_label not in first.request.vote_labels and c_label in again.request.vote_labels
    assert result.usage.cancelled_calls == 3  # a's and b's restarts, c's vote the decision cut
    [c_first] = [t.request for t in server.timings if t.request.model == "c"][:1]
    assert "<answers>" not in c_first.user, "c's first draft saw no peer's answer"
    assert result.status is RunStatus.COMPLETED and result.decided_by is Decision.MAJORITY
    assert len(result.answers) == 3 and result.winner and result.winner.agent_id == "agent_a"
    line = describe_event(q)
    assert line is not None and "without agent_c" in line
    line = describe_event(restarted[0])
    assert line is not None and f"new answer {c_label} arrived" in line


async def test_a_straggler_the_decision_leaves_behind(scripted: Scripted) -> None:
    """c's first answer would take 30 s: review opens without it, a and b decide, and c's
    answer turn is cancelled rather than awaited."""
    def c_policy(req: ChatRequest) -> Reply:
        reply = agree(req)
        reply.delay_s = NEVER_S
        return reply

    server = scripted(by_model(lambda r: for_a(r) if r.vote_labels or r.is_final
                               else agree(r), c=c_policy))
    out = await run_team(team_for(server))
    r = out.result
    assert r["status"] == "completed" and r["decided_by"] == "majority"
    assert out.events("quorum")[0]["late"] == ["agent_c"]
    [cut] = out.events("turn_cancelled")
    assert cut["agent_id"] == "agent_c" and cut["purpose"] == "answer"
    assert r["agents"]["agent_c"]["answers"] == 0 and r["usage"]["calls"] == 3 + 2 + 1
    record = out.store.read_record(r["session_id"])
    page = render_report(record)
    assert "a majority decided" in page and "review began without agent_c (late)" in page


async def test_resume_of_a_run_that_ended_early_asks_only_for_the_final_answer(
        scripted: Scripted, tmp_path: Path) -> None:
    """Stopped while the winner writes the final answer (after a majority cut c's vote): the
    resumed run replays the decision and makes one call, the final answer."""
    final_asked, resumed = threading.Event(), threading.Event()

    def policy(req: ChatRequest) -> Reply:
        if req.is_final:
            final_asked.set()
            return text("Final: 42.", delay_s=0.0 if resumed.is_set() else NEVER_S)
        if req.vote_labels:
            return for_a(req, delay_s=NEVER_S if req.model == "c" else 0.0)
        return agree(req)

    server = scripted(policy)
    store = SessionStore(tmp_path)
    team = team_for(server, late_factor=100)
    runner = LocalExecutor(store, ProviderRouter())
    live = await runner.start(RequestRecord(question="What is 6*7?"), team)
    assert await asyncio.to_thread(final_asked.wait, NEVER_S)
    await runner.aclose(interrupt=True)  # the server stops mid-final
    assert store.read_status(live.session_id).status is RunStatus.INTERRUPTED
    before = len(server.requests)

    resumed.set()
    again = await LocalExecutor(store, ProviderRouter()).resume(live.session_id, team)
    result = await again.task
    asked = server.requests[before:]
    assert [q.is_final for q in asked] == [True], "only the final answer is asked again"
    assert result.status is RunStatus.COMPLETED and result.decided_by is Decision.MAJORITY
    assert result.final_answer == "Final: 42."
    assert result.usage.cancelled_calls >= 1, "c's cut vote is still counted after resume"
    kinds = [e.type for e in store.read_events(live.session_id)]
    assert kinds.count(EventType.VOTE) == 2 and EventType.RESUMED in kinds


# -- the rules as plain functions -------------------------------------------------------------

def test_the_quorum_is_a_strict_majority_and_lateness_is_relative() -> None:
    assert [quorum(n) for n in (1, 2, 3, 4, 5, 8)] == [1, 2, 2, 3, 3, 5]
    assert late_at([0.4, 0.6], live=5, late_factor=2) is None, "2 of 5 is no quorum"
    assert late_at([0.4, 0.5, 0.9], live=5, late_factor=2) == pytest.approx(1.0)
    assert late_at([40.0, 50.0, 90.0], live=5, late_factor=2) == pytest.approx(100.0)
    assert late_at([], live=1, late_factor=2) is None


def test_decision_rules_of_the_state_machine() -> None:
    ids = ["a", "b", "c", "d"]
    coord = Coordination(ids, max_answers=3, seed="s", decide="majority")
    for aid in ids[:3]:
        coord.add_answer(aid, f"answer of {aid}")
    assert coord.decision() is None and not coord.reviewing(), "round one is not over"
    coord.open_review()
    assert coord.late() == ["d"] and coord.needs_turn("a") and coord.needs_turn("d")
    assert coord.view_for("d").first_round and not coord.view_for("d").answers
    label = coord.agents["a"].current.label  # type: ignore[union-attr]
    coord.add_vote("a", label, "r", coord.version)
    coord.add_vote("b", label, "r", coord.version)
    assert coord.decision() is None, "2 of 4 live agents is no strict majority"
    coord.drop("d", "gone")
    assert coord.decision() is Decision.MAJORITY, "2 of 3 live agents is"
    coord.add_answer("c", "a better answer")
    assert coord.decision() is None, "a new answer clears every vote"

    every = Coordination(ids[:3], max_answers=3, seed="s", decide="all")
    for aid in ids[:3]:
        every.add_answer(aid, f"answer of {aid}")
    first = every.agents["a"].current.label  # type: ignore[union-attr]
    every.add_vote("a", first, "r", every.version)
    every.add_vote("b", first, "r", every.version)
    assert every.decision() is None, "MassGen's rule waits for every vote"
    every.add_vote("c", first, "r", every.version)
    assert every.decision() is Decision.ALL_VOTED


def test_scripted_latency_is_seeded_per_model_and_call() -> None:
    latency = Latency(0.5, 0.5, seed=3, slower={"slow": 3.0})
    assert latency.draw("m", 0) == latency.draw("m", 0) != latency.draw("m", 1)
    assert latency.draw("slow", 0) == pytest.approx(3 * Latency(0.5, 0.5, seed=3).draw("slow", 0))
    draws = sorted(latency.draw("m", n) for n in range(2001))
    assert 0.45 < draws[1000] < 0.55, "the median is the median asked for"


def test_the_scripted_server_takes_a_whole_team_s_connections_at_once() -> None:
    """Sixteen connections opened before the server accepts any all complete their handshake.
    (The listen backlog was socketserver's 5: an 8-agent team's extra connections waited a
    second for the kernel's SYN retry and read as stragglers three times as slow as their
    peers.) Not yet serving, the server accepts nothing: only the kernel's queue is tested."""
    server = ScriptedServer(agree)
    sockets = [socket.socket() for _ in range(16)]
    try:
        for sock in sockets:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", server.port))
        _, writable, _ = select.select([], sockets, [], 0.5)
        assert len(writable) == 16
        assert all(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
        server.close()


def test_scripted_server_times_each_call() -> None:
    with ScriptedServer(agree, latency=Latency(0.02, 0.1)) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(server.base_url + "/chat/completions", json=body).status_code == 200
        [timing] = server.timings
        # The reply reaches the client a moment before the server's thread marks it over.
        assert timing.over.wait(10) and timing.ended is not None
        assert timing.ended - timing.started >= 0.01


async def test_a_run_cancelled_while_restarting_turns_lets_them_clean_up() -> None:
    """The run is cancelled while it waits for the restarted turns to stop (their calls
    take 0.3 s to clean up, as a coding CLI being killed and reaped does): each turn is
    cancelled once and finishes its cleanup before the run ends (a second cancel cut it
    short, and a CLI's process tree could outlive the run)."""
    cleanup: list[tuple[str, str]] = []
    cancelling: list[asyncio.Task[bool]] = []

    def policy(req: ChatRequest) -> Reply:
        if req.model == "c" and not req.vote_labels:
            return answer("C says 42", delay_s=1.0)  # late: review opens without it
        if not req.vote_labels:
            return answer(f"{req.model} says 42")
        return vote(req.vote_labels[0], "first", delay_s=NEVER_S if len(req.answers) == 2
                    else 0.0)  # a's and b's first votes: restarted when c's answer joins

    inner = ScriptedProvider(policy)
    runner = LocalExecutor(SessionStore(), _SlowToStop(inner, cleanup, cancelling))
    _SlowToStop.runner = runner
    team = build_team({"agents": [{"id": f"agent_{m}", "model": f"openai/{m}"} for m in "abc"],
                       "options": {"late_factor": 1.0}})
    live = await runner.start(RequestRecord(question="What is 6*7?"), team)
    _SlowToStop.session_id = live.session_id
    await asyncio.gather(live.task, return_exceptions=True)
    assert cancelling, "no turn was restarted"
    assert sorted(cleanup) == [("agent_a", "done"), ("agent_b", "done")]
    assert (await runner.wait(live.session_id, 0)).status == "cancelled"


class _SlowToStop:
    """A provider whose cancelled call takes 0.3 s to stop; the first such cancel (a
    restart) also cancels the whole run."""

    runner: LocalExecutor
    session_id: str

    def __init__(self, inner: ScriptedProvider, cleanup: list[tuple[str, str]],
                 cancelling: list[asyncio.Task[bool]]) -> None:
        self.inner, self.cleanup, self.cancelling = inner, cleanup, cancelling

    async def problems(self, team: TeamConfig, *, probe_base_urls: bool = True
                       ) -> list[Refusal]:
        return await self.inner.problems(team, probe_base_urls=probe_base_urls)

    async def complete(self, agent: AgentSpec, messages: list[dict[str, Any]], *,
                       tools: list[dict[str, Any]] | None, timeout_s: float,
                       context: CallContext | None = None) -> Completion:
        try:
            return await self.inner.complete(agent, messages, tools=tools,
                                             timeout_s=timeout_s, context=context)
        except asyncio.CancelledError:
            if not self.cancelling:
                self.cancelling.append(asyncio.ensure_future(
                    self.runner.cancel(self.session_id)))
            try:
                await asyncio.sleep(0.3)  # killing and reaping a child, say
                self.cleanup.append((agent.id, "done"))
            except asyncio.CancelledError:
                self.cleanup.append((agent.id, "cut short"))
            raise
