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

This module knows the hosts (where each keeps its config, what entry it needs, what to tell
the user) and writes the result with a backup; the config is read by :mod:`.host_files` and
our entry merged into it by :mod:`.config_merge`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from massgen_mcp.cli.config_merge import SERVER_NAME, Change, merge_json, merge_toml
from massgen_mcp.cli.host_files import MAX_CONFIG_BYTES, Scope, read_config, refuse_linked_folders
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import replace_file
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV


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
    change: Change  # added, updated (our entry was there, different) or unchanged
    backup: Path | None
    snippet: str
    note: str

    @property
    def changed(self) -> bool:
        return self.change != "unchanged"


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


# What --uvx's entry needs, said with it: uvx installs the release on PyPI, and before the
# first one there is none, so the entry would start nothing and no host says why.
UVX_NOTE = ("'uvx massgen-mcp' starts the release of massgen-mcp published on PyPI; before its "
            "first release there it starts nothing: install with --uvx-from PATH (a "
            "massgen-mcp checkout or a wheel built from one) instead.")


def uvx_source(path: str) -> Path:
    """``--uvx-from``'s PATH, absolute (a host starts the server in another folder): a
    massgen-mcp checkout (a folder with pyproject.toml) or a built wheel."""
    source = Path(path).expanduser().resolve()
    if (source / "pyproject.toml").is_file() or (
            source.is_file() and source.name.startswith("massgen_mcp-")
            and source.suffix == ".whl"):
        return source
    raise ConfigError(f"--uvx-from {path}: not a massgen-mcp checkout (a folder with "
                      "pyproject.toml) or a wheel built from one (massgen_mcp-*.whl)")


def server_command(use_uvx: bool, uvx_from: str | None = None) -> tuple[str, list[str]]:
    """How the host should start us: the installed script (absolute path, since hosts do not
    inherit your virtualenv's PATH; ``massgen-mcp.exe`` in ``Scripts`` on Windows),
    ``uvx --from PATH massgen-mcp`` or ``uvx massgen-mcp``."""
    if uvx_from is not None:
        return "uvx", ["--from", str(uvx_source(uvx_from)), "massgen-mcp"]
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


def install(host_id: str, *, scope: Scope = "project", project: Path | None = None,
            home: Path | None = None, use_uvx: bool = False, uvx_from: str | None = None,
            dry_run: bool = False, approve_tools: bool = False,
            platform: str = sys.platform) -> InstallResult:
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
    command, args = server_command(use_uvx, uvx_from)
    entry = json_entry(host_id, command, args, approve_tools)
    snippet = (toml_section(command, args, approve_tools) if host.key == "toml"
               else json.dumps({host.key: {SERVER_NAME: entry}}, indent=2))
    change: Change = "unchanged"
    backup = None
    if not dry_run:  # --print reads nothing: it is the way round every refusal of a file
        change, backup = _write_entry(path, host_id, scope, project or Path.cwd(), snippet,
                                      entry)
    note = host.note
    if scope == "project" and host_id in _TRUSTED_PROJECTS_ONLY:
        note += " " + _TRUSTED_PROJECTS_ONLY[host_id].format(folder=(project or Path.cwd()))
    if use_uvx and uvx_from is None:
        note += " " + UVX_NOTE
    if approve_tools:
        note += " " + _APPROVED[host_id]
    elif host_id in _HEADLESS:
        note += " " + _HEADLESS[host_id]
    return InstallResult(path, change, backup, snippet, note)


def _write_entry(path: Path, host_id: str, scope: Scope, project: Path, snippet: str,
                 entry: dict[str, Any]) -> tuple[Change, Path | None]:
    """Merge our entry (``snippet``, Codex's table, or ``entry`` in a JSON config) into
    ``path``: what that did, and where the previous version was kept."""
    host = HOSTS[host_id]
    if scope == "project":
        refuse_linked_folders(path, project)
    found = read_config(path, host_id, MAX_CONFIG_BYTES[scope, host.key == "toml"])
    existing = found.text if found is not None else None
    if host.key == "toml":
        updated, change = merge_toml(existing, snippet, path, host_id)
    else:
        updated, change = merge_json(existing, host.key, entry, path, host_id)
    if updated is None or change == "unchanged":
        return change, None
    mode = found.mode if found is not None else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if existing is not None:
        backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
        replace_file(backup, existing, mode=mode, folder_may_be_link=scope == "user")
    replace_file(path, updated, mode=mode, folder_may_be_link=scope == "user")
    return change, backup


# Hosts that read a project's config file only in a folder the user has trusted: without
# this line, `codex mcp list` says "No MCP servers configured yet" and nothing says why.
_TRUSTED_PROJECTS_ONLY = {
    "codex": ("Codex reads a project's .codex/config.toml only in a trusted folder: run codex "
              "here once and trust it, or add [projects.\"{folder}\"] trust_level = "
              "\"trusted\" to ~/.codex/config.toml (or install with --scope user)."),
}
