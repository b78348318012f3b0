"""The scripted models recognise what a call is for by the marks the prompts are built around
(massgen_mcp.providers.marks): each mark is in its own prompts and in no other."""

from __future__ import annotations

from massgen_mcp.consensus import prompts
from massgen_mcp.consensus.state import Answer, View
from massgen_mcp.core.records import CallPurpose
from massgen_mcp.providers.marks import CHECK_MARK, FINAL_MARK, JSON_MARK
from massgen_mcp.testing.scripted import ChatRequest

FIRST = View(3, (), may_answer=True, first_round=True)
LATER = View(3, (Answer("A1", "x", 1, "Paris", 1),), may_answer=True, first_round=False)
LAST = View(3, (Answer("A1", "x", 1, "Paris", 1),), may_answer=False, first_round=False)


def systems(native_tools: bool) -> list[str]:
    return [prompts.system_message(None, view, native_tools) for view in (FIRST, LATER, LAST)]


def request(system: str, tools: list[dict[str, object]] | None = None) -> ChatRequest:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "q"}]
    return ChatRequest("a", messages, tools or [], 0, {})


def test_each_mark_is_in_its_own_prompts_only() -> None:
    check = prompts.CHECK_FINAL.format(checklist="- it answers")
    assert FINAL_MARK in prompts.FINAL_PRESENTATION
    assert CHECK_MARK in check
    assert all(JSON_MARK in s for s in systems(native_tools=False))
    for text in [*systems(True), *systems(False), check]:
        assert FINAL_MARK not in text
    for text in [*systems(True), *systems(False), prompts.FINAL_PRESENTATION]:
        assert CHECK_MARK not in text
    for text in [*systems(True), prompts.FINAL_PRESENTATION, check]:
        assert JSON_MARK not in text


def test_a_scripted_request_knows_its_purpose_from_the_marks() -> None:
    final = request(prompts.FINAL_PRESENTATION)
    check = request(prompts.CHECK_FINAL.format(checklist="- it answers"))
    turn = request(systems(native_tools=False)[1])
    assert (final.purpose, final.is_final, final.wants_json) == (CallPurpose.FINAL, True, False)
    assert (check.purpose, check.is_check, check.wants_json) == (CallPurpose.CHECK, True, False)
    assert (turn.purpose, turn.wants_json, turn.is_final) == (None, True, False)
    tools = prompts.workflow_tools(LATER)
    assert request(prompts.FINAL_PRESENTATION, tools).purpose is None  # a turn has tools
