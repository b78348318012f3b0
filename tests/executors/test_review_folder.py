"""A review run's coding-CLI members work in a read-only snapshot of the reviewed code: the
real Claude Code, Codex and Gemini CLI binaries, run through the service against the scripted
server, which drives their own read tools (``Read``, ``read_file``) and sees what comes back.
The snapshot is built once per run by the run's owner (executors/local.py) and is gone when
the run ends or is cancelled; any other run's CLIs still work in an empty folder."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import ReviewTarget
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, answer
from massgen_mcp.testing.scripted import tool_calls as calls
from tests.coding_clis import _offered_tools, needs_clis, stand_in
from tests.helpers import FAST, Scripted
from tests.review.conftest import APP_AFTER, CANARY
from tests.review.conftest import repo as repo  # the fixture: a repository with changes

SNAPSHOT = re.compile(r"massgen-review-[0-9a-f]+")
EMPTY = re.compile(r"massgen-cli-[A-Za-z0-9_]+/work")
# What the fixture's working tree holds in src/app.py and no prompt of ours carries: it
# reaches the server only through a CLI's read tool.
SOURCE = "range(len(items) + 1)"


def read_steps(repo: Path) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Each CLI's own read tool, asked for a source file, then ``.env`` (not in the
    snapshot), then the repository's real ``.env`` by its absolute path (outside the working
    folder: the CLI's own confinement must refuse it). Codex has no read tool with its shell
    off, so it is asked nothing."""
    paths = ("src/app.py", ".env", str(repo / ".env"))
    return {"scripted-claude": [("Read", {"file_path": p}) for p in paths],
            "scripted-gemini": [("read_file", {"file_path": p}) for p in paths]}


def results_in(req: ChatRequest) -> int:
    """How many of its tools' results the CLI has sent back in this request."""
    body = json.dumps(req.body)
    return body.count('"tool_result"') + body.count('"functionResponse"')


def reader(repo: Path) -> Any:
    steps = read_steps(repo)

    def policy(req: ChatRequest) -> Reply:
        mine = steps.get(req.model, [])
        first_turn = not (req.vote_labels or req.is_final or req.is_check)
        if first_turn and results_in(req) < len(mine):
            name, args = mine[results_in(req)]
            return calls((name, json.dumps(args)))
        if first_turn and "<answers>" not in req.user:  # a review run's answer is a review
            return answer(json.dumps({"summary": f"{req.model}: fine", "findings": [],
                                      "rejects": []}))
        return agree(req)
    return policy


def spec(server: ScriptedServer, repo: Path, clis: tuple[str, ...], *,
         review: bool = True) -> RunSpec:
    models = [f"cli/{name}/scripted-{name}" for name in clis] + ["openai/a"]
    return RunSpec(question="Review the change: is it correct?", models=models,
                   base_url=server.base_url, options=RunOptions(**FAST),
                   review=ReviewTarget(root=str(repo), described="the working tree")
                   if review else None)


def copy_named(scratch: Path, name: str) -> Path:
    """The snapshot ``name`` under ``scratch``: in the user's folder, in its builder's."""
    [path] = scratch.glob(f"*/*/{name}")
    return path


