"""The protocol rules, checked on the pure state machine (no I/O)."""

import pytest

from massgen_mcp.consensus.state import Answer, Coordination, assign_letters


def coord(n: int = 3, max_answers: int = 3) -> Coordination:
    return Coordination([f"a{i}" for i in range(n)], max_answers=max_answers, seed="s")


def current(c: Coordination, agent_id: str) -> Answer:
    """The agent's current answer (the test has made one)."""
    answer = c.agents[agent_id].current
    assert answer is not None
    return answer


def test_letters_are_shuffled_per_session_and_unique() -> None:
    ids = [f"a{i}" for i in range(8)]
    seen = {tuple(assign_letters(ids, f"seed{i}").values()) for i in range(20)}
    assert len(seen) > 1  # not simply config order
    assert all(sorted(s) == list("ABCDEFGH") for s in seen)


def test_first_round_is_independent() -> None:
    c = coord()
    assert all(c.needs_turn(a) for a in c.order)
    assert c.view_for("a0").answers == () and c.view_for("a0").first_round
    c.add_answer("a0", "x")
    assert not c.needs_turn("a0"), "must wait until every live agent has answered"
    c.add_answer("a1", "y")
    assert not c.needs_turn("a0")
    c.drop("a2", "broken")
    assert c.first_round_done() and c.needs_turn("a0") and c.needs_turn("a1")


def test_view_is_sorted_and_rotated_so_own_answer_is_last() -> None:
    c = coord()
    for aid in c.order:
        c.add_answer(aid, f"answer of {aid}")
    for aid in c.order:
        view = c.view_for(aid)
        assert view.answers[-1].agent_id == aid
        assert len(view.labels) == 3 and not view.first_round


def test_new_answer_invalidates_all_votes_and_stale_votes_are_refused() -> None:
    c = coord()
    for aid in c.order:
        c.add_answer(aid, f"answer of {aid}")
    v = c.version
    label = current(c, "a1").label
    assert c.add_vote("a0", label, "good", v)
    assert c.add_vote("a1", label, "good", v)
    answer, invalidated = c.add_answer("a2", "better")
    assert invalidated == 2 and c.votes() == []
    assert answer.revision == 2 and answer.label.endswith("2")
    assert not c.add_vote("a0", label, "late", v), "vote on the old view must be discarded"
    assert c.needs_turn("a0")


def test_consensus_needs_every_live_agent() -> None:
    c = coord()
    for aid in c.order:
        c.add_answer(aid, aid)
    label = current(c, "a0").label
    c.add_vote("a0", label, "", c.version)
    c.add_vote("a1", label, "", c.version)
    assert not c.consensus()
    c.drop("a2", "gone")
    assert c.consensus()


def test_winner_most_votes_then_config_order() -> None:
    c = coord()
    for aid in c.order:
        c.add_answer(aid, aid)
    _l0, l1, l2 = (current(c, a).label for a in c.order)
    c.add_vote("a0", l1, "", c.version)
    c.add_vote("a1", l2, "", c.version)
    c.add_vote("a2", l1, "", c.version)
    assert c.winner() == (c.agents["a1"].current, False)
    c.add_answer("a0", "new")  # clears votes
    new0 = current(c, "a0").label
    c.add_vote("a0", l2, "", c.version)
    c.add_vote("a1", new0, "", c.version)
    winner, tie = c.winner()
    assert winner is not None
    assert tie and winner.agent_id == "a0", "tie goes to the agent listed first"


def test_winner_without_votes_is_newest_answer() -> None:
    c = coord()
    c.add_answer("a1", "old")
    c.add_answer("a0", "newer")
    winner = c.winner()[0]
    assert winner is not None
    assert winner.content == "newer"


def test_answer_cap_means_vote_only() -> None:
    c = coord(n=2, max_answers=1)
    c.add_answer("a0", "x")
    c.add_answer("a1", "y")
    assert not c.view_for("a0").may_answer


def test_vote_for_unknown_label_is_a_programming_error() -> None:
    c = coord()
    for aid in c.order:
        c.add_answer(aid, aid)
    with pytest.raises(ValueError):
        c.add_vote("a0", "Z9", "", c.version)
