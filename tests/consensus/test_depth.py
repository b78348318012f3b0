"""depth: auto (issue 56): the two cheapest members open alone; agreeing in round one ends
the run 2 of 2 with a note, and any disagreement calls in the rest of the team, which
answers round one independently and reviews every answer, the pair's included."""

from __future__ import annotations

from massgen_mcp.consensus.replay import opening_pair
from massgen_mcp.consensus.state import Coordination
from massgen_mcp.core.records import AgentPhase, Decision
from massgen_mcp.core.spec import build_team
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Reply,
    ScriptedProvider,
    agree,
    answer,
    converge,
)
from tests.helpers import run_team, team_for


def test_the_opening_pair_is_the_two_cheapest_or_the_first_two() -> None:
    def team(*models: str, **options: object) -> list[str]:
        agents = [{"id": f"a{i}", "model": m} for i, m in enumerate(models)]
        return opening_pair(build_team({"agents": agents,
                                        "options": {"depth": "auto", **options}}))

    assert team("openai/gpt-4o", "openai/gpt-4o-mini", "anthropic/claude-haiku-4-5") == [
        "a1", "a2"]  # by litellm's prices
    assert team("openai/gpt-4o", "openai/my-own", "openai/gpt-4o-mini") == ["a0", "a1"]
    assert team("openai/a", "openai/b") == []  # two are the whole team


def pair() -> Coordination:
    return Coordination(["a", "b", "c", "d"], max_answers=3, seed="s", opening=["a", "b"])


def test_a_pair_that_agrees_in_round_one_decides_alone() -> None:
    c = pair()
    assert [s.agent_id for s in c.live()] == ["a", "b"] and not c.needs_turn("c")
    c.add_answer("a", "x")
    c.add_answer("b", "x too")
    label = c.agents["a"].current.label  # type: ignore[union-attr]
    c.add_vote("a", label, "ok", c.version)
    assert c.decision() is None and c.escalation() is None  # b has not voted yet
    c.add_vote("b", label, "ok", c.version)
    assert c.decision() is Decision.ALL_VOTED
    assert c.phase_of("c", False) is AgentPhase.RESERVE


def test_a_split_pair_calls_in_the_rest_who_answer_round_one_first() -> None:
    c = pair()
    c.add_answer("a", "x")
    c.add_answer("b", "y")
    c.add_vote("a", c.agents["a"].current.label, "mine", c.version)  # type: ignore[union-attr]
    c.add_vote("b", c.agents["b"].current.label, "mine", c.version)  # type: ignore[union-attr]
    assert c.decision() is None
    assert c.escalation() == "the opening pair voted for different answers"
    assert c.escalate() == ["c", "d"]
    assert c.votes() == [] and c.needs_turn("c") and c.view_for("c").first_round
    assert not c.needs_turn("a")  # the pair waits for the newcomers' first answers
    c.add_answer("c", "z")
    c.add_answer("d", "w")
    assert c.needs_turn("a") and len(c.view_for("a").answers) == 4  # the pair's kept


def test_a_revision_or_a_dropped_opener_escalates() -> None:
    c = pair()
    c.add_answer("a", "x")
    c.add_answer("b", "y")
    c.add_answer("a", "x, better")
    assert c.escalation() == "an opening member revised its answer"
    d = pair()
    d.drop("a", "broken")
    assert d.escalation() == "an opening member was dropped"


async def test_an_agreeing_pair_ends_the_run_2_of_2_with_a_note() -> None:
    provider = ScriptedProvider(converge)  # both vote for the same answer
    team = team_for(provider, ("a", "b", "c", "d"), depth="auto")
    outcome = await run_team(team, provider=provider)
    result = outcome.result
    assert result["status"] == "completed"
    calls = provider.calls_by_model()
    assert set(calls) == {"a", "b"}  # c and d were never called
    assert (result["agreement"]["backing"], result["agreement"]["members"]) == (2, 2)
    assert result["agents"]["agent_c"]["status"] == "reserve"
    assert result["notes"] == ["depth auto: the opening pair (agent_a, agent_b) agreed in "
                               "round one; 2 more members (agent_c, agent_d) not called"]


def split_then_agree(req: ChatRequest) -> Reply:
    """a and b each vote for their own answer (so the pair splits); once four answers are
    shown, everyone votes for a's."""
    if req.vote_labels and len(req.answers) == 2:
        return Reply("vote", label=list(req.answers)[-1], reason="mine")
    if req.vote_labels:
        return Reply("vote", label=req.label_of("from a"), reason="a's is right")
    if req.is_final or req.is_check:
        return agree(req)
    return answer(f"The answer from {req.model}.")


async def test_a_split_pair_brings_in_the_whole_team() -> None:
    provider = ScriptedProvider(split_then_agree)
    outcome = await run_team(team_for(provider, ("a", "b", "c"), depth="auto",
                                      decide="all"), provider=provider)
    result = outcome.result
    assert result["status"] == "completed" and result["notes"] == []
    assert result["winner"]["agent_id"] == "agent_a"
    assert (result["agreement"]["backing"], result["agreement"]["members"]) == (3, 3)
    escalated = outcome.events("escalated")
    assert [e["late"] for e in escalated] == [["agent_c"]]
    assert result["answers"] and {a["agent_id"] for a in result["answers"]} == {
        "agent_a", "agent_b", "agent_c"}