def sent(server: ScriptedServer, model: str) -> str:
    return "\n".join(json.dumps(r.body) for r in server.requests if r.model == model)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where every temporary folder goes (the snapshot, the calls' private folders)."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@needs_clis
@pytest.mark.slow
async def test_cli_members_read_the_snapshot_and_never_the_secret(
        scripted: Scripted, user: dict[str, Any], repo: Path, scratch: Path) -> None:
    server = scripted(reader(repo))
    service = ConsensusService.local(user["home"] / "records", Workspace(repo))
    try:
        started = await service.start(spec(server, repo, ("claude", "codex", "gemini")))
        result = await service.wait(started.session_id, None)
    finally:
        await service.aclose()

    assert result.status is RunStatus.COMPLETED, result
    everything = "\n".join(json.dumps(r.body) for r in server.requests)
    assert CANARY not in everything  # the canary in the real .env never reached a model
    found = set(SNAPSHOT.findall(everything))
    # (a CLI may quote the folder's name cut short, e.g. a directory listing's column)
    folders = {f for f in found if not any(g != f and g.startswith(f) for g in found)}
    assert len(folders) == 1, folders  # one snapshot for the whole run, every member in it
    [folder] = folders
    assert not (scratch / folder).exists()  # and gone with the run
    assert list(scratch.iterdir()) == []  # nor any call's own folder
    for model in ("scripted-claude", "scripted-gemini"):
        text = sent(server, model)
        assert SOURCE in text, model  # the source file, read through the CLI's own tool
        assert folder in text, model
    # The .env asked for in the snapshot is not there; the real one, outside it, is refused.
    claude, gemini = sent(server, "scripted-claude"), sent(server, "scripted-gemini")
    assert "File does not exist" in claude
    assert "confines the file tools to the working directory" in claude
    assert "Path not in workspace" in gemini  # (both the snapshot's and the real one)
    # Codex works in the snapshot too (its environment context names it), with no tool
    # that reads a file: its shell stays off (docs/coding-clis.md).
    assert folder in sent(server, "scripted-codex")
    assert APP_AFTER.splitlines()[2] not in sent(server, "scripted-codex")
    # Tools that read, and nothing else (Claude Code's placeholder for tools it would load
    # later stands for none here: no MCP server, every other built-in tool off).
    offered: dict[str, set[str]] = {}
    for r in server.requests:
        offered.setdefault(r.model, set()).update(_offered_tools(r.body))
    assert offered["scripted-claude"] <= {"Read", "Grep", "Glob", "DeferredToolPlaceholder"}
    assert offered["scripted-gemini"] <= {"read_file", "glob", "grep_search", "list_directory"}
    assert offered["scripted-codex"] <= {"request_user_input"}


@needs_clis
async def test_a_cancelled_review_removes_its_snapshot(
        scripted: Scripted, user: dict[str, Any], repo: Path, scratch: Path) -> None:
    seen = threading.Event()

    def hang(req: ChatRequest) -> Reply:
        if req.model == "scripted-claude":
            seen.set()
            return Reply("text", content="never", delay_s=30)
        return agree(req)

    server = scripted(hang)
    service = ConsensusService.local(user["home"] / "records", Workspace(repo))
    try:
        started = await service.start(spec(server, repo, ("claude",)))
        assert await asyncio.to_thread(seen.wait, 30)
        [folder] = set(SNAPSHOT.findall(sent(server, "scripted-claude")))
        copy = copy_named(scratch, folder)
        assert (copy / "src" / "app.py").read_text() == APP_AFTER
        assert not (copy / ".env").exists()
        status, _ = await service.cancel(started.session_id)
        assert status is RunStatus.CANCELLED
    finally:
        await service.aclose()
    assert not copy.exists()
    assert list(scratch.iterdir()) == []


@needs_clis
async def test_a_run_that_is_not_a_review_keeps_the_empty_folder(
        scripted: Scripted, user: dict[str, Any], repo: Path, scratch: Path) -> None:
    server = scripted(agree)
    service = ConsensusService.local(user["home"] / "records", Workspace(repo))
    try:
        started = await service.start(spec(server, repo, ("claude",), review=False))
        result = await service.wait(started.session_id, None)
    finally:
        await service.aclose()
    assert result.status is RunStatus.COMPLETED
    text = sent(server, "scripted-claude")
    assert not SNAPSHOT.search(text) and EMPTY.search(text)
    assert list(scratch.iterdir()) == []


async def test_a_snapshot_that_cannot_be_built_fails_the_run_in_its_record(
        scripted: Scripted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        scratch: Path) -> None:
    """The reviewed folder is no repository (moved away before a resumed run, say): the run
    ends failed, with git's reason in its errors, and no member is called."""
    stand_in(tmp_path, monkeypatch, "sys.exit('never called')")
    server = scripted(agree)
    gone = tmp_path / "not-a-repository"
    gone.mkdir()
    service = ConsensusService.local(tmp_path / "records", Workspace(gone))
    try:
        started = await service.start(spec(server, gone, ("claude",)))
        await service.wait(started.session_id, None)
        result = await service.result(started.session_id)
    finally:
        await service.aclose()
    assert result.status is RunStatus.FAILED
    [error] = result.errors
    assert f"the review's snapshot of {gone} could not be built" in error
    assert "not a git repository" in error
    assert server.requests == []
    assert list(scratch.iterdir()) == []
