"""Coding-agent CLIs as agents: the real Claude Code, Codex and Gemini CLI binaries (pinned in
tests/clients/package-lock.json), pointed at the scripted server, which speaks their wire APIs
(Anthropic Messages, OpenAI Responses, Gemini SSE). Nothing reaches the network.

The user's home is a temporary folder holding MCP configs for all three CLIs whose server would
touch a marker file: a CLI that loaded them would leave the marker behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.config import build_team
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records import EventType, RunStatus
from massgen_mcp.scripted import ChatRequest, Reply, ScriptedServer, agree, text
from massgen_mcp.sessions.runner import SessionRunner
from massgen_mcp.sessions.store import SessionStore
from tests.conftest import FAST, by_model

BIN = Path(__file__).parent / "clients" / "node_modules" / ".bin"
pytestmark = pytest.mark.skipif(
    not (BIN / "claude").exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
    reason="the coding-agent CLIs are not installed (npm ci in tests/clients)")

CANARY = "sk-canary-" + "7" * 24


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A user with the three CLIs installed, MCP servers configured for each, an OpenAI key
    in the environment, and massgen-mcp running inside a Claude Code session."""
    home = tmp_path / "user"
    marker = tmp_path / "mcp-server-started"
    spy = {"command": "sh", "args": ["-c", f"touch {marker}; sleep 30"]}
    (home / ".codex").mkdir(parents=True)
    (home / ".gemini").mkdir()
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"spy": spy}}))
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "mcpServers": {"spy": spy}, "security": {"auth": {"selectedType": "gemini-api-key"}}}))
    (home / ".codex" / "config.toml").write_text(
        f'[mcp_servers.spy]\ncommand = "sh"\nargs = ["-c", "touch {marker}; sleep 30"]\n')
    mark = uuid.uuid4().hex
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("CLAUDECODE", "1")  # we are a child of Claude Code
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    monkeypatch.setenv("MASSGEN_TEST_MARK", mark)  # finds our CLI processes in /proc
    for name in ("claude", "codex", "gemini"):
        monkeypatch.setenv(f"MASSGEN_{name.upper()}_PATH", str(BIN / name))
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hello')\n")
    (project / ".env").write_text(f"OPENAI_API_KEY={CANARY}\n")
    monkeypatch.chdir(project)
    return {"home": home, "marker": marker, "mark": mark, "project": project}


