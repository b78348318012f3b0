"""Who writes the final answer (``final``, issue 60): ``present`` (the winner's author, after
the decision), ``answer`` (nobody: the winning answer), ``speculative`` (the leading answer's
author starts before the decision, and the text is used only if that answer wins)."""

from __future__ import annotations

from typing import Any

from massgen_mcp.testing import virtual_time
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Latency,
    Reply,
    ScriptedProvider,
    answer,
    converge,
    text,
    vote,
)
from tests.helpers import run_team, team_for


async def test_answer_makes_no_presentation_call() -> None:
    provider = ScriptedProvider(converge)
    result = (await run_team(team_for(provider, final="answer"), provider=provider)).result
    assert result["status"] == "completed" and result["presented_by"] is None
    assert result["final_answer"] == next(a["content"] for a in result["answers"]
                                          if a["label"] == result["winner"]["label"])
    assert result["usage"]["calls"] == 6  # 3 answers, 3 votes


def for_a(req: ChatRequest) -> Reply:
    """Everyone votes for a's answer."""
    if req.vote_labels:
        return vote(req.label_of("from a"), "a is right")
    return converge(req)


def test_speculative_presentation_is_used_when_its_answer_wins() -> None:
    """In virtual time, c three times slower (decide: all waits for its vote): a's answer
    leads once a and b have voted, so a writes the final answer while c still votes, and it
    is ready a whole call sooner than under present."""
    def run(final: str) -> tuple[dict[str, Any], list[str], float]:
        provider = ScriptedProvider(for_a, latency=Latency(1.0, 0.0, slower={"c": 3.0}))
        outcome = virtual_time.run(run_team(team_for(
            provider, ("a", "b", "c"), final=final, decide="all"), provider=provider))
        ended = max(t.ended for t in provider.timings if t.ended is not None)
        return (outcome.result, [e["reason"] for e in outcome.events("final_speculated")],
                ended)

    result, reasons, ended = run("speculative")
    assert result["status"] == "completed" and result["presented_by"] == "agent_a"
    assert reasons == ["started", "used"]
    assert result["usage"]["calls"] == 7  # no call more than present makes
    present, none, ended_present = run("present")
    assert none == [] and present["presented_by"] == "agent_a"
    assert ended == ended_present - 1.0  # the final call ran beside c's vote


def lead_then_switch(req: ChatRequest) -> Reply:
    """b's answer leads first (a votes for it; b for itself), then c and a move to c's."""
    if req.is_final:
        return text("Final: " + next(iter(req.answers.values()), ""))
    if not req.vote_labels:
        return answer(f"answer of {req.model}")
    b, c = req.label_of("answer of b"), req.label_of("answer of c")
    if req.model == "b":
        return vote(b, "mine")
    if req.model == "a" and req.call_index == 1:
        return vote(b, "b is fine")
    return vote(c, "c is best")


async def test_a_speculation_on_an_answer_that_loses_is_discarded() -> None:
    provider = ScriptedProvider(lead_then_switch)
    outcome = await run_team(team_for(provider, ("a", "b", "c"), final="speculative",
                                      decide="all"), provider=provider)
    result = outcome.result
    events = outcome.events("final_speculated")
    assert result["winner"]["agent_id"] in ("agent_c", "agent_b")
    used = [e for e in events if e["reason"] == "used"]
    assert all(e["label"] == result["winner"]["label"] for e in used)
    for e in events:
        if e["reason"] == "discarded":
            assert e["label"] != result["winner"]["label"] or e["detail"]
