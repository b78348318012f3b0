"""`massgen-mcp install`: each host's real format, merged, idempotent, backed up."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Literal

import pytest

from massgen_mcp.cli.install import HOSTS, install
from massgen_mcp.cli.main import main
from massgen_mcp.core.errors import ConfigError
from tests.coding_clis import BIN, needs_clis


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("APPDATA", str(home / "AppData"))
    return project, home


def servers_of(host_id: str, path: Path) -> dict[str, Any]:
    if HOSTS[host_id].key == "toml":
        servers: dict[str, Any] = tomllib.loads(path.read_text())["mcp_servers"]
        return servers
    servers = json.loads(path.read_text())[HOSTS[host_id].key]
    return servers


@pytest.mark.parametrize(("host_id", "scope"), [
    (h, s) for h in HOSTS for s in ("project", "user")
    if not (s == "project" and HOSTS[h].project_file is None)])
def test_install_merges_and_is_idempotent(dirs: tuple[Path, Path], host_id: str,
                                          scope: Literal["project", "user"]) -> None:
    project, home = dirs
    first = install(host_id, scope=scope, project=project, home=home)
    assert first.changed and first.backup is None and first.path.is_file()
    assert (project in first.path.parents) == (scope == "project")
    entry = servers_of(host_id, first.path)["massgen"]
    assert "massgen" in entry["command"] or entry["args"] == ["-m", "massgen_mcp"]
    # Another server and an unrelated setting survive a re-install; a backup is kept.
    if HOSTS[host_id].key == "toml":
        first.path.write_text('model = "o4"\n\n[mcp_servers.other]\ncommand = "x"\n\n'
                              + first.path.read_text())
    else:
        data = json.loads(first.path.read_text())
        data["theme"] = "dark"
        data[HOSTS[host_id].key]["other"] = {"command": "x"}
        data[HOSTS[host_id].key]["massgen"]["command"] = "stale"
        first.path.write_text(json.dumps(data))
    second = install(host_id, scope=scope, project=project, home=home)
    if HOSTS[host_id].key == "toml":
        assert not second.changed, "our table was already right; the rest is not ours"
    else:
        assert second.changed and second.backup and "stale" in second.backup.read_text()
    servers = servers_of(host_id, second.path)
    assert servers["other"] == {"command": "x"} and servers["massgen"] == entry
    third = install(host_id, scope=scope, project=project, home=home)
    assert not third.changed and third.backup is None
    if HOSTS[host_id].key == "toml":
        assert tomllib.loads(third.path.read_text())["model"] == "o4"
        assert entry["tool_timeout_sec"] == 120 and "OPENAI_API_KEY" in entry["env_vars"]
    else:
        assert json.loads(third.path.read_text())["theme"] == "dark"


def test_codex_replaces_only_its_own_table(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    path = project / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('[mcp_servers.massgen]\ncommand = "old"\n[mcp_servers.massgen.env]\n'
                    'A = "1"\n\n[mcp_servers.zzz]\ncommand = "keep"\n')
    result = install("codex", project=project, home=home)
    data = tomllib.loads(path.read_text())
    assert data["mcp_servers"]["zzz"] == {"command": "keep"}
    assert data["mcp_servers"]["massgen"]["command"] != "old"
    assert "env" not in data["mcp_servers"]["massgen"]
    assert result.backup is not None and "old" in result.backup.read_text()


def test_headless_hosts_get_what_they_need_and_approval_only_when_asked(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """codex exec answers without us unless the entry is required; what lets a model start
    paid runs unasked is written only with --approve-tools."""
    project, home = dirs
    codex = install("codex", project=project, home=home)
    entry = servers_of("codex", codex.path)["massgen"]
    assert entry["required"] is True and "default_tools_approval_mode" not in entry
    assert "--approve-tools" in codex.note
    gemini = install("gemini-cli", project=project, home=home)
    assert "trust" not in servers_of("gemini-cli", gemini.path)["massgen"]
    assert "GEMINI_CLI_TRUST_WORKSPACE=true" in gemini.note and "--scope user" not in gemini.note
    assert "--approve-tools" in gemini.note
    claude = install("claude-code", project=project, home=home)
    assert "--allowedTools mcp__massgen" in claude.note
    assert main(["install", "codex", "--approve-tools"]) == 0
    assert servers_of("codex", codex.path)["massgen"]["default_tools_approval_mode"] == "approve"
    assert main(["install", "gemini-cli", "--approve-tools"]) == 0
    assert servers_of("gemini-cli", gemini.path)["massgen"]["trust"] is True
    assert "paid runs on its own" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--allowedTools mcp__massgen"):
        install("claude-code", project=project, home=home, approve_tools=True)


def test_unreadable_files_are_clear_errors(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    (project / ".mcp.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"\.mcp\.json is not valid JSON .* fix it or move"):
        install("claude-code", project=project, home=home)
    (project / ".mcp.json").write_text('{"mcpServers": []}')
    with pytest.raises(ConfigError, match="'mcpServers' is not an object"):
        install("claude-code", project=project, home=home)
    with pytest.raises(ConfigError, match="no project-level config; use --scope user"):
        install("claude-desktop", project=project, home=home)


def test_cli_print_changes_nothing(dirs: tuple[Path, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = dirs
    assert main(["install", "vscode", "--print", "--uvx"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {project / '.vscode' / 'mcp.json'}")
    assert json.loads(out.split("\n", 1)[1])["servers"]["massgen"] == {
        "type": "stdio", "command": "uvx", "args": ["massgen-mcp"]}
    assert not (project / ".vscode").exists()
    assert main(["install", "cursor"]) == 0
    assert "massgen added" in capsys.readouterr().out
    assert main(["install", "cursor"]) == 0
    assert "already up to date" in capsys.readouterr().out


@needs_clis
def test_codex_sees_the_project_server_once_the_folder_is_trusted_as_the_note_says(
        dirs: tuple[Path, Path]) -> None:
    """Codex ignores a project's .codex/config.toml in an untrusted folder, and says only
    "No MCP servers configured yet": the install note must carry the line that fixes it."""
    project, home = dirs
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    result = install("codex", project=project, home=home)
    trust = re.search(r"add (\[projects\.\"[^\"]+\"\] trust_level = \"trusted\") to "
                      r"~/\.codex/config\.toml", result.note)
    assert trust, result.note

    def listed() -> str:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home / ".codex")}
        return subprocess.run(["node", str(BIN["codex"]), "mcp", "list"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=60).stdout

    assert "massgen" not in listed()
    header, setting = trust.group(1).split("] ")
    (home / ".codex" / "config.toml").write_text(f"{header}]\n{setting}\n")
    assert re.search(r"^massgen +\S+massgen-mcp", listed(), re.MULTILINE)


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_a_private_config_stays_private_and_so_does_its_backup(
        dirs: tuple[Path, Path]) -> None:
    """A host's config that only its user may read (Claude Code's ~/.claude.json is 0600)
    was rewritten, and backed up, readable by every local user."""
    project, home = dirs
    path = home / ".claude.json"
    path.write_text(json.dumps({"oauthAccount": {"emailAddress": "me@example.com"}}))
    path.chmod(0o600)
    result = install("claude-code", scope="user", project=project, home=home)
    assert result.path == path and result.changed and result.backup is not None
    assert path.stat().st_mode & 0o777 == 0o600
    assert result.backup.stat().st_mode & 0o777 == 0o600