def cli_team(server: ScriptedServer, clis: tuple[str, ...], api: tuple[str, ...] = (),
             **options: Any):
    agents = [{"id": name, "model": f"cli/{name}/scripted-{name}", "base_url": server.base_url}
              for name in clis]
    agents += [{"id": f"api_{m}", "model": f"openai/{m}", "base_url": server.base_url}
               for m in api]
    return build_team({"agents": agents, "options": {**FAST, **options}})


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def marked_processes(mark: str) -> list[tuple[int, str]]:
    """(pid, state) of every process whose environment carries ``mark``: our CLIs and
    anything they started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"MASSGEN_TEST_MARK={mark}".encode() in environ:
            found.append((int(entry.name), state))
    return found


def alive(mark: str) -> list[int]:
    return [pid for pid, state in marked_processes(mark) if state != "Z"]


async def run(team, question: str = "What is 6*7?"):
    store = SessionStore()
    runner = SessionRunner(store, ProviderRouter())
    live = await runner.start(question, team)
    result = await live.task
    return result, store.folder(live.session_id), store


async def test_claude_code_codex_gemini_and_an_api_model_reach_consensus(
        scripted, user: dict[str, Any]) -> None:
    server = scripted(agree)
    before = tree_digest(user["project"])
    left_before = set(Path(tempfile.gettempdir()).glob("massgen-cli-*"))
    result, folder, _store = await run(cli_team(server, ("claude", "codex", "gemini"), ("a",)))

    assert result.status is RunStatus.COMPLETED, result.errors
    assert result.agents["gemini"].status == "voted", result.agents["gemini"].dropped_reason
    assert {v.voter for v in result.votes} == {"claude", "codex", "gemini", "api_a"}
    assert {"claude", "codex"} <= {a.agent_id for a in result.answers}
    assert result.final_answer and result.final_answer.startswith("Final:")
    calls = server.calls_by_model()
    assert calls["scripted-claude"] >= 2 and calls["scripted-codex"] >= 2
    # Usage as each CLI reports it: Claude Code prices its calls, Codex and Gemini do not.
    usage = result.agents
    assert usage["claude"].usage.prompt_tokens > 0 and usage["claude"].usage.cost_usd is not None
    assert usage["codex"].usage.completion_tokens > 0 and usage["codex"].usage.cost_usd is None
    assert usage["gemini"].usage.prompt_tokens > 0
    # Read-only and nothing of the user's: no MCP server started, no file changed, no tool
    # that writes or runs commands offered, our key never sent, no temporary folder left.
    assert not user["marker"].exists()
    assert tree_digest(user["project"]) == before
    assert set(Path(tempfile.gettempdir()).glob("massgen-cli-*")) == left_before
    for req in server.requests:
        if req.model.startswith("scripted-"):
            assert CANARY not in json.dumps(req.headers) + json.dumps(req.body)
            names = _offered_tools(req.body)
            # Only tools that read what the CLI may see (its empty temporary folder).
            assert names <= {"glob", "grep_search", "list_directory", "read_file",
                             "request_user_input"}, (req.model, names)
            assert "main.py" not in json.dumps(req.body)  # it never saw the project
    assert marked_processes(user["mark"]) == []
    assert (folder / "cli.log").exists()  # their stderr, redacted
    assert CANARY not in (folder / "cli.log").read_text()


def _offered_tools(body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        names.add(tool.get("name") or (tool.get("function") or {}).get("name") or "")
        for declaration in tool.get("functionDeclarations") or []:  # Gemini
            names.add(declaration.get("name", ""))
    return names - {""}


async def test_a_cli_that_hangs_is_timed_out_dropped_and_killed(
        scripted, user: dict[str, Any]) -> None:
    seen = threading.Event()

    def hang(req: ChatRequest) -> Reply:
        seen.set()
        return Reply("text", content="never", delay_s=30)

    server = scripted(by_model(agree, **{"scripted-claude": hang}))
    team = cli_team(server, ("claude",), ("a", "b"), cli_call_timeout_s=4)
    store = SessionStore()
    runner = SessionRunner(store, ProviderRouter())
    live = await runner.start("What is 6*7?", team)
    assert await asyncio.to_thread(seen.wait, 30)
    environ = _environ_of_claude(user["mark"])
    result = await live.task

    assert result.status is RunStatus.COMPLETED
    assert result.agents["claude"].status == "dropped"
    assert "no response within 4 s (cli_call_timeout_s)" in (
        result.agents["claude"].dropped_reason or "")
    assert server.calls_by_model()["scripted-claude"] == 1  # a timed-out CLI is not retried
    assert marked_processes(user["mark"]) == []
    # What the child was given: no nesting markers, none of our keys, a placeholder key for
    # the keyless endpoint.
    assert "CLAUDECODE" not in environ and "CLAUDE_CODE_ENTRYPOINT" not in environ
    assert CANARY not in environ.values()
    assert environ["ANTHROPIC_API_KEY"] == "no-key-needed"


def _environ_of_claude(mark: str) -> dict[str, str]:
    for pid, _ in marked_processes(mark):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"claude" in cmdline:
            pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
            return {k.decode(): v.decode(errors="replace") for k, v in pairs}
    raise AssertionError("the claude process was not found")


async def test_cancel_kills_every_cli_at_once(scripted, user: dict[str, Any]) -> None:
    waiting: set[str] = set()
    both = threading.Event()

    def hang(req: ChatRequest) -> Reply:
        waiting.add(req.model)
        if len(waiting) == 2:
            both.set()
        return Reply("text", content="never", delay_s=30)

    server = scripted(hang)
    store = SessionStore()
    runner = SessionRunner(store, ProviderRouter())
    live = await runner.start("What is 6*7?", cli_team(server, ("claude", "codex")))
    assert await asyncio.to_thread(both.wait, 30)
    assert len(alive(user["mark"])) >= 2  # codex is a node launcher and its native binary

    assert await runner.cancel(live.session_id)
    assert store.read_status(live.session_id).status is RunStatus.CANCELLED
    assert marked_processes(user["mark"]) == []  # none alive, no zombie


async def test_a_cli_that_prints_garbage_gets_the_corrective_retry(
        scripted, user: dict[str, Any]) -> None:
    def garbled_first(req: ChatRequest) -> Reply:
        if req.call_index == 0:
            return text("Sure! I would love to help with that question.")
        return agree(req)

    server = scripted(by_model(agree, **{"scripted-codex": garbled_first}))
    result, _folder, store = await run(cli_team(server, ("codex",), ("a",)))

    assert result.status is RunStatus.COMPLETED, result.errors
    assert "codex" in {a.agent_id for a in result.answers}
    invalid = [e for e in store.read_events(result.session_id)
               if e.type is EventType.INVALID_ACTION]
    assert [e.agent_id for e in invalid] == ["codex"]
    retry = [r for r in server.requests if r.model == "scripted-codex"][1]
    assert "<your_previous_reply>" in retry.user and "Sure! I would love" in retry.user
