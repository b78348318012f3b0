"""Read-only workspace tools: ``list_files``, ``read_file`` and ``search_text``.

They let an agent look at the project it is asked about. Everything they return is sent to the
agent's provider, so they are off unless a run asks for them, and they are careful:

* **confined** to the workspace root: relative paths only, no ``..`` escape, every path resolved
  (symlinks included) and checked to stay inside the root;
* **never secret files**: the deny-list below (``.env*``, keys, credentials, ``.ssh/``, ...,
  and backups of them such as ``.env~``), matched case-insensitively, is neither listed nor
  read nor searched; ``allow_secret_files`` lifts only what it names; ``.git/`` internals and
  ``.massgen/`` are refused in any letter case; a file holding a private key (a PEM block, a
  WireGuard ``PrivateKey`` line) is not read whatever its name. :func:`withheld` and
  :func:`withheld_content` decide, here and wherever else a file reaches a model (a review's
  diff and named files, the repository copy);
* **text only and capped**: regular files only (no FIFOs, devices or ``/proc``), binary files
  refused, at most :data:`MAX_READ_BYTES` per read and :data:`MAX_RUN_BYTES` per run, at most
  :data:`MAX_LISTED` entries and :data:`MAX_MATCHES` search hits per call.

Errors come back as the tool's text (``error: ...``) for the agent to read; the turn goes on.
"""

from __future__ import annotations

import fnmatch
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from massgen_mcp.core.errors import ConfigError, Refusal
from massgen_mcp.core.files import UnsafeFileError, open_safely
from massgen_mcp.core.spec import TeamConfig

MAX_READ_BYTES = 100_000
MAX_RUN_BYTES = 2_000_000
MAX_FILE_BYTES = 5_000_000  # larger files are not read or searched at all
MAX_LISTED = 500
MAX_WALKED = 20_000  # entries one listing or search may walk
MAX_SCANNED_BYTES = 20_000_000  # file bytes one search may read
MAX_MATCHES = 100
MAX_PATTERN_CHARS = 500
SEARCH_TIMEOUT_S = 5.0

# Never listed, read or searched: matched against every path component, case-insensitively
# (macOS and Windows folders are), and against the name with backup decorations taken off
# (:func:`undecorated`: ``.env~``, ``.env.bak``, ``#.env#`` are ``.env``).
# Listed in docs/agent-tools.md.
DENY_NAMES = (
    # environment files
    ".env", ".env.*", ".env-*", ".env_*", ".env[0-9]*", "*.env", ".envrc", ".secrets",
    ".secret", ".dev.vars", "local.settings.json", "env.local", ".flaskenv",
    # application configs that hold the database password by convention
    "wp-config.php", "appsettings.json", "appsettings.*.json",
    # private keys, certificates with keys, key stores
    "*.pem", "*.key", "*.p8", "*.p12", "*.pfx", "*.ppk", "*.keystore", "*.jks", "*.keytab",
    "*.kdbx", "*.ovpn", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "secring.*", "*.asc",
    # credential files of common tools
    ".npmrc", ".yarnrc.yml", ".pypirc", ".netrc", "_netrc", ".git-credentials", ".pgpass",
    "pgpass.conf", ".my.cnf", "my.cnf", ".htpasswd", "auth.json", "access_tokens.db",
    ".boto", ".s3cfg", ".dockercfg", ".vault-token", "credentials*", "*-credentials*",
    "*_credentials*", "*.credentials", "*service-account*.json", "*service_account*.json",
    "token.json", "tokens.json", "*-token.json", "*_token.json", "*.token",
    "kubeconfig", "kubeconfig.*", "*.kubeconfig",
    # ... and of other tools: rclone's remotes, pip's index URL with its password, Maven's
    # server passwords, Gradle's signing and publishing credentials, Firebase and Google
    # service keys, WireGuard's interface files (their PrivateKey; wg0.conf, wireguard/*.conf)
    "rclone.conf", "pip.conf", "settings.xml", "settings-security.xml", "gradle.properties",
    "keyfile.json", "firebase-adminsdk-*.json", "google-services.json", "wg*.conf",
    "wireguard/*.conf",
    # shells' and REPLs' histories (a password typed on a command line): .bash_history,
    # .python_history, .psql_history
    "*_history",
    # secrets by name
    "secret", "secrets", "secret[-_.]*", "secrets[-_.]*", ".secret.*", ".secrets.*",
    "*.secret", "*.secrets", "*-secret.*", "*_secret.*", "*-secrets.*", "*_secrets.*",
    "client_secret*", "private[-_]key", "private[-_]key.txt",
    # infrastructure state and variables
    "*.tfstate", "*.tfstate.*", "*.tfvars", "*.tfvars.json",
    # folders of credentials
    ".aws", ".ssh", ".gnupg", ".docker", ".kube", ".azure", ".gcloud",
    # ... and those known by where they are (a pattern with a slash matches a component
    # together with the folders above it): the GitHub CLI's token, gcloud's ~/.config/gcloud
    ".config/gh", ".config/gcloud",
    # a repository's own config holds its remotes' URLs, tokens included, and its credentials
    # store; the workspace tools hide all of .git/ anyway (HIDDEN_DIRS), context_files too
    ".git/config", ".git/credentials", ".git/modules/*/config",
)
# Suffixes editors and people add to a copy: the copy of a secret file is a secret file.
BACKUP_SUFFIXES = (".bak", ".backup", ".old", ".orig", ".save", ".swp", ".swo", ".tmp",
                   ".copy", "~")
