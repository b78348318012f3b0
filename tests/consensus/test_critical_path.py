"""What stands between a reply and the next requests: the record, and only the record.

Issue 60 asked for the next turns to be requested before a reply's bookkeeping. We tried it
(the status held until the votes were on their way) and it breaks what a crash must leave: a
run killed after its votes were asked must resume with the answers they judge, and show them
as interrupted (the kill -9 tests in tests/system/test_transports.py and
test_reliability.py). So the order is the record's: a reply's events, its answer's file and
the status are written, then the turns it makes due are requested. What used to sit there as
well (the price table parsed three times at once, a thread hop per reply) is gone; see
docs/performance.md, "Scenario A on every face".

The test asserts that order, never a time: listeners see the answers and the status that
shows them while the scripted server has received no vote yet.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree
from tests.helpers import Scripted, read_record, team_for


class Votes:
    """Counts the vote requests the scripted server has received, from its threads."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def policy(self, req: ChatRequest) -> Reply:
        if req.vote_labels:
            with self._lock:
                self.count += 1
        return agree(req)


async def test_what_a_resume_needs_is_recorded_before_the_next_requests(
        scripted: Scripted, home: Path) -> None:
    votes = Votes()
    server = scripted(votes.policy)
    store = SessionStore(home)
    runner = LocalExecutor(store, ProviderRouter(), drafts=True)
    at_answer: list[int] = []
    at_status: list[int] = []

    def on_event(_: str, event: Any) -> None:
        if str(event.type) == "answer":
            at_answer.append(votes.count)

    def on_status(status: StatusRecord) -> None:
        if len(status.answers) == 3 and not at_status:  # the status that shows every answer
            at_status.append(votes.count)

    runner.add_event_listener(on_event)
    runner.add_status_listener(on_status)
    run = await runner.start(RequestRecord(question="What is 6*7?"), team_for(server))
    result = await run.task

    assert result.status == "completed", result.errors
    assert at_answer == [0, 0, 0] and at_status == [0]
    assert votes.count == 3
    record = read_record(store.folder(run.session_id))
    types = [e["type"] for e in record["events"]]
    assert types.count("answer") == 3 and types.count("vote") == 3
    assert set(record["answers"]) == {a["label"] for a in record["result.json"]["answers"]}
