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
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from massgen_mcp.core.edges import MAX_JSON_DEPTH, NotJson, UnsafeJson, load_json
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import MIB, UnsafeFileError, open_safely, replace_file
from massgen_mcp.core.spec import PROVIDER_KEY_ENV

SERVER_NAME = "massgen"
Scope = Literal["project", "user"]
Change = Literal["added", "updated", "unchanged"]


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


# The most a host's config may hold, by scope and format. A project's configs are files a
# cloned repository can ship (`.mcp.json`, `.codex/config.toml`): real ones are a few KiB, and
# the cap keeps the worst a planted one costs to seconds (256 KiB of the worst TOML found,
# parsed before and after the edit, took 1-7 s on a loaded 2-core machine; 4 MiB of
# `[0,0,...]` JSON about 4 s and 180 MB).
# The user's own files are larger: Claude Code keeps its history in ~/.claude.json, reported
# at 65-101 MB, and ~/.codex/config.toml lists every trusted project.
MAX_CONFIG_BYTES: dict[tuple[Scope, bool], int] = {  # (scope, is TOML)
    ("project", False): 4 * MIB, ("project", True): 256 * 1024,
    ("user", False): 512 * MIB, ("user", True): 16 * MIB,
}


def _refuse_linked_folders(path: Path, project: Path) -> None:
    """A project's config folder (``.codex``, ``.vscode``, ...) that is a link is refused: a
    cloned project can point it at the user's own folder (``.codex`` at ``~/.codex``), and
    install would rewrite the user's config there. A user-scope folder may be a link
    (dotfiles managers make them). The write itself (``replace_file(...,
    folder_may_be_link=False)``) refuses a project's folder swapped for a link after this
    check."""
    for folder in path.parents:
        if folder == project or project not in folder.parents:
            return
        if folder.is_symlink():
            raise ConfigError(f"{folder} is a link, which install does not follow in a "
                              "project (a cloned project can plant one); replace it with a "
                              "folder, or install with --scope user (nothing was written)")


@dataclass(frozen=True)
class _Existing:
    text: str
    mode: int  # its permissions, kept by the rewrite and the backup


def _read(path: Path, host_id: str, max_bytes: int) -> _Existing | None:
    """The config as it is (None when missing), read through :func:`open_safely`: never
    through a link, only a regular file with no other name, at most ``max_bytes``, and an
    open that cannot wait on a FIFO.

    A link is refused, not followed: the rewrite renames a new file over the config's name,
    so a followed link would become a plain copy of what it points to, in the project folder
    and in the backup (a link to a file holding a secret copies the secret). Writing through
    the link instead would let a cloned project choose which of the user's files is
    rewritten. A file with other names (hard links) is refused for the same reason. The
    permissions come from the open file, so a private config stays private."""
    by_hand = f"add the entry `massgen-mcp install {host_id} --print` shows by hand"
    try:
        with open_safely(path, max_bytes) as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    except UnsafeFileError as exc:
        why = {"link": "is a link, which install neither follows nor replaces (a cloned "
                       f"project can plant one to a file holding a secret); {by_hand} to "
                       "the file it points to",
               "not_regular": "is not a regular file (a device, a FIFO or a folder); move "
                              "it away and install again",
               "hard_links": "has other names (hard links), which a rewrite would split "
                             f"from it; {by_hand}",
               "too_big": f"is over {max_bytes} bytes, the limit for this host's config; "
                          "move it away and install again"}
        raise ConfigError(f"{path} {why.get(exc.reason, str(exc))} (nothing was written)"
                          ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}; fix its permissions "
                          "or move it") from None
    if len(data) > max_bytes:  # it grew since it was opened
        raise ConfigError(f"{path} is over {max_bytes} bytes, the limit for this host's "
                          "config; move it away and install again (nothing was written)")
    try:
        return _Existing(data.decode("utf-8"), mode)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: byte {exc.start + 1} is not UTF-8; fix it or move it "
                          "away, then install again") from None


def _exact_json(text: str) -> Any:
    """JSON as its text says it: every number exactly (a Decimal, not the nearest float), and
    no ``NaN`` or ``Infinity`` (which are not JSON)."""
    def not_json(token: str) -> Any:
        raise ValueError(token)

    return json.loads(text, parse_float=Decimal, parse_constant=not_json)