# Folders a model never sees, not even when a file in them is named, in any letter case:
# version control's internals (a remote's URL with its token, a credentials store) and
# massgen's own folder (a project config's inline api_key, earlier sessions' questions and
# answers). The one list for the workspace tools, a review's diff, patch and named files, and
# the repository copy a coding CLI reads (:func:`withheld`).
HIDDEN_DIRS = (".git", ".hg", ".svn", ".massgen")
SKIP_DIRS = (*HIDDEN_DIRS, "node_modules", "__pycache__", ".venv")  # not walked, not listed
# Why a model is not shown a file (:func:`withheld`, :func:`withheld_content`): one set of
# words for every place that withholds one.
DENIED = "on the secret-file deny-list"
HIDDEN = "version-control internals or massgen's records"
HOLDS_KEY = f"{DENIED}: it holds a private key"
# A private key in a file of any name: a PEM block's first line, or a WireGuard interface's
# ``PrivateKey = <44 base64 characters>`` line, each at a line's start (after a diff's
# ``+``, ``-`` or space).
_PRIVATE_KEY = re.compile(
    rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"
    rb"|^[-+ ]?[ \t]*PrivateKey[ \t]*=[ \t]*[A-Za-z0-9+/]{42,43}=*[ \t]*\r?$",
    re.MULTILINE | re.IGNORECASE)


class ToolRefused(Exception):
    """A call the tools will not serve; the message is shown to the agent."""


def undecorated(name: str) -> str:
    """``name`` lower-cased without backup decorations: ``.ENV.bak~`` -> ``.env``,
    ``#.env#`` -> ``.env``, ``..env.swp`` (vim's swap file of ``.env``) -> ``.env``."""
    name = name.lower()
    while True:
        bare = name.strip("#")
        for suffix in BACKUP_SUFFIXES:
            if bare.endswith(suffix) and len(bare) > len(suffix):
                bare = bare[:-len(suffix)]
        if bare.startswith(".."):
            bare = bare[1:]
        if bare == name:
            return name
        name = bare


def is_denied(relative: PurePosixPath, deny: tuple[str, ...] = DENY_NAMES,
              allow: tuple[str, ...] = ()) -> bool:
    """Whether a component of ``relative`` (or its undecorated name) matches a deny pattern
    that no ``allow`` pattern lifts for that component (``allow: [".env"]`` lifts ``.env``
    though ``*.env`` matches it too, and leaves ``prod.env`` denied)."""
    lowered = [part.lower() for part in relative.parts]
    for i, part in enumerate(lowered):
        names = {part, undecorated(part)}
        paths = {"/".join([*lowered[j:i], name]) for j in range(i) for name in names}
        if any(fnmatch.fnmatchcase(n, p) for p in deny
               for n in (paths if "/" in p else names)) and not any(
                fnmatch.fnmatchcase(part, a) for a in allow):
            return True
    return False


def is_hidden(relative: PurePosixPath, names: tuple[str, ...] = HIDDEN_DIRS) -> bool:
    """Whether a component is one of ``names``, in any letter case (``.GIT`` is ``.git`` on
    a case-insensitive disk)."""
    return any(part.lower() in names for part in relative.parts)


