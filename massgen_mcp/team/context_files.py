"""Where a run's file inputs come from: ``context_files`` and a config file path.

A :class:`Workspace` is a root folder plus one rule. Relative paths resolve against the root.
A *confined* workspace (the MCP server's, whose caller is a model) refuses absolute paths and
anything that resolves outside the root, symlinks included, and files on the secret-file
deny-list of :mod:`massgen_mcp.tools.workspace`, as context or as a config (whose errors quote
the lines they are about); as context, also what a model never sees there (``.massgen/``, a
file holding a private key: :func:`~massgen_mcp.tools.workspace.withheld`); the CLI's
workspace is not confined, because its caller is the user at a shell who can read those
files anyway.

Context files are text only and size-capped: at most 20 files, 100,000 bytes per file,
200,000 characters of context in total; binary and non-UTF-8 files are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely
from massgen_mcp.core.spec import MAX_CONTEXT_CHARS
from massgen_mcp.tools.workspace import is_denied, is_hidden, withheld, withheld_content

MAX_FILES = 20
VCS_DIRS = (".git", ".hg", ".svn")  # internals: remotes' URLs and credentials
MAX_FILE_BYTES = 100_000


@dataclass(frozen=True)
class Workspace:
    root: Path
    confined: bool = True

    def path(self, name: str, field: str) -> Path:
        """The existing file ``name`` names, or a ConfigError naming ``field``."""
        root = self.root.resolve()
        if not isinstance(name, str) or not name.strip() or "\x00" in name:
            raise ConfigError(f"{field}: {name!r} is not a file path")
        candidate = Path(name).expanduser() if not self.confined else Path(name)
        if self.confined and candidate.is_absolute():
            raise ConfigError(f"{field}: {name!r} is absolute; give a path relative to {root}")
        try:
            resolved = (root / candidate).resolve()
        except RuntimeError:  # Python 3.11's word for a symlink loop
            raise ConfigError(f"{field}: {name!r} is a symbolic link loop") from None
        if self.confined and not resolved.is_relative_to(root):
            raise ConfigError(f"{field}: {name!r} is outside {root}; only files inside the "
                              "server's working directory can be used")
        if not resolved.is_file():
            raise ConfigError(f"{field}: {name!r} does not exist or is not a file")
        return resolved

    def may_hold_secrets(self, name: str, path: Path) -> bool:
        """Whether a model's call must not use ``name`` (found at ``path`` by :meth:`path`)
        as its config, whose errors quote its lines: the workspace is confined and the name,
        or the file it leads to, is on the secret-file deny-list (which a call cannot lift)
        or inside ``.git/`` (its config holds the remotes' URLs, tokens included), ``.hg/``
        or ``.svn/``, in any letter case. The project's ``.massgen/config.yaml`` is a config
        a call may name (it asks for consent, :mod:`massgen_mcp.team.consent`)."""
        if not self.confined:
            return False
        found = path.relative_to(self.root.resolve()).as_posix()
        return any(is_denied(PurePosixPath(p)) or is_hidden(PurePosixPath(p), VCS_DIRS)
                   for p in (name, found))

    def withheld(self, name: str, path: Path) -> str | None:
        """Why a model's call may not share ``name`` (found at ``path`` by :meth:`path`) as a
        context file, or None: the workspace is confined and the name, or the file it leads
        to, is one a model never sees (:func:`massgen_mcp.tools.workspace.withheld`: the
        secret-file deny-list, which a call cannot lift; ``.git/``, ``.massgen/``), as the
        workspace tools refuse them."""
        if not self.confined:
            return None
        found = path.relative_to(self.root.resolve()).as_posix()
        return next((why for p in (name, found) if (why := withheld(PurePosixPath(p)))),
                    None)

    def _read(self, name: str, path: Path) -> bytes:
        """The file's bytes, read as every untrusted file is (:func:`read_bytes_safely`: the
        open file, not its name, decides; a FIFO never makes the read wait): a model's call
        (confined) may not share a file with other names, as another name of it may be a
        secret file; the user's own command may."""
        try:
            return read_bytes_safely(path, MAX_FILE_BYTES, follow_link=not self.confined)
        except UnsafeFileError as exc:
            if exc.reason == "too_big":
                raise ConfigError(
                    f"context_files: {name!r} is {exc.size} bytes; the limit is "
                    f"{MAX_FILE_BYTES} per file (pass an excerpt as context instead)") from None
            if exc.reason == "hard_links":
                raise ConfigError(f"context_files: {name!r} has other names (hard links); a "
                                  "model's call cannot share it (pass it yourself with "
                                  "massgen-mcp run --context-file)") from None
            raise ConfigError(f"context_files: {name!r} is not read: {exc}") from None

    def read_context_files(self, names: list[str]) -> str:
        """The files' contents wrapped as ``<file path="...">`` blocks, ready to use as
        context."""
        if len(names) > MAX_FILES:
            raise ConfigError(f"context_files: {len(names)} files; the limit is {MAX_FILES}")
        root = self.root.resolve()
        blocks = []
        total = 0
        for name in names:
            path = self.path(name, "context_files")
            why = self.withheld(name, path)
            data = self._read(name, path) if why is None else b""
            if why is None and self.confined:
                why = withheld_content(data)
            if why is not None:
                raise ConfigError(f"context_files: {name!r} may hold secrets ({why}); a "
                                  "model's call cannot share it (pass it yourself with "
                                  "massgen-mcp run --context-file)")
            if b"\x00" in data:
                raise ConfigError(f"context_files: {name!r} looks binary; only text files are "
                                  "read")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"context_files: {name!r} is not UTF-8 text") from None
            total += len(text)
            if total > MAX_CONTEXT_CHARS:
                raise ConfigError(f"context_files: more than {MAX_CONTEXT_CHARS} characters in "
                                  "total; share fewer or smaller files")
            shown = path.relative_to(root) if path.is_relative_to(root) else path
            blocks.append(f'<file path="{shown}">\n{text}\n</file>')
        return "\n".join(blocks)
