"""The first hour, round 2 (issue 49): the paths a newcomer took end right, in the CLI as in
MCP; errors come before anything is written; progress lines say what they mean."""

from __future__ import annotations

import time

from massgen_mcp.core.records import Event, EventType, FinishReason, RunStatus
from massgen_mcp.render.text import describe_event


def test_progress_lines_quote_vote_reasons_and_say_a_finish_once() -> None:
    def line(**fields: object) -> str | None:
        return describe_event(Event.model_validate({"seq": 1, "t": 1.0, "ts": time.time(),
                                                    **fields}))

    assert line(type=EventType.VOTE, agent_id="agent_a", label="B1",
                reason="consensus reached, B1 is right") == (
        '[  1.00s] agent_a voted for B1: "consensus reached, B1 is right"')
    assert line(type=EventType.VOTE, agent_id="agent_a", label="B1") == (
        "[  1.00s] agent_a voted for B1")
    assert line(type=EventType.FINISHED, status=RunStatus.CANCELLED,
                finish_reason=FinishReason.CANCELLED) == "[  1.00s] finished: cancelled"
    assert line(type=EventType.FINISHED, status=RunStatus.COMPLETED,
                finish_reason=FinishReason.CONSENSUS) == (
        "[  1.00s] finished: completed (consensus)")
