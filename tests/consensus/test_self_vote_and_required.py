"""Two rules a run may turn on (issue 56): no self-votes (``self_vote: false``) and members
the majority may not decide without (``required``), on the state machine and through a
scripted team over HTTP."""

from __future__ import annotations

import pytest

from massgen_mcp.consensus.state import Coordination
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.records import Decision
from massgen_mcp.core.spec import build_team
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedProvider, agree, vote
from tests.helpers import run_team, team_for


def labels(c: Coordination) -> dict[str, str]:
    return {aid: state.current.label for aid, state in c.agents.items()
            if state.current is not None}


def test_without_self_votes_an_agent_votes_for_another_answer() -> None:
    c = Coordination(["a", "b", "c"], max_answers=3, seed="s", self_vote=False)
    for aid in c.order:
        c.add_answer(aid, f"answer of {aid}")
    own = labels(c)
    view = c.view_for("a")
    assert own["a"] not in view.vote_labels and set(view.vote_labels) == {own["b"], own["c"]}
    with pytest.raises(ValueError, match="may not vote for its own answer"):
        c.add_vote("a", own["a"], "mine", c.version)
    assert c.add_vote("a", own["b"], "b's", c.version)


def test_an_only_answer_may_still_get_its_authors_vote() -> None:
    """Nothing else could be voted for: the rule would leave the agent no vote at all."""
    c = Coordination(["a", "b"], max_answers=3, seed="s", self_vote=False)
    c.add_answer("a", "x")
    c.drop("b", "broken")
    assert c.view_for("a").vote_labels == c.view_for("a").labels
    assert c.add_vote("a", labels(c)["a"], "only one", c.version)


def test_a_majority_waits_for_a_required_members_first_answer() -> None:
    c = Coordination(["a", "b", "slow"], max_answers=3, seed="s", decide="majority",
                     required=["slow"])
    c.add_answer("a", "x")
    c.add_answer("b", "x, too")
    c.open_review()  # the quorum stopped waiting for "slow" (it is late)
    c.add_vote("a", labels(c)["a"], "ok", c.version)
    c.add_vote("b", labels(c)["a"], "ok", c.version)
    assert c.decision() is None  # 2 of 3 agree, but "slow" has not joined
    c.add_answer("slow", "y")  # joins: the votes cast without it are cleared
    assert c.votes() == []
    c.add_vote("a", labels(c)["a"], "ok", c.version)
    c.add_vote("b", labels(c)["a"], "ok", c.version)
    assert c.decision() is Decision.MAJORITY


def test_a_dropped_required_member_holds_nothing_back() -> None:
    c = Coordination(["a", "b", "slow"], max_answers=3, seed="s", decide="majority",
                     required=["slow"])
    c.add_answer("a", "x")
    c.add_answer("b", "x, too")
    c.open_review()
    c.add_vote("a", labels(c)["a"], "ok", c.version)
    c.add_vote("b", labels(c)["a"], "ok", c.version)
    c.drop("slow", "timed out")
    assert c.decision() is Decision.ALL_VOTED


def self_voter(req: ChatRequest) -> Reply:
    """Every agent tries to vote for its own answer (shown last) first."""
    if req.vote_labels and not req.is_retry:
        return vote(list(req.answers)[-1], "mine is best")
    if req.vote_labels:
        return vote(req.vote_labels[0], "the best of the others")
    return agree(req)


async def test_no_self_vote_through_a_team() -> None:
    provider = ScriptedProvider(self_voter)
    outcome = await run_team(team_for(provider, self_vote=False), provider=provider)
    result = outcome.result
    assert result["status"] == "completed"
    authors = {a["label"]: a["agent_id"] for a in result["answers"]}
    assert result["votes"] and all(authors[v["answer"]] != v["voter"]
                                   for v in result["votes"])
    events = [e for e in outcome.events() if e.get("reason") == "self_vote"]
    assert events, "the first self-vote of each agent is sent back"


def test_require_must_name_an_agent_of_the_team() -> None:
    with pytest.raises(ConfigError, match=r"options\.require: 'agent_x' names no agent"):
        build_team({"agents": [{"id": "agent_a", "model": "openai/a"}],
                    "options": {"require": ["agent_x"]}})
