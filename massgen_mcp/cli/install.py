"""Write massgen-mcp into an MCP host's config: Claude Code, Cursor, Codex, VS Code, Claude
Desktop, Gemini CLI.

Each host has its own file and format (JSON ``mcpServers``, VS Code's ``servers``, Codex TOML).
Installing merges: other servers and settings stay untouched, the old file is kept as a
``.bak-<time>`` copy whenever it changes, and installing twice changes nothing. API keys are
never written into these files: hosts pass their environment to the server (Codex needs the
variable names listed in ``env_vars``).

Headless hosts (``codex exec``, ``gemini -p``) must see our tools without asking anyone: Codex's
entry says ``required = true`` (else its first model request leaves before our tools are
listed and it answers without us). What lets a model start paid runs without asking is
written only with ``approve_tools`` (``--approve-tools``): ``default_tools_approval_mode =
"approve"`` for Codex, ``"trust": true`` for Gemini CLI. The read-only tools are annotated
``readOnlyHint``, which is all some hosts need to call them unasked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import replace_file
from massgen_mcp.core.spec import PROVIDER_KEY_ENV

SERVER_NAME = "massgen"
Scope = Literal["project", "user"]


@dataclass(frozen=True)
class Host:
    name: str
    project_file: str | None  # relative to the project folder
    user_file: str | None  # relative to the home folder (see _user_file for platform paths)
    key: str  # top-level key holding the servers (JSON), or "toml"
    note: str  # what the user should know after installing (timeouts, restart, approval)


HOSTS: dict[str, Host] = {
    "claude-code": Host("Claude Code", ".mcp.json", ".claude.json", "mcpServers",
                        "Restart Claude Code (or run /mcp); project servers ask for approval "
                        "once. Long runs are polled, so the default tool timeout is fine."),
    "cursor": Host("Cursor", ".cursor/mcp.json", ".cursor/mcp.json", "mcpServers",
                   "Enable 'massgen' in Cursor Settings > MCP. Tool calls are cut after "
                   "~60 s; massgen's tools never block longer than 50 s."),
    "codex": Host("Codex", ".codex/config.toml", ".codex/config.toml", "toml",
                  "Written with required = true (codex waits for our tools before its first "
                  "model request), startup_timeout_sec = 30 and tool_timeout_sec = 120; "
                  "provider key variables are forwarded via env_vars."),
    "vscode": Host("VS Code", ".vscode/mcp.json", None, "servers",
                   "Open the Command Palette > 'MCP: List Servers' to start it."),
    "claude-desktop": Host("Claude Desktop", None, None, "mcpServers",
                           "Quit and reopen Claude Desktop. Its tool timeout is ~60 s; "
                           "massgen's tools never block longer than 50 s."),
    "gemini-cli": Host("Gemini CLI", ".gemini/settings.json", ".gemini/settings.json",
                       "mcpServers", "Run /mcp in Gemini CLI to check it is connected. In a "
                       "folder you have not trusted, Gemini CLI starts no MCP server at all, "
                       "user-scope ones included: trust the folder when it asks, or set "
                       "GEMINI_CLI_TRUST_WORKSPACE=true for headless runs (gemini -p)."),
}


@dataclass(frozen=True)
class InstallResult:
    path: Path
    changed: bool
    backup: Path | None
    snippet: str
    note: str


# What each host needs to call our tools headless, and what --approve-tools wrote instead.
_HEADLESS = {
    "claude-code": "Headless (claude -p), allow our tools: claude -p --allowedTools "
                   "mcp__massgen \"...\".",
    "codex": "Headless (codex exec) refuses tools that are not read-only unless approved: "
             "install again with --approve-tools, which writes default_tools_approval_mode "
             "= \"approve\".",
    "gemini-cli": "Headless (gemini -p) leaves out tools that would need confirmation: "
                  "install again with --approve-tools (writes \"trust\": true), or run "
                  "gemini -p --yolo.",
}
_APPROVED = {
    "codex": "Tool calls are approved without asking (default_tools_approval_mode = "
             "\"approve\"): a model can start paid runs on its own.",
    "gemini-cli": "Tool calls run without confirmation (\"trust\": true): a model can start "
                  "paid runs on its own.",
}


def key_variables() -> list[str]:
    return sorted({n for names in PROVIDER_KEY_ENV.values() for n in names})


def server_command(use_uvx: bool) -> tuple[str, list[str]]:
    """How the host should start us: the installed script (absolute path, since hosts do not
    inherit your virtualenv's PATH; ``massgen-mcp.exe`` in ``Scripts`` on Windows) or
    ``uvx massgen-mcp``."""
    if use_uvx:
        return "uvx", ["massgen-mcp"]
    beside_python = Path(sys.executable).parent / (
        "massgen-mcp.exe" if sys.platform == "win32" else "massgen-mcp")
    if beside_python.is_file():
        return str(beside_python), []
    script = shutil.which("massgen-mcp")
    if script:
        return script, []
    return sys.executable, ["-m", "massgen_mcp"]


def _app_config_dir(home: Path, platform: str) -> Path:
    """Where desktop apps keep their settings on ``platform`` (a ``sys.platform`` value)."""
    if platform == "darwin":
        return home / "Library" / "Application Support"
    if platform == "win32":  # %APPDATA%, the roaming profile
        return Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    return home / ".config"


def _user_file(host_id: str, home: Path, platform: str) -> Path:
    """The user-level config: in the home folder on every platform (Claude Code, Cursor,
    Codex, Gemini CLI), or in the desktop apps' folder (VS Code, Claude Desktop)."""
    if host_id == "vscode":
        return _app_config_dir(home, platform) / "Code" / "User" / "mcp.json"
    if host_id == "claude-desktop":
        return _app_config_dir(home, platform) / "Claude" / "claude_desktop_config.json"
    user_file = HOSTS[host_id].user_file
    assert user_file is not None
    return home / user_file


def config_path(host_id: str, scope: Scope, project: Path, home: Path,
                platform: str = sys.platform) -> Path:
    host = HOSTS[host_id]
    if scope == "project":
        if host.project_file is None:
            raise ConfigError(f"{host.name} has no project-level config; use --scope user")
        return project / host.project_file
    return _user_file(host_id, home, platform)


def json_entry(host_id: str, command: str, args: list[str], approve_tools: bool = False
               ) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": command, "args": args}
    if host_id in ("claude-code", "vscode"):
        entry = {"type": "stdio", **entry}
    if host_id == "gemini-cli":
        entry["timeout"] = 120_000  # ms per tool call; massgen's tools return within 50 s
        if approve_tools:
            entry["trust"] = True
    return entry


def toml_section(command: str, args: list[str], approve_tools: bool = False) -> str:
    lines = [
        f"[mcp_servers.{SERVER_NAME}]",
        f"command = {json.dumps(command)}",
        f"args = {json.dumps(args)}",
        f"env_vars = {json.dumps(key_variables())}",
        "required = true",
        "startup_timeout_sec = 30",
        "tool_timeout_sec = 120",
    ]
    if approve_tools:
        lines.append('default_tools_approval_mode = "approve"')
    return "\n".join(lines) + "\n"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; fix its permissions or move it") from None


def _mode_of(path: Path) -> int:
    """The permissions a host's config file has, kept by its rewrite and its backup: a
    private one (``~/.claude.json`` is 0600) must not become readable by every local user."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o644


def _merge_json(existing: str | None, key: str, entry: dict[str, Any], path: Path) -> str:
    data: Any = {}
    if existing is not None and existing.strip():
        try:
            data = json.loads(existing)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); "
                              "fix it or move it away, then install again") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} does not hold a JSON object; fix it or move it away")
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: '{key}' is not an object; fix it or move it away")
    servers[SERVER_NAME] = entry
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


_TOML_HEADER = re.compile(r"^\s*\[", re.MULTILINE)


def _merge_toml(existing: str | None, section: str, path: Path) -> str:
    text = existing or ""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix it or move it away") from None
    header = re.compile(rf"^\[mcp_servers\.{SERVER_NAME}(\.[^\]]*)?\]\s*$", re.MULTILINE)
    match = header.search(text)
    if match is None:
        separator = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n")
                                                                   else "\n\n")
        return text + separator + section
    # Replace our table (and its sub-tables) up to the next unrelated table.
    start, end = match.start(), len(text)
    for other in _TOML_HEADER.finditer(text, match.end()):
        if not header.match(text, other.start()):
            end = other.start()
            break
    return text[:start] + section + ("\n" if end < len(text) else "") + text[end:]


def install(host_id: str, *, scope: Scope = "project", project: Path | None = None,
            home: Path | None = None, use_uvx: bool = False, dry_run: bool = False,
            approve_tools: bool = False, platform: str = sys.platform) -> InstallResult:
    """Add (or update) the massgen server in a host's config file (where ``platform``'s
    host keeps it); ``approve_tools`` lets the host's model call every tool without asking
    (Codex, Gemini CLI)."""
    if host_id not in HOSTS:
        raise ConfigError(f"host {host_id!r}: choose one of {', '.join(HOSTS)}")
    if approve_tools and host_id not in _APPROVED:
        raise ConfigError(f"--approve-tools: {HOSTS[host_id].name} has no such setting in "
                          "its server entry; " + _HEADLESS.get(
                              host_id, "approve the tools in the host when it asks"))
    host = HOSTS[host_id]
    path = config_path(host_id, scope, project or Path.cwd(), home or Path.home(), platform)
    command, args = server_command(use_uvx)
    existing = _read(path)
    if host.key == "toml":
        snippet = toml_section(command, args, approve_tools)
        updated = _merge_toml(existing, snippet, path)
    else:
        entry = json_entry(host_id, command, args, approve_tools)
        snippet = json.dumps({host.key: {SERVER_NAME: entry}}, indent=2)
        updated = _merge_json(existing, host.key, entry, path)
    changed = updated != existing
    backup = None
    if changed and not dry_run:
        path.parent.mkdir(parents=True, exist_ok=True)
        if existing is not None:
            backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
            replace_file(backup, existing, mode=_mode_of(path))
        replace_file(path, updated, mode=_mode_of(path))
    note = host.note
    if scope == "project" and host_id in _TRUSTED_PROJECTS_ONLY:
        note += " " + _TRUSTED_PROJECTS_ONLY[host_id].format(folder=(project or Path.cwd()))
    if approve_tools:
        note += " " + _APPROVED[host_id]
    elif host_id in _HEADLESS:
        note += " " + _HEADLESS[host_id]
    return InstallResult(path, changed, backup, snippet, note)


# Hosts that read a project's config file only in a folder the user has trusted: without
# this line, `codex mcp list` says "No MCP servers configured yet" and nothing says why.
_TRUSTED_PROJECTS_ONLY = {
    "codex": ("Codex reads a project's .codex/config.toml only in a trusted folder: run codex "
              "here once and trust it, or add [projects.\"{folder}\"] trust_level = "
              "\"trusted\" to ~/.codex/config.toml (or install with --scope user)."),
}