def withheld(relative: PurePosixPath, allow: tuple[str, ...] = (),
             deny: tuple[str, ...] = DENY_NAMES) -> str | None:
    """Why a model may not see the file ``relative`` (a path inside the project, POSIX
    separators), or None when it may: a name on the secret-file deny-list (``allow``: the
    patterns a run lifts), or a part in :data:`HIDDEN_DIRS`. The one answer for every way a
    file reaches a model: the workspace tools, a review's diff sections, patches and named
    files, and the repository copy a coding CLI member reads."""
    if is_denied(relative, deny, allow):
        return DENIED
    if is_hidden(relative):
        return HIDDEN
    return None


def withheld_content(data: bytes) -> str | None:
    """Why a model may not see a file (or a diff section) holding ``data`` whatever its name,
    or None: a private key in it (a PEM private-key block, a WireGuard ``PrivateKey`` line)."""
    return HOLDS_KEY if _PRIVATE_KEY.search(data) else None


@dataclass
class WorkspaceTools:
    """The three tools over one root, with a byte budget shared by the whole run."""

    root: Path
    only: tuple[str, ...] = ()  # context_paths: when given, nothing else is visible
    allow: tuple[str, ...] = ()  # deny-list patterns the run lifts (allow_secret_files)
    deny: tuple[str, ...] = DENY_NAMES
    bytes_left: int = MAX_RUN_BYTES
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _only: tuple[PurePosixPath, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.allow = tuple(p.lower() for p in self.allow)
        self._only = self.check_paths(self.root, self.only, self.allow, self.deny)

    @staticmethod
    def check_paths(root: Path, paths: Sequence[str], allow_secret_files: Sequence[str] = (),
                    deny: tuple[str, ...] = DENY_NAMES) -> tuple[PurePosixPath, ...]:
        """``paths`` (context_paths) relative to ``root``, or a ConfigError naming the first
        one that is not inside it, and any ``allow_secret_files`` entry the deny-list does
        not hold. A run's preflight asks this before its record exists, without building
        the tools."""
        root = root.resolve()
        unknown = [p for p in (a.lower() for a in allow_secret_files)
                   if not is_denied(PurePosixPath(p), deny)]
        if unknown:
            raise ConfigError(f"allow_secret_files: {unknown[0]!r} is not on the deny-list; "
                              "give a name it denies (e.g. '.env') or one of its patterns: "
                              f"{', '.join(deny)}")
        narrowed = []
        for given in paths:
            try:
                path = (root / Path(given).expanduser()).resolve()
            except RuntimeError:  # a symlink loop
                raise ConfigError(f"context_paths: {given!r} is a symbolic link loop") from None
            if not path.is_relative_to(root) or not path.exists():
                raise ConfigError(f"context_paths: {given!r} is not a file or folder inside "
                                  f"the workspace {root}")
            narrowed.append(PurePosixPath(path.relative_to(root).as_posix()))
        return tuple(narrowed)

    def _visible(self, relative: PurePosixPath, *, on_the_way: bool = False) -> bool:
        """Inside one of the context paths (or, ``on_the_way``, a folder leading to one)."""
        if not self._only:
            return True
        return any(relative == o or o in relative.parents or o == PurePosixPath(".")
                   or (on_the_way and relative in o.parents) for o in self._only)

    # -- schemas -----------------------------------------------------------------------------

    @staticmethod
    def specs() -> list[dict[str, Any]]:
        """The tools as OpenAI function definitions."""
        def tool(name: str, description: str, properties: dict[str, Any],
                 required: list[str]) -> dict[str, Any]:
            return {"type": "function", "function": {
                "name": name, "description": description,
                "parameters": {"type": "object", "properties": properties,
                               "required": required}}}

        path = {"type": "string", "description": "relative to the project root; '.' for it"}
        glob = {"type": "string", "description": "e.g. '*.py' or 'src/**/*.ts'"}
        return [
            tool("list_files", "List files under a folder of the project (read-only).",
                 {"path": path, "glob": glob}, ["path"]),
            tool("read_file", "Read a text file of the project, optionally lines start..end "
                 "(1-based, inclusive).", {"path": path, "start": {"type": "integer"},
                                            "end": {"type": "integer"}}, ["path"]),
            tool("search_text", "Search the project's text files with a regular expression; "
                 "returns path:line: text for each match.",
                 {"pattern": {"type": "string"}, "path": path, "glob": glob}, ["pattern"]),
        ]

    NAMES = ("list_files", "read_file", "search_text")

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; its text result, or ``error: ...`` for the agent to read (always
        valid UTF-8: a file name that is not becomes U+FFFD)."""
        text = self._run(name, arguments)
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")

    def _run(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            if name == "list_files":
                return self.list_files(_text(arguments, "path", "."), _opt(arguments, "glob"))
            if name == "read_file":
                return self.read_file(_text(arguments, "path"), _int(arguments, "start"),
                                      _int(arguments, "end"))
            if name == "search_text":
                return self.search_text(_text(arguments, "pattern"),
                                        _text(arguments, "path", "."), _opt(arguments, "glob"))
            raise ToolRefused(f"there is no tool named {name!r}")
        except ToolRefused as exc:
            return f"error: {exc}"
        except OSError as exc:  # anything the file system says: the agent reads it, the run goes on
            return f"error: {exc.strerror or type(exc).__name__}"

    # -- paths ---------------------------------------------------------------------------------

    def _resolve(self, name: str) -> tuple[Path, PurePosixPath]:
        if "\x00" in name or not name.strip():
            raise ToolRefused(f"{name!r} is not a path")
        given = PurePosixPath(name.strip())
        if given.is_absolute() or name.startswith("~"):
            raise ToolRefused(f"{name!r} is absolute; give a path relative to the project root")
        try:
            resolved = (self.root / given).resolve()
        except RuntimeError:  # Python 3.11's word for a symlink loop
            raise ToolRefused(f"{name!r} is a symbolic link loop") from None
        if not resolved.is_relative_to(self.root):
            raise ToolRefused(f"{name!r} is outside the project")
        relative = PurePosixPath(resolved.relative_to(self.root).as_posix())
        why = withheld(relative, self.allow, self.deny)
        if why is not None:
            raise ToolRefused(refusal(name, why))
        if not self._visible(relative, on_the_way=resolved.is_dir()):
            raise ToolRefused(f"{name!r} is outside this run's context_paths")
        return resolved, relative

    def _walk(self, folder: Path, glob: str | None) -> list[tuple[Path, PurePosixPath]]:
        """Regular, allowed files under ``folder``, sorted, symlinks not followed."""
        found: list[tuple[Path, PurePosixPath]] = []
        seen = 0
        for here, dirs, files in os.walk(folder):
            seen += len(dirs) + len(files)
            if seen > MAX_WALKED:
                raise ToolRefused(f"more than {MAX_WALKED} entries under {folder.name or '.'}; "
                                  "give a narrower path")
            base = PurePosixPath(Path(here).relative_to(self.root).as_posix())
            dirs[:] = sorted(d for d in dirs if not is_hidden(PurePosixPath(d), SKIP_DIRS)
                             and withheld(PurePosixPath(d), self.allow, self.deny) is None
                             and self._visible(base / d, on_the_way=True))
            for name in sorted(files):
                path = Path(here) / name
                relative = PurePosixPath(path.relative_to(self.root).as_posix())
                if (withheld(relative, self.allow, self.deny) is not None
                        or not self._visible(relative)
                        or not path.is_file() or path.is_symlink()):
                    continue
                if glob and not (fnmatch.fnmatch(str(relative), glob)
                                 or fnmatch.fnmatch(name, glob)):
                    continue
                found.append((path, relative))
        return found

    def _take(self, text: str) -> None:
        """Charge ``text`` to the run's byte budget (ToolRefused once it is spent)."""
        size = len(text.encode("utf-8", "surrogatepass"))
        with self._lock:
            if size > self.bytes_left:
                raise ToolRefused(f"this run has read its {MAX_RUN_BYTES} bytes of files; "
                                  "decide with what you have")
            self.bytes_left -= size

    # -- the tools ---------------------------------------------------------------------------

    def list_files(self, path: str = ".", glob: str | None = None) -> str:
        folder, relative = self._resolve(path)
        if not folder.is_dir():
            raise ToolRefused(f"{path!r} is not a folder")
        found = self._walk(folder, glob)
        lines = [f"{rel}  ({p.stat().st_size} bytes)" for p, rel in found[:MAX_LISTED]]
        if len(found) > MAX_LISTED:
            lines.append(f"[{len(found) - MAX_LISTED} more not shown; narrow path or glob]")
        result = "\n".join(lines) or f"no files under {relative or '.'}"
        self._take(result)
        return result

    def read_file(self, path: str, start: int | None = None, end: int | None = None) -> str:
        resolved, relative = self._resolve(path)
        text = self._read_text(resolved, relative)
        lines = text.splitlines()
        first = max(1, start or 1)
        last = min(len(lines), end or len(lines))
        body = "\n".join(lines[first - 1:last])
        note = ""
        if len(body.encode()) > MAX_READ_BYTES:
            body = body.encode()[:MAX_READ_BYTES].decode(errors="ignore")
            note = f"\n[truncated at {MAX_READ_BYTES} bytes; read a line range for more]"
        self._take(body)
        return f"{relative} lines {first}-{last} of {len(lines)}:\n{body}{note}"

    def search_text(self, pattern: str, path: str = ".", glob: str | None = None) -> str:
        import regex as regex_engine  # timeouts, and matching releases the GIL

        if len(pattern) > MAX_PATTERN_CHARS:
            raise ToolRefused(f"the pattern is over {MAX_PATTERN_CHARS} characters")
        try:
            compiled = regex_engine.compile(pattern)
        except regex_engine.error as exc:
            raise ToolRefused(f"bad regular expression: {exc}") from None
        deadline = time.monotonic() + SEARCH_TIMEOUT_S
        folder, _ = self._resolve(path)
        targets = self._walk(folder, glob) if folder.is_dir() else [self._resolve(path)]
        hits: list[str] = []
        scanned = 0
        for file, relative in targets:
            try:
                text = self._read_text(file, relative)
            except ToolRefused:
                continue  # binary, too big or linked elsewhere: not searched
            scanned += len(text)
            if scanned > MAX_SCANNED_BYTES:
                raise ToolRefused(f"the search would read over {MAX_SCANNED_BYTES} bytes; give "
                                  "a narrower path or glob")
            for number, line in enumerate(text.splitlines(), 1):
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    found = compiled.search(line[:2000], timeout=left)
                except TimeoutError:
                    raise ToolRefused(f"the search took over {SEARCH_TIMEOUT_S:g} s; use a "
                                      "simpler pattern or a narrower path") from None
                if found:
                    hits.append(f"{relative}:{number}: {line[:300]}")
                    if len(hits) == MAX_MATCHES:
                        hits.append(f"[stopped at {MAX_MATCHES} matches; narrow the search]")
                        result = "\n".join(hits)
                        self._take(result)
                        return result
        result = "\n".join(hits) or "no matches"
        self._take(result)
        return result

    def _read_text(self, path: Path, relative: PurePosixPath) -> str:
        try:  # checked on the open file (open_safely): a FIFO can neither hang nor pass
            handle = open_safely(path, MAX_FILE_BYTES)
        except UnsafeFileError as exc:
            raise ToolRefused(_not_read(relative, exc)) from None
        except OSError:
            raise ToolRefused(f"{relative} does not exist or cannot be read") from None
        try:
            with handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError:
            raise ToolRefused(f"{relative} cannot be read") from None
        if b"\x00" in data[:8192]:
            raise ToolRefused(f"{relative} looks binary; only text files are read")
        why = withheld_content(data)
        if why is not None:
            raise ToolRefused(refusal(str(relative), why))
        return data.decode("utf-8", errors="replace")


def refusal(name: str, why: str) -> str:
    """The tools' words for a file :func:`withheld` (or :func:`withheld_content`) keeps from
    the agent."""
    return f"{name!r} may hold secrets ({why}); it is never read or listed"


def _not_read(relative: PurePosixPath, refused: UnsafeFileError) -> str:
    """Why a file is not read, in the tools' words (:func:`open_safely` says which)."""
    if refused.reason == "not_regular":
        return f"{relative} is not a regular file"
    if refused.reason == "hard_links":  # another name of it may be a secret file
        return f"{relative} has other names (hard links); it is not read"
    if refused.reason == "too_big":
        return f"{relative} is {refused.size} bytes; files over {MAX_FILE_BYTES} are not read"
    return f"{relative} is a link; it is not read"  # replaced by one since it was resolved


def workspace_refusals(team: TeamConfig, workspace: Path) -> list[Refusal]:
    """The team's context_paths that are not inside ``workspace``, or an allow_secret_files
    entry the deny-list does not hold, when its agents' tools read the workspace."""
    if not team.options.workspace_tools:
        return []
    try:
        WorkspaceTools.check_paths(workspace, team.options.context_paths,
                                   team.options.allow_secret_files)
    except ConfigError as exc:
        return [Refusal(str(exc))]
    return []


def _text(arguments: dict[str, Any], key: str, default: str | None = None) -> str:
    value = arguments.get(key, default)
    if not isinstance(value, str):
        raise ToolRefused(f"{key}: expected a string")
    return value


def _opt(arguments: dict[str, Any], key: str) -> str | None:
    value = arguments.get(key)
    return value if isinstance(value, str) and value else None


def _int(arguments: dict[str, Any], key: str) -> int | None:
    value = arguments.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolRefused(f"{key}: expected a whole number")
    return value