def _merge_json(existing: str | None, key: str, entry: dict[str, Any], path: Path,
                host_id: str) -> tuple[str | None, Change]:
    """The new text of a JSON config with our entry, and what that does to it (``unchanged``:
    the entry is already exactly ours, and the file is left as it is).

    Python reads a JSON number as the nearest float, so ``1e400`` would come back as
    ``Infinity`` (which no host can parse) and ``0.1000000000000000055`` as ``0.1``. As on the
    TOML side, the new text is written only if it reads, exactly, as the old document with our
    entry and nothing else changed."""
    data: Any = {}
    if existing is not None and existing.strip():
        try:
            data = load_json(existing)  # no RecursionError: nesting is capped
        except NotJson as exc:  # "not JSON (... at character N)"
            raise ConfigError(f"{path} is {exc}; fix it or move it away, then install "
                              "again") from None
        except UnsafeJson as exc:  # nested too deep, a string that is not text
            raise ConfigError(f"{path}: {exc}; fix it or move it away, then install "
                              "again") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} does not hold a JSON object; fix it or move it away")
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: '{key}' is not an object; fix it or move it away")
    if servers.get(SERVER_NAME) == entry:
        return existing, "unchanged"
    change: Change = "updated" if SERVER_NAME in servers else "added"
    servers[SERVER_NAME] = entry
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        meant = _exact_json(existing) if existing is not None and existing.strip() else {}
        meant.setdefault(key, {})[SERVER_NAME] = entry
        same = _exact_json(text) == meant
    except ValueError:
        same = False
    if not same:
        raise ConfigError(f"{path} holds a number (or NaN, Infinity) that would not be written "
                          f"back exactly as it is; nothing was written: add the entry "
                          f"`massgen-mcp install {host_id} --print` shows by hand")
    return text, change


# A TOML key part (bare, "basic" or 'literal'), and a key of more parts than the nesting
# limit: tomllib's time and memory grow with the square of a dotted key's length (a 20 KB key
# of 10,000 parts takes 400 MB and 3 s, 200 KB would exhaust memory), so it is refused before
# tomllib sees it. Possessive quantifiers and a start at a key's first character keep the
# search linear. A string value shaped like such a key is refused too (never seen in a host
# config).
_KEY_PART = r"""(?:[A-Za-z0-9_-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')"""
_DEEP_KEY = re.compile(rf"(?<![A-Za-z0-9_-]){_KEY_PART}(?:[ \t]*+\.[ \t]*+{_KEY_PART})"
                       rf"{{{MAX_JSON_DEPTH}}}")
_HEADER_LINE = re.compile(r"[ \t]*\[")
_KEY_LINE = re.compile(r"[ \t]*[A-Za-z0-9_\"'-]")
_OURS = ("mcp_servers", SERVER_NAME)


