"""MCP servers as agent tools: a real third-party server from npm (the reference filesystem
server), our own small server over stdio and over streamable HTTP, a server dying mid-run, and
no child process left after a run or a cancel."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, tool_calls
from tests.helpers import Scripted, unused_port
from tests.mcp_servers import offered, run, team

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "fixtures" / "notes_server.py"
FS_SERVER = (ROOT / "clients" / "node_modules" / "@modelcontextprotocol" / "server-filesystem"
             / "dist" / "index.js")
needs_fs = pytest.mark.skipif(not FS_SERVER.is_file(), reason="npm ci in tests/clients first")


def processes_with(token: str) -> list[int]:
    """Pids whose command line contains ``token``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            raw = (proc / "cmdline").read_bytes()  # another test's may hold any bytes
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if token in cmdline and "pytest" not in cmdline:
            found.append(int(proc.name))
    return found


def results(req: ChatRequest) -> list[str]:
    return [m["content"] for m in req.messages if m["role"] == "tool"]


@needs_fs
async def test_agents_use_a_real_filesystem_server_and_our_own(
        scripted: Scripted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "charge.py").write_text("RETRY_LIMIT = 3\n")
    monkeypatch.setenv("NOTE_TAG", "tag-from-env")
    seen_pids: list[int] = []

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels or req.is_final:
            return agree(req)
        got = results(req)
        if req.model == "fsagent":
            if not got:
                return tool_calls(("mcp__fs__read_text_file",
                                   json.dumps({"path": str(project / "charge.py")})))
            return answer(f"From the file: {got[0].strip()}")
        if req.model == "noteagent":
            if not got:
                return tool_calls(("mcp__notes__pid", "{}"))
            if len(got) == 1:
                seen_pids.append(int(got[0]))
                return tool_calls(("mcp__notes__lookup", '{"term": "retries"}'))
            return answer(f"From the notes: {got[1]}")
        return agree(req)

    server = scripted(policy)
    the_team = team(server.base_url, [
        {"id": "fsagent", "backend": {
            "mcp_servers": {"fs": {"type": "stdio", "command": "node",
                                   "args": [str(FS_SERVER), str(project)]}}}},
        {"id": "noteagent", "backend": {
            "mcp_servers": [{"name": "notes", "type": "stdio", "command": sys.executable,
                             "args": [str(NOTES)], "env": {"NOTE_TAG": "${NOTE_TAG}"}}],
            "exclude_tools": ["crash"]}},
        {"id": "plain"}])
    result, events = await run(the_team)

    assert result["status"] == "completed", result["errors"]
    texts = {a["agent_id"]: a["content"] for a in result["answers"]}
    assert "RETRY_LIMIT = 3" in texts["fsagent"]
    # The ${NOTE_TAG} value reached the server, and came back masked like any value resolved
    # for a server's env.
    assert "retries 3 times (***)" in texts["noteagent"]
    calls = [(e["agent_id"], e["tool"]) for e in events if e["type"] == "tool_call"]
    assert ("fsagent", "mcp__fs__read_text_file") in calls
    assert ("noteagent", "mcp__notes__lookup") in calls
    first = {r.model: offered(r) for r in reversed(server.requests)}
    assert "mcp__fs__read_text_file" in first["fsagent"]
    assert "mcp__fs__write_file" not in first["fsagent"]  # not read-only: not offered
    assert "mcp__notes__lookup" in first["noteagent"]
    assert "mcp__notes__crash" not in first["noteagent"]  # excluded
    assert not any(t.startswith("mcp__") for t in first["plain"])
    # The servers stopped with the run.
    assert seen_pids and not Path(f"/proc/{seen_pids[0]}").exists()
    assert processes_with(str(project)) == []  # this test's own server (others run in parallel)
    assert "tag-from-env" not in json.dumps(result) + json.dumps(events)


async def test_a_server_that_dies_mid_run_becomes_an_error_result(scripted: Scripted) -> None:
    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels or req.is_final or req.model != "a":
            return agree(req)
        got = results(req)
        if not got:
            return tool_calls(("mcp__notes__crash", "{}"))
        if len(got) == 1:
            return tool_calls(("mcp__notes__lookup", '{"term": "x"}'))
        return answer(f"The tool said: {got[-1]}")

    server = scripted(policy)
    marker = f"dies-{uuid.uuid4().hex}"  # this test's server, not another test's in parallel
    notes = {"notes": {"command": sys.executable, "args": [str(NOTES), marker]}}
    the_team = team(server.base_url, [
        {"id": "a", "backend": {"mcp_servers": notes, "allowed_tools": ["crash", "lookup"]}},
        {"id": "b"}])
    result, events = await run(the_team)
    assert result["status"] == "completed"
    errors = [e["error"] for e in events if e["type"] == "tool_call"]
    assert len(errors) == 2 and all(errors), errors
    assert processes_with(marker) == []


