"""A run's record is written into the folder the run made, whatever its name comes to lead
to (issue 57, N13): the session folder is opened once and written through that handle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree
from tests.helpers import Scripted, team_for

pytestmark = pytest.mark.skipif(sys.platform == "win32",
                                reason="making a link takes privilege on Windows")


async def test_a_session_folder_swapped_for_a_link_mid_run_gets_no_write_through_it(
        home: Path, tmp_path: Path, scripted: Scripted) -> None:
    # Anyone who can write the records' folder swaps a running session's folder for a link
    # to a place of theirs: status.json and result.json landed there, readable by them. The
    # swap is made from the model server, at the run's first model call, so it falls after
    # the record's first files and before its status, answers and result.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = SessionStore(home)
    moved: list[Path] = []

    def policy(req: ChatRequest) -> Reply:
        if not moved:
            (folder,) = store.sessions_dir.iterdir()
            moved.append(folder.rename(tmp_path / "moved"))
            folder.symlink_to(elsewhere, target_is_directory=True)
        return agree(req)

    runner = LocalExecutor(store, ProviderRouter())
    try:
        run = await runner.start(RequestRecord(question="What is 6*7?"), team_for(scripted(policy)))
        result = await run.task
    finally:
        await runner.aclose()
    assert moved, "the model was never called"
    assert sorted(path.name for path in elsewhere.iterdir()) == []
    # The writes went on in the folder the run made, where it now is.
    assert result.status.value == "completed"
    written = {path.name for path in moved[0].iterdir()}
    assert {"status.json", "result.json", "final.md", "events.jsonl"} <= written
    assert list((moved[0] / "answers").glob("*.md"))