def _nesting_over(value: object, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` tables or arrays deep (without recursion:
    the answer must not depend on the depth it measures)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1)
                         for child in (item.values() if isinstance(item, dict) else item)
                         if isinstance(child, dict | list))  # a scalar nests nothing
    return False


def _load_toml(text: str, path: Path) -> dict[str, Any]:
    """``tomllib.loads`` for a config anyone may have written: one line naming the file
    instead of a traceback, whatever the nesting."""
    problem = None
    if _DEEP_KEY.search(text):
        problem = f"a key nests deeper than {MAX_JSON_DEPTH} levels"
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            problem = f"is not valid TOML ({exc})"
        except RecursionError:
            problem = "nests too deep"
        else:
            if not _nesting_over(data, MAX_JSON_DEPTH):
                return data
            problem = f"nests deeper than {MAX_JSON_DEPTH} levels"
    raise ConfigError(f"{path} {problem}; fix it or move it away, then install again")


def _key_path(line: str) -> tuple[str, ...] | None:
    """The key path a line names as TOML itself reads it: a table header
    (``[mcp_servers."massgen".env]``, ``[[a.b]]``, any quoting or spacing) or a key/value pair
    (``massgen.command = "x"``, ``massgen = { command = "x" }``); None when the line is not
    one on its own (a line of a multi-line array or string, say)."""
    try:
        value: Any = tomllib.loads(line)
    except (tomllib.TOMLDecodeError, RecursionError):
        return None
    keys: list[str] = []
    while isinstance(value, dict) and len(value) == 1:
        key, value = next(iter(value.items()))
        keys.append(key)
    return tuple(keys) if keys else None


def _replace_our_entry(text: str, section: str) -> str:
    """``text`` without what defines ``mcp_servers.massgen`` (its tables and sub-tables,
    however their headers are spelled and wherever they are; one-line dotted keys or an
    inline table at the top level or under ``[mcp_servers]``), and ``section`` where its
    first table was, else at the end. A candidate only: :func:`_merge_toml` checks what it
    parses to, so a spelling this misses (a value over several lines, a header inside a
    multi-line string) is refused, not written. Header lines are parsed one by one, key
    lines only where they spell our name."""
    kept: list[str] = []
    comments: list[str] = []  # the comments that end our table: they belong to the next
    table = ""  # the header line of the table the current line is in ("" at the top)
    ours = inserted = False
    for line in text.splitlines(keepends=True):
        if _HEADER_LINE.match(line) and (header := _key_path(line)) is not None:
            table, ours = line, header[:2] == _OURS
            if ours and not inserted:
                kept.append(section)
                inserted = True
            if ours:
                comments = []
                continue
            if comments and kept and kept[-1] is section:
                kept.append("\n")  # a blank line between our table and the next
            kept.extend(comments)
            comments = []
        elif ours:
            if line.lstrip().startswith("#"):
                comments.append(line)
            else:
                comments = []
            continue
        elif _KEY_LINE.match(line) and SERVER_NAME in line:
            context = _key_path(table) if table else ()
            path = _key_path(line)
            if context is not None and path is not None and (context + path)[:2] == _OURS:
                continue
        if kept and kept[-1] is section and line.strip():
            kept.append("\n")  # a blank line between our table and the next
        kept.append(line)
    body = "".join(kept)
    if inserted:
        return body
    separator = "" if not body or body.endswith("\n\n") else (
        "\n" if body.endswith("\n") else "\n\n")
    return body + separator + section


def _same(a: object, b: object) -> bool:
    """Equal as TOML values (a NaN equals a NaN; a date never equals a string)."""
    def canonical(value: object) -> str:
        return json.dumps(value, sort_keys=True,
                          default=lambda item: f"{type(item).__name__}:{item}")
    return canonical(a) == canonical(b)


def _merge_toml(existing: str | None, section: str, path: Path, host_id: str
                ) -> tuple[str | None, Change]:
    """The new text of a Codex config with our table, and what that does to it.

    TOML spells one table many ways (quoted or spaced headers, dotted keys, an inline
    table, sub-tables elsewhere in the file), so the text is edited only as a candidate: it
    is written only if TOML parses it to exactly the old document with ``mcp_servers.massgen``
    set to our entry, nothing else changed. A spelling this edit cannot rewrite is refused
    with what to do, never written half-right."""
    text = existing or ""
    data = _load_toml(text, path)
    servers = data.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: 'mcp_servers' is not a table; fix it or move it away")
    wanted = tomllib.loads(section)["mcp_servers"][SERVER_NAME]
    current = servers.get(SERVER_NAME)
    if current is not None and _same(current, wanted):
        return existing, "unchanged"
    change: Change
    if current is None:
        separator = "" if not text or text.endswith("\n\n") else (
            "\n" if text.endswith("\n") else "\n\n")
        candidate, change = text + separator + section, "added"
    else:
        candidate, change = _replace_our_entry(text, section), "updated"
    expected = {**data, "mcp_servers": {**servers, SERVER_NAME: wanted}}
    try:
        result: object = tomllib.loads(candidate)
    except (tomllib.TOMLDecodeError, RecursionError):
        result = None
    if result is None or not _same(result, expected):
        raise ConfigError(
            f"{path}: install cannot edit its mcp_servers safely (an inline table, or a "
            "value over several lines); nothing was written: make massgen a "
            f"[mcp_servers.massgen] table, as `massgen-mcp install {host_id} --print` shows, "
            "by hand, or move the file away and install again")
    return candidate, change


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
        _refuse_linked_folders(path, project)
    found = _read(path, host_id, MAX_CONFIG_BYTES[scope, host.key == "toml"])
    existing = found.text if found is not None else None
    if host.key == "toml":
        updated, change = _merge_toml(existing, snippet, path, host_id)
    else:
        updated, change = _merge_json(existing, host.key, entry, path, host_id)
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