async def test_a_server_over_streamable_http(scripted: Scripted) -> None:
    port = unused_port()
    proc = subprocess.Popen([sys.executable, str(NOTES), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx

        for _ in range(200):  # until it accepts connections
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=0.2)
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.05)

        def policy(req: ChatRequest) -> Reply:
            if req.vote_labels or req.is_final or req.model != "a":
                return agree(req)
            got = results(req)
            if not got:
                return tool_calls(("mcp__remote__lookup", '{"term": "http"}'))
            return answer(f"Remote: {got[0]}")

        server = scripted(policy)
        the_team = team(server.base_url, [
            {"id": "a", "backend": {"mcp_servers": {"remote": {
                "type": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp"}}}},
            {"id": "b"}])
        result, _ = await run(the_team)
    finally:
        proc.terminate()
        proc.wait(10)
    texts = {a["agent_id"]: a["content"] for a in result["answers"]}
    assert "note on http" in texts["a"]


async def test_cancel_leaves_no_server_process(scripted: Scripted) -> None:
    asked = threading.Event()

    def policy(req: ChatRequest) -> Reply:
        asked.set()
        return Reply("text", delay_s=30)

    server = scripted(policy)
    marker = f"cancel-{uuid.uuid4().hex}"
    notes = {"notes": {"command": sys.executable, "args": [str(NOTES), marker]}}
    the_team = team(server.base_url, [{"id": "a", "backend": {"mcp_servers": notes}}])
    runner = LocalExecutor(SessionStore(), ProviderRouter())
    try:
        live = await runner.start(RequestRecord(question="q"), the_team)
        assert await asyncio.to_thread(asked.wait, 30)
        assert processes_with(marker)  # up while the run goes on (and its reaper)
        assert await runner.cancel(live.session_id)
        assert processes_with(marker) == []
    finally:
        await runner.aclose()  # a failed assertion must not leave the server running


def test_mcp_servers_in_a_project_config_need_consent(tmp_path: Path) -> None:
    from massgen_mcp.core.errors import UntrustedConfigError
    from massgen_mcp.team.massgen_yaml import load_config_file

    path = tmp_path / "config.yaml"
    path.write_text("agents:\n  - id: a\n    backend: {type: openai, model: gpt-4o, "
                    "mcp_servers: {evil: {command: sh, args: ['-c', 'curl x']}}}\n")
    with pytest.raises(UntrustedConfigError, match="starts the MCP server 'evil': sh -c curl x"):
        load_config_file(path, check_trust=True)


async def test_web_search_reaches_the_provider_request(scripted: Scripted) -> None:
    """enable_web_search becomes litellm's provider-native web_search_options, in the very
    request the (scripted) provider receives; agents without it send nothing of the kind."""
    server = scripted(agree)
    the_team = team(server.base_url, [{"id": "a", "backend": {"enable_web_search": True}},
                                      {"id": "b"}])
    result, _ = await run(the_team)
    assert result["status"] == "completed"
    bodies = {r.model: r.body for r in server.requests}
    assert bodies["a"].get("web_search_options") == {"search_context_size": "medium"}
    assert "web_search_options" not in bodies["b"]


@needs_fs
async def test_a_tool_that_was_not_offered_cannot_be_called(scripted: Scripted,
                                                            tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "keep.txt").write_text("original\n")

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels or req.is_final or req.model != "a":
            return agree(req)
        got = results(req)
        if not got:  # not offered (not read-only), called anyway
            return tool_calls(("mcp__fs__write_file", json.dumps(
                {"path": str(project / "keep.txt"), "content": "PWNED"})))
        return answer(f"tried: {got[0]}")

    server = scripted(policy)
    the_team = team(server.base_url, [
        {"id": "a", "backend": {"mcp_servers": {"fs": {
            "command": "node", "args": [str(FS_SERVER), str(project)]}}}},
        {"id": "b"}])
    result, events = await run(the_team)
    assert (project / "keep.txt").read_text() == "original\n"
    [call] = [e for e in events if e["type"] == "tool_call"]
    assert "no tool named 'mcp__fs__write_file' for you" in call["error"]
    assert result["status"] == "completed"
