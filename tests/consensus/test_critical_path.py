"""What stands between a reply and the next requests: the record a resume needs, and
nothing more.

The events and the answer's file are written before the turns a reply makes due are
requested (a run killed after its votes were asked resumes with the answers they judge:
tests/system/test_transports.py, kill -9). The status, a projection of them and the
costliest write of a step, is held (engine: ``_hold_status``) and published once those
turns are on their way, so that scenario A's span stays at its three serial calls. These
tests assert the order of what happens, never a time: a status listener blocks the run's
event loop until the scripted server has received the votes; had the status been written
before they left, the loop would stand still and the votes never arrive.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from massgen_mcp.core.records import StatusRecord
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.sessions.local import LocalExecutor
from massgen_mcp.sessions.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree
from tests.helpers import Scripted, read_record, team_for

# Only ever the bound of a failing test's wait (the requests that never came), never a pace.
NEVER_S = 20.0


class Arrivals:
    """Counts the vote requests the scripted server has received, from its threads."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.all_in = threading.Event()
        self._lock = threading.Lock()

    def policy(self, req: ChatRequest) -> Reply:
        if req.vote_labels:
            with self._lock:
                self.count += 1
                if self.count == self.expected:
                    self.all_in.set()
        return agree(req)


async def test_the_votes_are_requested_before_the_status_and_after_the_answers_record(
        scripted: Scripted, home: Path) -> None:
    votes = Arrivals(expected=3)
    server = scripted(votes.policy)
    store = SessionStore(home)
    runner = LocalExecutor(store, ProviderRouter(), drafts=True)
    votes_at_answer: list[int] = []
    waited: list[bool] = []

    def on_event(_: str, event: Any) -> None:
        if str(event.type) == "answer":  # written before any vote is asked
            votes_at_answer.append(votes.count)

    def on_status(status: StatusRecord) -> None:
        if len(status.answers) == 3 and not waited:  # the status that shows the last answer
            waited.append(votes.all_in.wait(NEVER_S))

    runner.add_event_listener(on_event)
    runner.add_status_listener(on_status)
    run = await runner.start("What is 6*7?", team_for(server))
    result = await run.task

    assert result.status == "completed", result.errors
    assert votes_at_answer == [0, 0, 0]
    assert waited == [True]
    record = read_record(store.folder(run.session_id))
    types = [e["type"] for e in record["events"]]
    assert types.count("answer") == 3 and types.count("vote") == 3
    assert [e["seq"] for e in record["events"]] == list(range(1, len(types) + 1))
    assert record["status.json"]["status"] == "completed"
