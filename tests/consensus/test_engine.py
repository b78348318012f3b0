"""Protocol scenarios on the real engine and runner, the records on disk included.

The models are scripted in process, at the Provider seam (``ScriptedProvider``): no litellm
and no socket. The scenarios that are about the wire (provider errors and their retries, a
Retry-After header, garbage and dropped connections, a call's timeout, cancelling calls in
flight) go through litellm over HTTP to the scripted server, as a real run does."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Policy,
    Reply,
    ScriptedProvider,
    agree,
    answer,
    drop,
    error,
    raw,
    text,
    tool_calls,
    vote,
)
from tests.helpers import Scripted, by_model, read_record, run_team, team_for


def in_process(policy: Policy) -> ScriptedProvider:
    """The scripted models in process; each policy on a thread of its own, as on the server,
    so a policy may wait for what the run does next."""
    return ScriptedProvider(policy, threaded=True)


async def test_unanimous_run_uses_exactly_seven_calls() -> None:
    server = in_process(agree)
    out = await run_team(team_for(server), provider=server)
    r = out.result
    assert r["status"] == "completed" and r["finish_reason"] == "consensus"
    assert server.calls_by_model() == {"a": 3, "b": 2, "c": 2} or sum(
        server.calls_by_model().values()) == 7
    assert r["usage"]["calls"] == 7
    purposes = [e["purpose"] for e in out.events("call")]
    assert sorted(purposes) == ["answer"] * 3 + ["evaluate"] * 3 + ["final"]
    assert r["final_answer"].startswith("Final: ")
    assert r["presented_by"] == r["winner"]["agent_id"]
    assert sum(r["tally"].values()) == 3
    # First round: nobody saw an answer; second round: everybody saw all three.
    first = [q for q in server.requests if not q.vote_labels and not q.is_final]
    assert len(first) == 3 and all("<answers>" not in q.user for q in first)
    second = [q for q in server.requests if q.vote_labels]
    assert all(len(q.answers) == 3 for q in second)
    assert r["usage"]["cost_usd"] is None, "unknown price must be null, never a fake 0"


async def test_prompts_are_anonymised() -> None:
    server = in_process(agree)
    await run_team(team_for(server), provider=server)
    for req in server.requests:
        body = str(req.messages)
        assert "agent_a" not in body and "openai/" not in body
    for req in (q for q in server.requests if q.vote_labels):
        own = f"The answer from {req.model} is 42."
        assert list(req.answers.values())[-1] == own, "own answer shown last"


async def test_late_better_answer_invalidates_votes() -> None:
    released = threading.Event()

    def c_policy(req: ChatRequest) -> Reply:
        if req.vote_labels and req.call_index == 1:
            released.wait(5)  # answer only after a and b have voted
            return answer("C's improved answer: 42, because 6*7=42.")
        return agree(req)

    accepted: list[str] = []

    def on_event(_sid: str, event: dict[str, Any]) -> None:
        if event["type"] == "vote":
            accepted.append(event["agent_id"])
            if len(accepted) == 2:
                released.set()

    server = in_process(by_model(agree, c=c_policy))
    out = await run_team(team_for(server), listener=on_event, provider=server)
    [inval] = out.events("votes_invalidated")
    assert inval["count"] == 2 and inval["by"].endswith("2")
    assert out.result["status"] == "completed"
    # After the new answer, every agent evaluated again, seeing the revision.
    again = [q for q in server.requests if q.vote_labels and inval["by"] in q.vote_labels]
    assert {q.model for q in again} == {"a", "b", "c"}


@pytest.mark.parametrize("decide", ["all", "majority"])
async def test_stale_vote_is_discarded_and_agent_asked_again(
                                                             decide: str) -> None:
    """Under both rules: a revision does not stop a vote in flight; it is awaited, then
    discarded as stale (only a late first answer restarts turns: test_latency)."""
    answered = threading.Event()

    def slow_voter(req: ChatRequest) -> Reply:
        if req.vote_labels and req.call_index == 1:
            answered.wait(5)  # vote arrives after c's new answer changed the view
            return vote(req.vote_labels[0], "first")
        return agree(req)

    def improver(req: ChatRequest) -> Reply:
        if req.vote_labels and req.call_index == 1:
            return answer("C's second answer")
        return agree(req)

    def on_event(_sid: str, event: dict[str, Any]) -> None:
        if event["type"] == "answer" and event["revision"] == 2:
            answered.set()

    server = in_process(by_model(agree, a=slow_voter, c=improver))
    out = await run_team(team_for(server, ("a", "c"), decide=decide), listener=on_event,
                         provider=server)
    discarded = out.events("vote_discarded")
    assert [e["agent_id"] for e in discarded] == ["agent_a"]
    assert out.events("turn_restarted") == []
    assert out.result["status"] == "completed"
    assert server.calls_by_model()["a"] >= 3


async def test_tie_goes_to_the_agent_listed_first() -> None:
    def vote_other(req: ChatRequest) -> Reply:
        if req.vote_labels:
            return vote(req.label_of("from " + ("b" if req.model == "a" else "a")), "theirs")
        return agree(req)

    server = in_process(vote_other)
    out = await run_team(team_for(server, ("a", "b"), skip_final_presentation=True),
                         provider=server)
    r = out.result
    assert r["tie_broken"] is True
    assert r["winner"]["agent_id"] == "agent_a"
    assert r["final_answer"] == "The answer from a is 42.", "verbatim when presentation skipped"
    assert r["usage"]["calls"] == 4


async def test_answer_cap_makes_agent_vote_only() -> None:
    counter = {"n": 0}
    lock = threading.Lock()

    def always_new(req: ChatRequest) -> Reply:
        if req.is_final:
            return text("final")
        if "new_answer" in req.tool_names:
            with lock:
                counter["n"] += 1
                return answer(f"answer number {counter['n']} from {req.model}")
        return vote(req.vote_labels[0], "forced")

    server = in_process(always_new)
    out = await run_team(team_for(server, ("a", "b"), max_answers_per_agent=2), provider=server)
    assert out.result["status"] == "completed"
    assert all(a["answers"] == 2 for a in out.result["agents"].values())
    vote_only = [q for q in server.requests if q.tools and q.tool_names == ["vote"]]
    assert vote_only, "after the cap only the vote tool is offered"
    assert all("used all your answers" in q.system for q in vote_only)


async def test_failing_agent_is_dropped_and_the_rest_finish(scripted: Scripted) -> None:
    server = scripted(by_model(agree, b=lambda req: error(500, "boom")))
    out = await run_team(team_for(server, max_retries=1))
    r = out.result
    assert r["status"] == "completed"
    assert r["agents"]["agent_b"]["status"] == "dropped"
    assert "provider failed" in r["agents"]["agent_b"]["dropped_reason"]
    assert server.calls_by_model()["b"] == 2, "one try plus one retry"
    assert [e["agent_id"] for e in out.events("retry")] == ["agent_b"]
    assert r["winner"]["agent_id"] in ("agent_a", "agent_c")
    assert any("agent_b" in e for e in r["errors"])


async def test_all_agents_failing_fails_the_session_without_leaking_keys(
        scripted: Scripted) -> None:
    key = "sk-canary-1234567890abcdef"
    server = scripted(lambda req: error(401, f"Incorrect API key provided: {key}"))
    team = team_for(server, agent_overrides={m: {"api_key": key} for m in "abc"})
    out = await run_team(team)
    r = out.result
    assert r["status"] == "failed" and r["finish_reason"] == "all_agents_failed"
    assert r["final_answer"] is None and len(r["errors"]) == 3
    assert all("authentication failed" in e for e in r["errors"])
    assert server.calls_by_model() == {"a": 1, "b": 1, "c": 1}, "auth errors are not retried"
    for path in out.folder.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(), path
    assert read_record(out.folder)["config.json"]["agents"][0]["api_key"] == "***"


async def test_session_timeout_returns_best_answer_flagged() -> None:
    def stall_votes(req: ChatRequest) -> Reply:
        if req.vote_labels:
            return Reply("text", delay_s=5)
        return agree(req)

    server = in_process(stall_votes)
    started = time.monotonic()
    out = await run_team(team_for(server, timeout_s=1.0), provider=server)
    assert time.monotonic() - started < 3
    r = out.result
    assert r["status"] == "timed_out" and r["timed_out"] is True
    assert r["final_answer"] in {a["content"] for a in r["answers"]}
    assert out.events("timeout")


async def test_budget_stops_gracefully_with_best_answer() -> None:
    server = in_process(agree)
    reference = await run_team(team_for(server), provider=server)
    first_round = sum(e["prompt_tokens"] + e["completion_tokens"]
                      for e in reference.events("call") if e["purpose"] == "answer")
    out = await run_team(team_for(server, max_total_tokens=first_round + 1), provider=server)
    r = out.result
    assert r["finish_reason"] == "budget_exceeded" and r["budget_exceeded"] is True
    assert r["status"] == "completed" and r["final_answer"] is not None
    purposes = [e["purpose"] for e in out.events("call")]
    assert purposes.count("answer") == 3 and "final" not in purposes
    assert 4 <= len(purposes) < 7, "stops once the calls in flight at the limit return"


async def test_budget_reached_before_any_answer_fails() -> None:
    server = in_process(agree)
    out = await run_team(team_for(server, max_total_tokens=1), provider=server)
    assert out.result["status"] == "failed"
    assert out.result["finish_reason"] == "budget_exceeded"


async def test_cancel_stops_in_flight_calls_promptly(scripted: Scripted) -> None:
    arrived = threading.Semaphore(0)

    def hang(req: ChatRequest) -> Reply:
        arrived.release()
        return Reply("text", delay_s=30)

    server = scripted(hang)
    store = SessionStore()
    runner = LocalExecutor(store, ProviderRouter())
    run = await runner.start(RequestRecord(question="q?"), team_for(server))
    for _ in range(3):
        assert await asyncio.to_thread(arrived.acquire, True, 10)
    started = time.monotonic()
    assert await runner.cancel(run.session_id)
    assert time.monotonic() - started < 1.0
    record = read_record(store.folder(run.session_id))
    assert record["status.json"]["status"] == "cancelled"
    assert record["result.json"]["status"] == "cancelled"
    assert record["events"][-1]["type"] == "finished"


async def test_malformed_actions_get_corrective_retries() -> None:
    def clumsy(req: ChatRequest) -> Reply:
        if req.model == "a" and req.call_index == 0:
            return tool_calls(("new_answer", "{not json"))
        if req.model == "b" and req.vote_labels and not req.is_retry:
            return tool_calls(("vote", '{"answer": "Z9", "reason": "x"}'))
        if req.model == "c" and req.vote_labels and not req.is_retry:
            return tool_calls(("vote", f'{{"answer": "{req.vote_labels[0]}"}}'),
                              ("new_answer", '{"content": "both"}'))
        return agree(req)

    server = in_process(clumsy)
    out = await run_team(team_for(server), provider=server)
    kinds = sorted((e["agent_id"], e["reason"]) for e in out.events("invalid_action"))
    assert kinds == [("agent_a", "bad_arguments"), ("agent_b", "invalid_vote_label"),
                     ("agent_c", "both_actions")]
    assert out.result["status"] == "completed"
    retry = next(q for q in server.requests if q.model == "b" and q.is_retry)
    tool_msgs = [m for m in retry.messages if m["role"] == "tool"]
    assert tool_msgs and "Invalid action" in tool_msgs[0]["content"]


async def test_three_invalid_actions_drop_the_agent() -> None:
    server = in_process(by_model(agree, c=lambda req: text("I refuse to use tools")))
    out = await run_team(team_for(server), provider=server)
    assert [e["attempt"] for e in out.events("invalid_action")] == [1, 2, 3]
    assert out.result["agents"]["agent_c"]["status"] == "dropped"
    assert out.result["status"] == "completed"


async def test_duplicate_answer_gets_corrective_retry() -> None:
    def copycat(req: ChatRequest) -> Reply:
        if req.model == "b" and req.vote_labels and not req.is_retry:
            return answer(req.answers[req.label_of("from a")])
        return agree(req)

    server = in_process(copycat)
    out = await run_team(team_for(server), provider=server)
    assert [e["reason"] for e in out.events("invalid_action")] == ["duplicate_answer"]
    assert out.result["status"] == "completed"


async def test_json_fallback_for_models_without_tool_calling() -> None:
    server = in_process(agree)
    team = team_for(server, agent_overrides={"b": {"tool_calling": False}})
    out = await run_team(team, provider=server)
    assert out.result["status"] == "completed"
    b_requests = [q for q in server.requests if q.model == "b"]
    assert b_requests and all(not q.tools for q in b_requests)
    assert any("Reply with one JSON object" in q.system for q in b_requests)
    votes = {e["agent_id"] for e in out.events("vote")}
    assert "agent_b" in votes


async def test_rate_limit_honours_retry_after(scripted: Scripted) -> None:
    def limited(req: ChatRequest) -> Reply:
        if req.model == "a" and req.call_index == 0:
            return error(429, "slow down", retry_after=0.3)
        return agree(req)

    server = scripted(limited)
    out = await run_team(team_for(server))
    [retry] = out.events("retry")
    assert retry["kind"] == "rate_limit" and retry["delay_s"] == 0.3
    assert retry["status_code"] == 429
    assert out.result["status"] == "completed"


async def test_garbage_and_dropped_connections_are_retried(scripted: Scripted) -> None:
    def flaky(req: ChatRequest) -> Reply:
        if req.call_index == 0 and req.model == "a":
            return raw('{"id": "x", "choices": [{"mess')
        if req.call_index == 0 and req.model == "b":
            return drop()
        return agree(req)

    server = scripted(flaky)
    out = await run_team(team_for(server))
    assert {e["agent_id"] for e in out.events("retry")} == {"agent_a", "agent_b"}
    assert out.result["status"] == "completed"


async def test_slow_call_times_out_and_is_retried(scripted: Scripted) -> None:
    def slow_once(req: ChatRequest) -> Reply:
        if req.model == "a" and req.call_index == 0:
            return Reply("text", delay_s=3)
        return agree(req)

    server = scripted(slow_once)
    out = await run_team(team_for(server, call_timeout_s=0.5))
    [retry] = out.events("retry")
    assert retry["kind"] == "timeout"
    assert out.result["status"] == "completed"


async def test_single_agent_run() -> None:
    server = in_process(agree)
    out = await run_team(team_for(server, ("a",)), provider=server)
    assert out.result["status"] == "completed"
    assert out.result["usage"]["calls"] == 3


async def test_record_is_complete_and_readable() -> None:
    server = in_process(agree)
    out = await run_team(team_for(server), context="Use decimal numbers.", provider=server)
    record = read_record(out.folder)
    r = record["result.json"]
    assert record["status.json"]["status"] == "completed"
    assert record["status.json"]["phase"] == "done"
    assert record["request.json"]["context"] == "Use decimal numbers."
    assert set(record["answers"]) == {a["label"] for a in r["answers"]}
    assert record["final.md"].strip() == r["final_answer"]
    types = [e["type"] for e in record["events"]]
    assert types[0] == "started" and types[-1] == "finished"
    assert [e["seq"] for e in record["events"]] == list(range(1, len(types) + 1))
    assert {"answer", "vote", "consensus", "final", "call"} <= set(types)
    assert all("<context>" in q.user for q in server.requests)
    config = record["config.json"]
    assert [a["model"] for a in config["agents"]] == ["openai/a", "openai/b", "openai/c"]


async def test_identical_independent_answers_are_kept() -> None:
    """Same model, same first answer from every agent: agreement, not an endless retry."""
    server = in_process(lambda req: agree(req) if req.vote_labels or req.is_final
                      else answer("42"))
    out = await run_team(team_for(server), provider=server)
    assert out.result["status"] == "completed"
    assert len(out.events("answer")) == 3 and not out.events("invalid_action")
    assert out.result["usage"]["calls"] == 7


@pytest.mark.parametrize(("presentation", "final", "event"), [
    # A coding-agent CLI answered the final prompt with the protocol: the answer it voted for
    # stands, verbatim, and the event log says why.
    ('{"action": "vote", "answer": "B1", "reason": "it is right"}', "selected", "fallback"),
    ('```json\n{"action": "vote", "answer": "B1"}\n```', "selected", "fallback"),
    ('{"action": "new_answer", "content": "Final: 42, unwrapped."}', "Final: 42, unwrapped.",
     "unwrapped"),
    # An answer that shows JSON is an answer.
    ('The config is {"action": "vote"} in JSON.', 'The config is {"action": "vote"} in JSON.',
     None),
])
async def test_a_presentation_that_is_an_action_object_is_never_the_final_answer(
        presentation: str, final: str, event: str | None) -> None:
    def policy(req: ChatRequest) -> Reply:
        return text(presentation) if req.is_final else agree(req)

    server = in_process(policy)
    out = await run_team(team_for(server), provider=server)
    r = out.result
    winning = next(a["content"] for a in r["answers"] if a["label"] == r["winner"]["label"])
    assert r["final_answer"] == (winning if final == "selected" else final)
    assert r["presented_by"] == (None if final == "selected" else r["winner"]["agent_id"])
    fallbacks, unwrapped = out.events("final_fallback"), out.events("final_unwrapped")
    assert [e["reason"] for e in fallbacks] == (
        ["the presentation was a 'vote' action, not an answer; the selected answer "
         f"{r['winner']['label']} stands"] if event == "fallback" else [])
    assert len(unwrapped) == (1 if event == "unwrapped" else 0)
    assert (out.folder / "final.md").read_text().strip() == r["final_answer"]
