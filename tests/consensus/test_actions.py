"""Parsing and validating one model reply into a workflow action."""

import pytest

from massgen_mcp.consensus.actions import CastVote, Invalid, NewAnswer, parse_action
from massgen_mcp.consensus.state import Answer, View
from massgen_mcp.providers.base import Completion, ToolCall

VIEW = View(
    version=2,
    answers=(Answer("A1", "x", 1, "Paris", 1), Answer("B1", "y", 1, "Lyon", 2)),
    may_answer=True,
    first_round=False,
)
FIRST = View(version=0, answers=(), may_answer=True, first_round=True)
VOTE_ONLY = View(VIEW.version, VIEW.answers, may_answer=False, first_round=False)


def calls(*pairs: tuple[str, str]) -> Completion:
    return Completion(None, [ToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(pairs)])


@pytest.mark.parametrize(
    ("completion", "view", "expected"),
    [
        (calls(("vote", '{"answer": "B1", "reason": "ok"}')), VIEW, CastVote("B1", "ok")),
        (calls(("new_answer", '{"content": " Marseille "}')), VIEW, NewAnswer("Marseille")),
        (calls(("vote", '{"answer": "A1", "reason": "1"}'), ("vote", '{"answer": "B1"}')),
         VIEW, CastVote("B1", "")),
    ],
)
def test_valid_actions(completion: Completion, view: View, expected: object) -> None:
    assert parse_action(completion, view, native_tools=True) == expected


@pytest.mark.parametrize(
    ("completion", "view", "kind"),
    [
        (calls(), VIEW, "no_action"),
        (calls(("search", "{}")), VIEW, "unknown_tool"),
        (calls(("vote", "{not json")), VIEW, "bad_arguments"),
        (calls(("vote", '["B1"]')), VIEW, "bad_arguments"),
        (calls(("vote", '{"answer": "C7", "reason": ""}')), VIEW, "invalid_vote_label"),
        (calls(("vote", '{"answer": "A1"}'), ("new_answer", '{"content": "z"}')), VIEW,
         "both_actions"),
        (calls(("new_answer", '{"content": "  "}')), VIEW, "empty_answer"),
        (calls(("new_answer", '{"content": "Paris"}')), VIEW, "duplicate_answer"),
        (calls(("new_answer", '{"content": "Nice"}')), VOTE_ONLY, "answer_limit"),
        (calls(("vote", '{"answer": "A1"}')), FIRST, "vote_no_answers"),
    ],
)
def test_invalid_actions(completion: Completion, view: View, kind: str) -> None:
    action = parse_action(completion, view, native_tools=True)
    assert isinstance(action, Invalid) and action.kind == kind
    assert action.problem  # a sentence the model can act on


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action": "vote", "answer": "A1", "reason": "r"}', CastVote("A1", "r")),
        ('Sure!\n```json\n{"action": "new_answer", "content": "Nice"}\n```', NewAnswer("Nice")),
        ('{"action": "vote", "answer": "Q1"}', Invalid("", "invalid_vote_label")),
        ("I think A1 is best", Invalid("", "no_action")),
        ('{"action": "pass"}', Invalid("", "no_action")),
    ],
)
def test_json_fallback(text: str, expected: object) -> None:
    action = parse_action(Completion(text), VIEW, native_tools=False)
    if isinstance(expected, Invalid):
        assert isinstance(action, Invalid) and action.kind == expected.kind
    else:
        assert action == expected


@pytest.mark.parametrize(("novelty", "expected_kind"), [
    ("lenient", None), ("balanced", "not_novel"), ("strict", "not_novel")])
def test_a_rephrased_answer_is_refused_by_the_novelty_requirement(
        novelty: str, expected_kind: str | None) -> None:
    view = View(2, (Answer("A1", "x", 1, "The capital of France is Paris, on the Seine.", 1),),
                may_answer=True, first_round=False)
    rephrased = calls(("new_answer", '{"content": "Paris, on the Seine, is the capital of '
                                     'France."}'))
    action = parse_action(rephrased, view, native_tools=True, novelty=novelty)
    if expected_kind is None:
        assert isinstance(action, NewAnswer)
    else:
        assert isinstance(action, Invalid) and action.kind == expected_kind
        assert "shares 100% of its words with A1" in action.problem
        assert "vote for it" in action.problem


def test_novelty_limits_per_level() -> None:
    from massgen_mcp.consensus.actions import similarity

    base = "one two three four five six seven eight nine ten"
    # 6 of 14 distinct words shared: 43 %, under both limits.
    other = "one two three four five six alpha beta gamma delta"
    assert round(similarity(base, other), 2) == 0.43
    view = View(2, (Answer("A1", "x", 1, base, 1),), may_answer=True, first_round=False)
    close = "one two three four five six seven eight nine eleven"  # 9 of 11: 82 %
    middle = "one two three four five six seven eight alpha beta"  # 8 of 12: 67 %
    for content, balanced, strict in [(other, True, True), (middle, True, False),
                                      (close, False, False)]:
        reply = calls(("new_answer", f'{{"content": "{content}"}}'))
        assert isinstance(parse_action(reply, view, native_tools=True, novelty="balanced"),
                          NewAnswer) is balanced
        assert isinstance(parse_action(reply, view, native_tools=True, novelty="strict"),
                          NewAnswer) is strict


def test_one_rule_finds_the_json_object_in_model_text() -> None:
    """find_json_object: the first "{" from which JSON parses, whatever wraps it; an unusable
    one (too deep) is an error, not skipped. The check's verdict is read by the same rule."""
    from massgen_mcp.consensus.actions import parse_check
    from massgen_mcp.core.edges import UnsafeJson, find_json_object

    assert find_json_object('Sure: ```json\n{"a": 1}\n``` done') == {"a": 1}
    assert find_json_object('{not json} then {"b": [2]} and {"c": 3}') == {"b": [2]}
    assert find_json_object("no object here [1, 2]") is None
    with pytest.raises(UnsafeJson):
        find_json_object("x " + "{\"k\": " * 100 + "1" + "}" * 100)
    assert parse_check('{draft} {"verdict": "restart", "feedback": "cite a source"}') == (
        "restart", "cite a source")
    assert parse_check('{"verdict": "accept"}') == ("accept", None)
