"""Where records live and how a file is replaced: the home folder (``$MASSGEN_HOME``,
``.massgen`` or the user data folder) and :func:`atomic_write`, which every record, the consent
file and the eval results go through so that a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path

from massgen_mcp.core import portable
from massgen_mcp.core.settings import SETTINGS

HOME_ENV = SETTINGS.home.env


def default_home() -> Path:
    """``$MASSGEN_HOME`` if set, else ``.massgen`` in the current directory; if that folder
    cannot be written (hosts such as Claude Desktop start servers in ``/``), the user data
    folder (``~/.local/share/massgen-mcp`` on Linux)."""
    home = SETTINGS.home.read()
    if home is not None:
        return home
    cwd = Path.cwd()
    if os.access(cwd, os.W_OK) and cwd != Path(cwd.anchor):
        return cwd / ".massgen"
    import platformdirs

    return Path(platformdirs.user_data_dir("massgen-mcp"))


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` all at once; on failure the old file stays and no
    temporary file is left behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        portable.replace(tmp, path)  # retried on Windows while a reader holds it
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
