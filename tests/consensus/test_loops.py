"""A reply caught in a loop ("which is 16, which is 16, ..."): the rule, and what the engine
does with such an answer (issue 58): one corrective retry, as for any too-long answer, and a
second loop is kept only up to its first copy, so the agent is not dropped."""

from __future__ import annotations

from massgen_mcp.core.repetition import MIN_LOOP_WORDS, loop_start, without_loop
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedProvider, agree, answer
from tests.helpers import run_team, team_for

LOOP = "17 + 25 = 42, which is 16, " + "which is 16, " * 30


def test_a_loop_at_the_end_is_found_and_said_once() -> None:
    assert without_loop(LOOP) == "17 + 25 = 42, which is 16"
    assert without_loop("very " * 100) == "very"
    # Raw JSON of a decision cut off mid-loop, as the embedded model streams it.
    assert without_loop('{"action": "new_answer", "content": "It is ' + "so so " * 40) == (
        '{"action": "new_answer", "content": "It is so')


def test_lists_tables_and_short_refrains_are_not_loops() -> None:
    assert loop_start(", ".join(str(i) for i in range(200))) is None  # numbers must repeat
    assert loop_start("| --- " * 10 + "|") is None  # a table's separator row
    assert loop_start("Paris. " * 3) is None  # said thrice, but too short to be a runaway
    assert loop_start("which is 16, " * 30 + "So the answer is 42.") is None  # it got out
    assert loop_start("word " * (MIN_LOOP_WORDS - 1)) is None
    assert loop_start("word " * MIN_LOOP_WORDS) is not None


def looping(first_only: bool):  # type: ignore[no-untyped-def]
    def policy(req: ChatRequest) -> Reply:
        if req.model == "a" and not req.vote_labels and not req.is_final and (
                not first_only or not req.is_retry):
            return answer(LOOP)
        return agree(req)
    return policy


async def test_a_looping_answer_gets_one_corrective_retry() -> None:
    provider = ScriptedProvider(looping(first_only=True))
    out = await run_team(team_for(provider), provider=provider)
    assert out.result["status"] == "completed"
    invalid = out.events("invalid_action")
    assert [(e["agent_id"], e["reason"]) for e in invalid] == [("agent_a", "answer_too_long")]
    assert "repeats the same words" in invalid[0]["problem"]
    assert not any("which is 16" in a["content"] for a in out.result["answers"])


async def test_a_second_loop_is_kept_up_to_its_first_copy() -> None:
    provider = ScriptedProvider(looping(first_only=False))
    out = await run_team(team_for(provider), provider=provider)
    result = out.result
    assert result["status"] == "completed"
    assert [e["reason"] for e in out.events("invalid_action")] == ["answer_too_long"]
    assert result["agents"]["agent_a"]["status"] != "dropped"
    mine = [a["content"] for a in result["answers"] if a["agent_id"] == "agent_a"]
    assert mine == ["17 + 25 = 42, which is 16"]
