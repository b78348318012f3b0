"""Where records live, how a file is replaced and how one that may have been planted is read:
the home folder (``$MASSGEN_HOME``, ``.massgen`` or the user data folder); :func:`atomic_write`,
which every record, the consent file and the eval results go through so that a reader never
sees half a file; and :func:`open_safely` / :func:`read_text_safely`, which every reader of a
record goes through (no link followed, regular files only, a size cap)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from massgen_mcp.core import portable
from massgen_mcp.core.secrets import redact
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


# -- reading a file that may have been planted -------------------------------------------------
#
# Records live in the project (``./.massgen``), so a cloned repository can ship them: a
# status.json that is a link to /dev/zero or to ~/.ssh/id_rsa, a FIFO whose open waits for a
# writer forever, a sparse file of many GiB. Every read of a record goes through one helper.

MIB = 1024 * 1024


class UnsafeFileError(OSError):
    """A file that is not read: a link, not a regular file, or over its size cap. An
    ``OSError``, so every caller that treats an unreadable file as missing or corrupt treats
    this one so too."""


def open_safely(path: Path, max_bytes: int) -> BinaryIO:
    """``path`` opened for reading, when it is a regular file of at most ``max_bytes`` with
    no other name (hard link), not reached through a link (its last component; the folders
    above are the caller's: a record's session folder is checked not to be a link).
    ``FileNotFoundError`` when it is missing; :class:`UnsafeFileError` naming why when it is
    not read.

    ``O_NOFOLLOW`` refuses a link where the OS has it (a ``lstat`` check first elsewhere,
    which a race could pass, but Windows needs privilege to make a link); ``O_NONBLOCK``
    makes the open of a FIFO return at once, and the ``fstat`` of the open file, not of the
    name, decides the type and the size."""
    try:
        fd = portable.open_nofollow(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # what O_NOFOLLOW meets at a link
            raise UnsafeFileError(f"{path.name} is a link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{path.name} is not a regular file")
        if info.st_nlink > 1:  # another name of it may be anything (a record is never linked)
            raise UnsafeFileError(f"{path.name} has other names (hard links)")
        if info.st_size > max_bytes:
            raise UnsafeFileError(f"{path.name} is {info.st_size} bytes; the limit is "
                                  f"{max_bytes}")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes_safely(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path`` as :func:`open_safely` allows them (a file that grew past the cap
    since it was opened is refused too)."""
    with open_safely(path, max_bytes) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{path.name} is over {max_bytes} bytes")
    return data


def read_text_safely(path: Path, max_bytes: int) -> str:
    """The UTF-8 text of ``path`` as :func:`open_safely` allows it, redacted again: what a
    record holds was masked when it was written here, but a planted record was not."""
    try:
        text = read_bytes_safely(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeFileError(f"{path.name} is not UTF-8 text") from None
    return redact(text)
