"""What stands between a reply and the next requests: nothing of the record.

A step's bookkeeping (the reply's call and answer events, the answer's file, the status)
is written once the turns the reply makes due are on their way (engine: ``_hold_records``),
so that scenario A's span stays at its three serial calls. These tests assert the order of
what happens, with listeners that block the run's event loop until the scripted server has
received the next requests: were any record written before those requests left, the loop
would stand still and the requests never arrive.
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


async def test_the_votes_are_requested_before_the_last_answer_is_recorded(
        scripted: Scripted, home: Path) -> None:
    votes = Arrivals(expected=3)
    server = scripted(votes.policy)
    store = SessionStore(home)
    runner = LocalExecutor(store, ProviderRouter(), drafts=True)
    waited: dict[str, list[bool]] = {"answer": [], "call": [], "status": []}
    seen = {"answer": 0, "call": 0}

    def on_event(_: str, event: Any) -> None:
        kind = str(event.type)
        if kind == "answer":
            seen["answer"] += 1
            if seen["answer"] == 3:  # the answer that opens the vote
                waited["answer"].append(votes.all_in.wait(NEVER_S))
        elif kind == "call" and str(event.purpose) == "answer":
            seen["call"] += 1
            if seen["call"] == 3:  # the last answer's own call, recorded before the answer
                waited["call"].append(votes.all_in.wait(NEVER_S))

    def on_status(status: StatusRecord) -> None:
        if len(status.answers) == 3 and not waited["status"]:
            waited["status"].append(votes.all_in.wait(NEVER_S))

    runner.add_event_listener(on_event)
    runner.add_status_listener(on_status)
    run = await runner.start("What is 6*7?", team_for(server))
    result = await run.task

    assert result.status == "completed", result.errors
    assert waited == {"answer": [True], "call": [True], "status": [True]}
    # Held records lose nothing and keep their order: the record reads as before.
    record = read_record(store.folder(run.session_id))
    types = [e["type"] for e in record["events"]]
    assert types.count("answer") == 3 and types.count("vote") == 3
    assert types.index("vote") > max(i for i, t in enumerate(types) if t == "answer")
    assert [e["seq"] for e in record["events"]] == sorted(e["seq"] for e in record["events"])
    assert set(record["answers"]) == {a["label"] for a in record["result.json"]["answers"]}
    assert record["status.json"]["status"] == "completed"
