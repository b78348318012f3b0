"""The engine and the runner with scripted models in process, at the Provider seam.

No litellm and no sockets: :class:`~massgen_mcp.testing.scripted.ScriptedProvider` runs the same
policies as the HTTP server. The end-to-end versions of these paths (through litellm, over
HTTP) live in test_engine.py and test_reliability.py.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import Refusal
from massgen_mcp.core.records import EventType, FinishReason, RequestRecord, RunStatus
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.base import Completion
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Policy,
    Reply,
    ScriptedProvider,
    agree,
    answer,
    error,
    text,
)


def team(models: str = "abc", **options: Any) -> TeamConfig:
    return build_team({"agents": [{"id": f"agent_{m}", "model": f"openai/{m}"} for m in models],
                       "options": {"retry_backoff_s": 0.001, **options}})


async def run(provider: ScriptedProvider, team_: TeamConfig) -> tuple[ResultRecord, SessionStore,
                                                                       LocalExecutor]:
    store = SessionStore()
    runner = LocalExecutor(store, provider)
    live = await runner.start(RequestRecord(question="What is 6*7?"), team_)
    return await live.task, store, runner


async def test_unanimous_run_in_process() -> None:
    provider = ScriptedProvider(agree)
    result, store, runner = await run(provider, team())
    assert result.status is RunStatus.COMPLETED and result.finish_reason is FinishReason.CONSENSUS
    assert result.usage.calls == 7 == sum(provider.calls_by_model().values())
    assert result.presented_by == result.winner.agent_id if result.winner else False
    assert store.read_result(result.session_id) == result, "the record on disk is the result"
    assert runner.runs == {}, "a finished run is forgotten; its record is the truth"
    assert (await runner.status(result.session_id)).status is RunStatus.COMPLETED


async def test_invalid_replies_get_corrective_retries_then_drop() -> None:
    def policy(req: ChatRequest) -> Reply:
        if req.model == "a" and not req.vote_labels and not req.is_retry:
            return text("I think 42.")  # no tool call: corrected, then fine
        if req.model == "c":
            return text("never a tool call")
        return agree(req)

    provider = ScriptedProvider(policy)
    result, store, _ = await run(provider, team())
    events = store.read_events(result.session_id)
    invalid = [e for e in events if e.type is EventType.INVALID_ACTION]
    assert [(e.agent_id, e.attempt) for e in invalid if e.agent_id == "agent_a"] == [
        ("agent_a", 1)]
    assert [e.attempt for e in invalid if e.agent_id == "agent_c"] == [1, 2, 3]
    assert result.agents["agent_c"].dropped_reason == (
        "3 invalid actions in one turn (last: no_action: you did not call a tool.)")
    assert [e.detail for e in invalid if e.agent_id == "agent_c"] == ["never a tool call"] * 3
    assert result.status is RunStatus.COMPLETED
    retried = next(r for r in provider.requests if r.model == "a" and r.is_retry)
    assert retried.messages[-1]["content"].startswith("Invalid action: you did not call a tool.")


async def test_strict_novelty_turns_a_rephrasing_into_a_vote() -> None:
    """Agent b, shown the answers, rephrases agent a's: refused under strict, it votes."""
    def policy(req: ChatRequest) -> Reply:
        if req.model == "b" and req.vote_labels and not req.is_retry:
            first = req.answers[req.label_of("from a")]
            return answer(first.replace("The answer", "Indeed, the answer"))
        return agree(req)

    provider = ScriptedProvider(policy)
    result, store, _ = await run(provider, team(answer_novelty="strict"))
    invalid = [e for e in store.read_events(result.session_id)
               if e.type is EventType.INVALID_ACTION]
    assert [(e.agent_id, e.reason) for e in invalid] == [("agent_b", "not_novel")]
    assert result.status is RunStatus.COMPLETED and len(result.answers) == 3
    assert {v.voter for v in result.votes} == {"agent_a", "agent_b", "agent_c"}


def checker(verdicts: list[str]) -> tuple[Policy, list[ChatRequest]]:
    """agree, except that the final answer's checks answer ``verdicts`` in turn (the last
    one repeats): 'restart' sends it back with feedback."""
    checks: list[ChatRequest] = []

    def policy(req: ChatRequest) -> Reply:
        if req.is_check:
            checks.append(req)
            verdict = verdicts[min(len(checks), len(verdicts)) - 1]
            if verdict == "restart":
                return text('{"verdict": "restart", "feedback": "say which unit the 42 is in"}')
            return text('{"verdict": "accept"}')
        return agree(req)

    return policy, checks


async def test_a_final_answer_sent_back_by_its_check_restarts_the_team_once() -> None:
    policy, checks = checker(["restart", "accept"])
    provider = ScriptedProvider(policy)
    result, store, _ = await run(provider, team(max_orchestration_restarts=2))
    events = store.read_events(result.session_id)
    kinds = [e.type for e in events]
    assert kinds.count(EventType.CONSENSUS) == 2 and kinds.count(EventType.RESTART) == 1
    assert [(e.reason, e.detail) for e in events if e.type is EventType.CHECK] == [
        ("restart", "say which unit the 42 is in"), ("accept", None)]
    assert result.status is RunStatus.COMPLETED and result.finish_reason is FinishReason.CONSENSUS
    # 7 calls, the check, 3 new turns (everyone votes again), the new final, its check.
    assert result.usage.calls == 13 == sum(provider.calls_by_model().values())
    after = [r for r in provider.requests if "<feedback>" in r.user]
    assert len(after) == 3 and "say which unit the 42 is in" in after[0].user
    assert "It answers: What is 6*7?" in checks[0].system  # the checklist, from the question
    assert store.read_status(result.session_id).phase.value == "done"
    from massgen_mcp.render.html import render_report
    from massgen_mcp.render.text import describe_event

    lines = [describe_event(e) for e in events]
    assert any(line and "restart 1: the team goes again" in line for line in lines)
    assert any(line and "checked the final answer: restart: say which unit" in line
               for line in lines)
    page = render_report(store.read_record(result.session_id))
    assert "⟲" in page and "final answer checked" in page


