"""Read ``context_files`` for a run: confined to one root folder, text only, size-capped.

Caps: at most 20 files, 100,000 bytes per file, 200,000 characters of context in total.
Paths are relative to the root (the server's working directory); anything that resolves
outside it, symlinks included, is refused, as are binary and non-UTF-8 files.
"""

from __future__ import annotations

from pathlib import Path

from massgen_mcp.config import MAX_CONTEXT_CHARS
from massgen_mcp.errors import ConfigError

MAX_FILES = 20
MAX_FILE_BYTES = 100_000


def confine(root: Path, name: str, field: str = "context_files") -> Path:
    """Resolve ``name`` inside ``root`` (symlinks followed), or raise a ConfigError naming
    ``field``."""
    root = root.resolve()
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise ConfigError(f"{field}: {name!r} is not a file path")
    candidate = Path(name)
    if candidate.is_absolute():
        raise ConfigError(f"{field}: {name!r} is absolute; give a path relative to {root}")
    resolved = (root / candidate).resolve()
    if not resolved.is_relative_to(root):
        raise ConfigError(f"{field}: {name!r} is outside {root}; only files inside the "
                          "server's working directory can be used")
    if not resolved.is_file():
        raise ConfigError(f"{field}: {name!r} does not exist or is not a file")
    return resolved


def read_context_files(names: list[str], root: Path) -> str:
    """The files' contents wrapped as ``<file path="...">`` blocks, ready to use as context."""
    root = root.resolve()
    if len(names) > MAX_FILES:
        raise ConfigError(f"context_files: {len(names)} files; the limit is {MAX_FILES}")
    blocks = []
    total = 0
    for name in names:
        path = confine(root, name)
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"context_files: {name!r} is {size} bytes; the limit is "
                              f"{MAX_FILE_BYTES} per file (pass an excerpt as context instead)")
        data = path.read_bytes()
        if b"\x00" in data:
            raise ConfigError(f"context_files: {name!r} looks binary; only text files are read")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"context_files: {name!r} is not UTF-8 text") from None
        total += len(text)
        if total > MAX_CONTEXT_CHARS:
            raise ConfigError(f"context_files: more than {MAX_CONTEXT_CHARS} characters in "
                              "total; share fewer or smaller files")
        blocks.append(f'<file path="{path.relative_to(root)}">\n{text}\n</file>')
    return "\n".join(blocks)
