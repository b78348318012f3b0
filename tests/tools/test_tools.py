"""Agents that look before they answer: the read-only workspace tools, in a real run over MCP
and against hostile paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastmcp import Client

from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, tool_calls
from massgen_mcp.tools.workspace import WorkspaceTools
from tests.helpers import Scripted

CANARY = "sk-canary-dotenv-7777777777"
LINE = "RETRY_LIMIT = 3  # charges are retried at most three times"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src" / "payments").mkdir(parents=True)
    (root / "src" / "payments" / "charge.py").write_text(f"import time\n\n{LINE}\n")
    (root / ".env").write_text(f"OPENAI_API_KEY={CANARY}\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    return root


def tool_results(req: ChatRequest) -> list[str]:
    return [m["content"] for m in req.messages if m["role"] == "tool"]


def investigator(req: ChatRequest) -> Reply:
    """Agent a looks around, reads the file, tries the .env, then answers quoting the file."""
    if req.model != "a" or req.vote_labels or req.is_final:
        return agree(req)
    seen = tool_results(req)
    steps = [("list_files", {"path": "."}),
             ("read_file", {"path": "src/payments/charge.py"}),
             ("read_file", {"path": ".env"}),
             ("search_text", {"pattern": "RETRY_LIMIT", "glob": "*.py"})]
    if len(seen) < len(steps):
        name, args = steps[len(seen)]
        return tool_calls((name, json.dumps(args)))
    quoted = next(line for line in seen[1].splitlines() if "RETRY_LIMIT" in line)
    return answer(f"Charges retry at most 3 times: `{quoted}`")


async def test_an_agent_reads_the_project_before_answering(scripted: Scripted, project: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = scripted(investigator)
    models = [f"openai/{m}@{server.base_url}" for m in "abc"]
    async with Client(create_server(root=project)) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "How often are charges retried?", "models": models,
            "options": {"workspace_tools": True, "retry_backoff_s": 0.01},
            "wait_s": 30})).structured_content
        sid = done["session_id"]
        result = (await client.call_tool("get_result", {
            "session_id": sid, "detail": "full"})).structured_content
        report = (await client.read_resource(f"massgen://sessions/{sid}/report"))[0].text
        events = [json.loads(line) for line in (await client.read_resource(
            f"massgen://sessions/{sid}/events"))[0].text.splitlines()]
    assert result["status"] == "completed"
    a_answer = next(x for x in result["answers"] if x["agent_id"] == "agent_a")
    assert LINE in a_answer["text"]
    calls = [e for e in events if e["type"] == "tool_call"]
    assert [(e["agent_id"], e["tool"]) for e in calls] == [
        ("agent_a", "list_files"), ("agent_a", "read_file"), ("agent_a", "read_file"),
        ("agent_a", "search_text")]
    assert calls[2]["error"] and "secrets" in calls[2]["error"]
    assert "read_file" in report and "charge.py" in report  # who read what
    listing = tool_results(next(r for r in server.requests if len(tool_results(r)) == 1))[0]
    assert "charge.py" in listing and ".env" not in listing and ".git" not in listing
    assert "id_rsa" not in listing
    for request in server.requests:  # the canary never left the machine
        assert CANARY not in json.dumps(request.body)
    purposes = {e.get("purpose") for e in events if e["type"] == "call"}
    assert "evidence" in purposes
    usage = result["usage"]  # tool rounds are counted apart from decisions
    assert (usage["evidence_calls"], usage["tool_calls"]) == (4, 4)
    assert usage["calls"] > usage["evidence_calls"]


async def test_tools_are_off_unless_asked(scripted: Scripted, project: Path) -> None:
    server = scripted(agree)
    async with Client(create_server(root=project)) as client:
        await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/a@{server.base_url}"], "wait_s": 30})
    assert all("read_file" not in json.dumps(r.tools) for r in server.requests)


async def test_the_per_turn_cap_makes_the_agent_decide(scripted: Scripted, project: Path) -> None:
    def greedy(req: ChatRequest) -> Reply:
        if req.is_final or req.vote_labels:
            return agree(req)
        if any(t["function"]["name"] == "read_file" for t in req.tools):
            return tool_calls(("list_files", '{"path": "."}'))
        return answer("decided after the cap")

    server = scripted(greedy)
    async with Client(create_server(root=project)) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/a@{server.base_url}"], "wait_s": 30,
            "options": {"workspace_tools": True, "max_tool_calls_per_turn": 2}},
        )).structured_content
    assert done["result"]["final_answer"] is not None
    told = [r for r in server.requests if "tool limit reached" in json.dumps(r.messages)]
    assert told and all("read_file" not in json.dumps(r.tools) for r in told)
    assert sum(len(tool_results(r)) for r in told[:1]) == 2  # two calls, then decide


@pytest.mark.parametrize("path, why", [
    ("../../etc/passwd", "outside the project"),
    ("/etc/passwd", "absolute"),
    ("~/.ssh/id_rsa", "absolute"),
    ("../../../proc/self/environ", "outside the project"),
    (".env", "secrets"),
    ("config/.env.production", "secrets"),
    ("deploy/server.pem", "secrets"),
    (".aws/credentials", "secrets"),
    ("link-out", "outside the project"),
    ("fifo", "not a regular file"),
    ("huge.log", "are not read"),
    ("image.png", "binary"),
    (".git/HEAD", "version-control"),
    (".git/config", "secrets"),  # its remote URL may carry a token (on the deny-list too)
])
def test_hostile_paths_are_refused(tmp_path: Path, path: str, why: str) -> None:
    root = tmp_path / "root"
    (root / "config").mkdir(parents=True)
    (root / "deploy").mkdir()
    (root / ".aws").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("x")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main")
    for name in ("config/.env.production", "deploy/server.pem", ".aws/credentials", ".env"):
        (root / name).write_text(CANARY)
    (tmp_path / "outside.txt").write_text(CANARY)
    (root / "link-out").symlink_to(tmp_path / "outside.txt")
    os.mkfifo(root / "fifo")
    with (root / "huge.log").open("w") as handle:
        handle.truncate(50_000_000)
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + b"x" * 100)
    tools = WorkspaceTools(root)
    text = tools.run("read_file", {"path": path})
    assert text.startswith("error: ") and why in text, text
    assert CANARY not in text
    found = tools.run("search_text", {"pattern": "canary"})
    assert found == "no matches"  # secrets and links out are not searched either


def test_context_paths_narrow_what_is_visible(project: Path) -> None:
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.team.massgen_yaml import team_from_mapping

    (project / "docs").mkdir()
    (project / "docs" / "notes.md").write_text("RETRY_LIMIT is documented here\n")
    team, warnings = team_from_mapping({
        "agents": [{"backend": {"type": "openai", "model": "gpt-4o"}}],
        "orchestrator": {"context_paths": [{"path": "src/payments", "permission": "write"}]}})
    assert team.options.workspace_tools and team.options.context_paths == ["src/payments"]
    assert any("read access only" in w for w in warnings)
    tools = WorkspaceTools(project, tuple(team.options.context_paths))
    assert "charge.py" in tools.run("list_files", {"path": "."})
    assert "notes.md" not in tools.run("list_files", {"path": "."})
    assert "outside this run's context_paths" in tools.run("read_file",
                                                           {"path": "docs/notes.md"})
    assert "docs/" not in tools.run("search_text", {"pattern": "RETRY_LIMIT"})
    assert LINE in tools.run("read_file", {"path": "src/payments/charge.py"})
    with pytest.raises(ConfigError, match=r"context_paths: '\.\./elsewhere'"):
        WorkspaceTools(project, ("../elsewhere",))


def test_a_catastrophic_pattern_is_stopped(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("massgen_mcp.tools.workspace.SEARCH_TIMEOUT_S", 0.5)
    (project / "long.txt").write_text("x" * 1900 + "\n")
    text = WorkspaceTools(project).run("search_text", {"pattern": "(x+x+)+y"})
    assert text.startswith("error: the search took over 0.5 s")


def test_undecodable_file_names_come_back_as_valid_text(project: Path) -> None:
    with open(os.path.join(os.fsencode(project), b"bad\xff.txt"), "w") as handle:
        handle.write("hello\n")
    listing = WorkspaceTools(project).run("list_files", {"path": "."})
    listing.encode("utf-8")  # would raise on a lone surrogate
    assert "bad\ufffd" in listing and "charge.py" in listing


async def test_evidence_calls_after_the_cap_are_invalid_not_endless(scripted: Scripted,
                                                                    project: Path
                                                                    ) -> None:
    def stubborn(req: ChatRequest) -> Reply:
        if req.model == "a" and not req.is_final:
            return tool_calls(("list_files", '{"path": "."}'))
        return agree(req)

    server = scripted(stubborn)
    async with Client(create_server(root=project)) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/{m}@{server.base_url}" for m in "ab"],
            "wait_s": 30, "options": {"workspace_tools": True, "max_tool_calls_per_turn": 2,
                                      "retry_backoff_s": 0.01}})).structured_content
    assert done["status"] == "completed"
    calls_by_a = [r for r in server.requests if r.model == "a"]
    assert len(calls_by_a) <= 2 + 3  # two served rounds, then three invalid attempts


def test_folders_records_and_hard_links_are_refused_not_fatal(project: Path) -> None:
    (project / ".massgen" / "sessions").mkdir(parents=True)
    (project / ".massgen" / "sessions" / "request.json").write_text("db password pw123456789")
    os.link(project / ".env", project / "notes.txt")  # another name for the secret file
    tools = WorkspaceTools(project)
    assert tools.run("read_file", {"path": "src"}).startswith("error: src is not a regular")
    assert "records" in tools.run("read_file", {"path": ".massgen/sessions/request.json"})
    assert "records" in tools.run("list_files", {"path": ".massgen"})
    assert "hard links" in tools.run("read_file", {"path": "notes.txt"})
    assert CANARY not in tools.run("search_text", {"pattern": "sk-"})
    assert "pw123456789" not in tools.run("search_text", {"pattern": "password"})


def test_the_deny_list_can_be_lifted_pattern_by_pattern(project: Path) -> None:
    from massgen_mcp.core.errors import ConfigError

    (project / ".env.example").write_text("OPENAI_API_KEY=your-key-here\n")
    default = WorkspaceTools(project)
    assert "secrets" in default.run("read_file", {"path": ".env.example"})
    lifted = WorkspaceTools(project, allow=(".env.*",))
    assert "your-key-here" in lifted.run("read_file", {"path": ".env.example"})
    assert "secrets" in lifted.run("read_file", {"path": ".env"})  # .env itself stays denied
    with pytest.raises(ConfigError, match=r"allow_secret_files: 'notes\.txt' is not on"):
        WorkspaceTools(project, allow=("notes.txt",))


async def test_a_config_in_the_user_config_folder_is_accepted_by_path(
        scripted: Scripted, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    server = scripted(agree)
    folder = tmp_path / "xdg" / "massgen-mcp"
    folder.mkdir(parents=True)
    (folder / "team.yaml").write_text(
        "agents:\n  - id: a\n    backend: {type: chatcompletion, model: a, "
        f"base_url: '{server.base_url}'}}\n")
    async with Client(create_server(root=project)) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "q", "config": str(folder / "team.yaml"), "wait_s": 30})
        ).structured_content
        elsewhere = await client.call_tool("run_consensus", {
            "question": "q", "config": str(tmp_path / "other.yaml")}, raise_on_error=False)
    assert done["status"] == "completed"
    assert elsewhere.is_error and "is absolute" in elsewhere.content[0].text


async def test_show_lists_the_tool_calls(scripted: Scripted, project: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.cli.main import main

    server = scripted(investigator)
    async with Client(create_server(root=project)) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/{m}@{server.base_url}" for m in "ab"],
            "options": {"workspace_tools": True}, "wait_s": 30})).structured_content
    capsys.readouterr()
    assert main(["show", done["session_id"]]) == 0
    out = capsys.readouterr().out
    assert "tool calls" in out and "agent_a read_file" in out and "charge.py" in out


async def test_a_client_root_is_the_workspace(scripted: Scripted, project: Path,
                                              tmp_path: Path) -> None:
    """A client that advertises roots gets files from its root, not the server's folder."""
    elsewhere = tmp_path / "server-cwd"
    elsewhere.mkdir()
    server = scripted(agree)
    # Hosts on the pre-2026-07-28 protocol (legacy mode) can answer roots/list; on the
    # stateless 2026-07-28 protocol a server cannot ask, and its own folder is used.
    async with Client(create_server(root=elsewhere), roots=[project.as_uri()],
                      mode="legacy") as client:
        done = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/a@{server.base_url}"],
            "context_files": ["src/payments/charge.py"], "wait_s": 30})).structured_content
    assert done["status"] == "completed"
    assert LINE in json.dumps([r.messages for r in server.requests])
    async with Client(create_server(root=elsewhere)) as client:  # no roots: the server's own
        refused = await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/a@{server.base_url}"],
            "context_files": ["src/payments/charge.py"]}, raise_on_error=False)
    assert refused.is_error and "does not exist" in refused.content[0].text