async def test_restarts_stop_at_their_cap() -> None:
    policy, checks = checker(["restart"])
    result, store, _ = await run(ScriptedProvider(policy), team(max_orchestration_restarts=1))
    kinds = [e.type for e in store.read_events(result.session_id)]
    assert kinds.count(EventType.RESTART) == 1 and len(checks) == 1
    assert result.usage.calls == 12 and result.final_answer
    off, none = checker(["restart"])
    result, _, _ = await run(ScriptedProvider(off), team())  # default 0: no check at all
    assert none == [] and result.usage.calls == 7


async def test_budget_stops_the_run_with_the_best_answer() -> None:
    result, _, _ = await run(ScriptedProvider(agree), team(max_total_tokens=300))
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED and result.budget_exceeded
    assert result.status is RunStatus.COMPLETED and result.final_answer


async def test_retryable_errors_are_retried_and_others_drop_the_agent() -> None:
    def policy(req: ChatRequest) -> Reply:
        if req.model == "a" and req.call_index == 0:
            return error(503, "busy")
        if req.model == "b":
            return error(400, "no such model")
        return agree(req)

    result, store, _ = await run(ScriptedProvider(policy), team())
    retries = [e for e in store.read_events(result.session_id) if e.type is EventType.RETRY]
    assert [(e.agent_id, e.status_code) for e in retries] == [("agent_a", 503)]
    assert "no such model" in (result.agents["agent_b"].dropped_reason or "")
    assert result.status is RunStatus.COMPLETED


class Stubborn:
    """A provider whose calls ignore the first cancellation until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def problems(self, team: TeamConfig, *, probe_base_urls: bool = True
                       ) -> list[Refusal]:
        return []

    async def complete(self, agent: AgentSpec, messages: list[dict[str, Any]], *,
                       tools: list[dict[str, Any]] | None, timeout_s: float,
                       context: Any = None) -> Completion:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self.release.wait()
            raise
        raise AssertionError("unreachable")


async def test_aclose_waits_at_most_its_deadline(caplog: pytest.LogCaptureFixture) -> None:
    provider = Stubborn()
    runner = LocalExecutor(SessionStore(), provider)
    live = await runner.start(RequestRecord(question="q"), team("a"))
    await provider.started.wait()
    with caplog.at_level(logging.WARNING):
        await runner.aclose(deadline_s=0.05)
    assert not live.done and "did not stop within 0.05 s" in caplog.text
    provider.release.set()
    await asyncio.gather(live.task, return_exceptions=True)
    status = runner.store.read_status(live.session_id)
    assert status.status is RunStatus.CANCELLED and runner.runs == {}


def test_the_engine_path_does_not_import_litellm(tmp_path: Path) -> None:
    code = f"""
import asyncio, sys
from pathlib import Path
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import build_team
from massgen_mcp.testing.scripted import ScriptedProvider
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.records.store import SessionStore

async def main():
    runner = LocalExecutor(SessionStore(Path({str(tmp_path)!r})), ScriptedProvider())
    team = build_team({{"agents": [{{"id": "a", "model": "openai/a"}}]}})
    live = await runner.start(RequestRecord(question="q"), team)
    print((await live.task).status, "litellm" in sys.modules)

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["completed", "False"]


async def test_resume_replays_answers_and_standing_votes(tmp_path: Path) -> None:
    """A run stopped with every answer in and two votes cast continues with only the
    missing vote and the final answer: no call whose outcome is recorded is made again."""
    class Blocked(ScriptedProvider):
        """Agent c never finishes its vote while ``block`` is set."""

        def __init__(self) -> None:
            super().__init__(agree)
            self.block = True
            self.votes_in = asyncio.Event()
            self.turns: list[tuple[str, bool]] = []  # (agent, is a vote turn)

        async def complete(self, agent: AgentSpec, messages: list[dict[str, Any]],
                           **kwargs: Any) -> Completion:
            voting = kwargs.get("tools") is not None and "vote" in str(kwargs["tools"])
            if voting and agent.id == "agent_c" and self.block:
                self.votes_in.set()
                await asyncio.Event().wait()
            self.turns.append((agent.id, voting))
            return await super().complete(agent, messages, **kwargs)

    store = SessionStore(tmp_path)
    provider = Blocked()
    runner = LocalExecutor(store, provider)
    live = await runner.start(RequestRecord(question="What is 6*7?"), team())
    await provider.votes_in.wait()
    while sum(1 for e in store.read_events(live.session_id) if e.type is EventType.VOTE) < 2:
        await runner.wait(live.session_id, 5)
    await runner.aclose(interrupt=True)
    assert store.read_status(live.session_id).status is RunStatus.INTERRUPTED

    provider.block, provider.turns = False, []
    again = LocalExecutor(store, provider)
    resumed = await again.resume(live.session_id, team())
    result = await resumed.task
    assert result.status is RunStatus.COMPLETED and len(result.tally) == 3
    votes = [r for r in provider.turns if r[1]]
    assert votes == [("agent_c", True)], "only the missing vote is asked for"
    assert len(provider.turns) == 2, "then the final answer, nothing else"
    assert sum(result.tally.values()) == 3
    types = [e.type for e in store.read_events(live.session_id)]
    assert types.count(EventType.ANSWER) == 3 and types.count(EventType.VOTE) == 3
    assert EventType.RESUMED in types
