"""The coding-agent CLIs on a team: the real binaries from tests/clients, a user's home for
them (the ``user`` fixture; tests/conftest.py loads this module as a plugin), and stand-in
binaries that play a version or a probe."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ScriptedServer
from tests.helpers import FAST

MODULES = Path(__file__).parent / "clients" / "node_modules"


# Each CLI's own entry point (node_modules/.bin holds launchers, not the programs).
BIN = {"claude": MODULES / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe",
       "codex": MODULES / "@openai" / "codex" / "bin" / "codex.js",
       "gemini": MODULES / "@google" / "gemini-cli" / "bundle" / "gemini.js"}


needs_clis = pytest.mark.skipif(
    not BIN["claude"].exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
    reason="the coding-agent CLIs are not installed (npm ci in tests/clients)")


CANARY = "sk-canary-" + "7" * 24


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A user with the three CLIs installed, MCP servers (and hooks) configured for each, an
    OpenAI key in the environment, and massgen-mcp running inside a Claude Code session."""
    home = tmp_path / "user"
    marker = tmp_path / "mcp-server-started"
    spy = {"command": "sh", "args": ["-c", f"touch {marker}; sleep 30"]}
    (home / ".codex").mkdir(parents=True)
    (home / ".gemini").mkdir()
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"spy": spy}}))
    touch = f"touch {marker}"
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": {
        event: [{"matcher": "*", "hooks": [{"type": "command", "command": touch}]}]
        for event in ("SessionStart", "UserPromptSubmit", "Stop")}}))
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "mcpServers": {"spy": spy}, "security": {"auth": {"selectedType": "gemini-api-key"}},
        "tools": {"discoveryCommand": touch},
        "hooks": {event: [{"matcher": "*", "hooks": [{"type": "command", "command": touch}]}]
                  for event in ("SessionStart", "BeforeAgent", "AfterAgent")}}))
    (home / ".codex" / "config.toml").write_text(
        f'[mcp_servers.spy]\ncommand = "sh"\nargs = ["-c", "touch {marker}; sleep 30"]\n')
    mark = uuid.uuid4().hex
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))  # the CLIs' versions, learned
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("CLAUDECODE", "1")  # we are a child of Claude Code
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    monkeypatch.setenv("MASSGEN_TEST_MARK", mark)  # finds our CLI processes in /proc
    for name in ("claude", "codex", "gemini"):
        monkeypatch.setenv(f"MASSGEN_{name.upper()}_PATH", str(BIN[name]))
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hello')\n")
    (project / ".env").write_text(f"OPENAI_API_KEY={CANARY}\n")
    monkeypatch.chdir(project)
    return {"home": home, "marker": marker, "mark": mark, "project": project}


def cli_team(server: ScriptedServer, clis: tuple[str, ...], api: tuple[str, ...] = (),
             **options: Any) -> TeamConfig:
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


async def run(team: TeamConfig, question: str = "What is 6*7?"
              ) -> tuple[ResultRecord, Path, SessionStore]:
    store = SessionStore()
    runner = LocalExecutor(store, ProviderRouter())
    live = await runner.start(RequestRecord(question=question), team)
    result = await live.task
    return result, store.folder(live.session_id), store


def _offered_tools(body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        names.add(tool.get("name") or (tool.get("function") or {}).get("name") or "")
        for declaration in tool.get("functionDeclarations") or []:  # Gemini
            names.add(declaration.get("name", ""))
    return names - {""}


# A stand-in claude's answer to the version probe (massgen_mcp.providers.cli.versions): the
# pinned version and the options its help lists, one line for --version and --help alike.
STAND_IN_VERSION = ("2.1.330 (Claude Code) --print --output-format --tools --permission-mode "
                    "--permission-prompts --restricted --strict-mcp-config --mcp-config "
                    "--no-session-persistence --disable-slash-commands")


ANSWER_PROBE = (f"if sys.argv[1:] in (['--version'], ['--help']):\n"
                f"    print({STAND_IN_VERSION!r})\n    sys.exit()\n")  # Python, after import sys


ANSWER_PROBE_SH = f"case \"$1\" in --version|--help) echo '{STAND_IN_VERSION}'; exit;; esac\n"


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """Put a small program in place of the claude binary."""
    script = tmp_path / "claude"
    script.write_text(f"#!{sys.executable}\nimport json, os, subprocess, sys\n{ANSWER_PROBE}"
                      f"{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(script))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its version, learned


