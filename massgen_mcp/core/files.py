"""Where records live, how a file is written and how one that may have been planted is read:
the home folder (``$MASSGEN_HOME``, ``.massgen`` or the user data folder); :func:`replace_file`,
which every record, report, cache, marker and config file goes through so that a reader never
sees half a file and no link is written through; :func:`open_safely` /
:func:`read_bytes_safely` / :func:`read_text_safely`, which every reader of a file that may
have been planted goes through (no link followed, regular files only, a size cap); and
:func:`open_own` and :func:`open_append`, for the few files rewritten in place under a lock (a
fence, a run's lock, a download's part) or appended to (a run's events, a coding CLI's log)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
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


def check_state_folder(home: Path) -> None:
    """Refuse, with one line (:class:`UnsafeFileError`), a records folder another local user
    could read or change, before anything is written into it: a ``.massgen`` that a cloned
    repository or another user made a link to a folder of theirs had the user's questions
    and answers written there, readable by them.

    ``home`` (as given, not resolved) must not be a link; once resolved, it and its
    ``sessions`` folder, where they exist, must be this user's; the folders above it up to
    the project root (the working directory, when the records are inside it; else only the
    folder just above) must be this user's or root's; and none may be writable by group or
    others unless it is sticky (``/tmp``, a tmpfs mounted there: no one may rename or
    remove another's entry in it, so ours stay ours). POSIX only: Windows has no uid or
    mode bits to compare (a folder's ACL says who may write it, and
    :func:`portable.owned_by_me` counts every file as the user's), and a link there takes an
    administrator or developer mode; only the link is refused there."""
    given = Path(os.path.abspath(home))
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(given).st_mode) or portable.is_junction(given):
            raise UnsafeFileError(_refusal(given, "it is a link"), reason="link")
    if sys.platform == "win32":
        return
    resolved = given.resolve()
    for own in (resolved, resolved / "sessions"):
        try:
            info = os.lstat(own)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise UnsafeFileError(_refusal(own, "it is a link"), reason="link")
        if info.st_uid != os.getuid():
            raise UnsafeFileError(_refusal(own, f"it belongs to another user (uid "
                                                f"{info.st_uid})"), reason="not_mine")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise UnsafeFileError(_refusal(own, f"other users may write it (mode "
                                                f"{info.st_mode & 0o777:o}); run: chmod go-w "
                                                f"{own}"), reason="not_mine")
    cwd = Path.cwd().resolve()
    above = ([cwd, *(parent for parent in resolved.parents if cwd in parent.parents)]
             if cwd in resolved.parents else [resolved.parent])
    for folder in above:
        try:
            info = os.stat(folder)
        except FileNotFoundError:
            continue
        if info.st_uid not in (os.getuid(), 0):
            raise UnsafeFileError(_refusal(resolved, f"{folder} belongs to another user (uid "
                                                     f"{info.st_uid})"), reason="not_mine")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise UnsafeFileError(_refusal(resolved, f"other users may write {folder} (mode "
                                                     f"{info.st_mode & 0o777:o})"),
                                  reason="not_mine")


# The records folder's own .gitignore, as pytest's, mypy's and ruff's caches have: a
# project's `git add -A` must not commit its runs (a review of the next change then read
# them as part of it). The project's own config beside them stays committable.
RECORDS_GITIGNORE = ("# massgen-mcp's records of runs and reviews: not part of the project.\n"
                     "# The project's config.yaml here stays committable.\n"
                     "*\n!config.yaml\n")


def ignore_for_git(home: Path) -> None:
    """Write :data:`RECORDS_GITIGNORE` into the records folder ``home`` unless a
    ``.gitignore`` (a project's own, or a link: never written through) is there already."""
    target = home / ".gitignore"
    if os.path.lexists(target):
        return
    with contextlib.suppress(OSError):  # a read-only home: the records are what matter
        replace_file(target, RECORDS_GITIGNORE)


def make_folders(path: Path) -> None:
    """``path`` and the folders above it that are missing, each made ``0o755`` (less what the
    umask removes): never writable by group or others, as :func:`check_state_folder` asks
    (``Path.mkdir(parents=True)`` makes the folders above with the umask's mode alone, which
    a umask of ``002`` makes group-writable)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o755)


def private_folder(path: Path) -> Path:
    """``path``, a folder only this user may enter, made ``0o700`` if missing: the per-user
    folder inside a shared one (``/tmp``) that private copies go under. Its name can be
    guessed, so another local user may have made it first, to read what goes in: what is
    there is refused (:class:`UnsafeFileError`, one line naming why and the fix) when it is
    a link, not a folder, another user's, or open to group or others; so is a folder above
    it that is another user's (but root's), or that others may write and is not sticky:
    they could rename ours away and put theirs in its place. Once checked, no one else can
    swap it: in a sticky folder only its owner renames or removes an entry.

    POSIX only beyond the link: Windows has no uid or mode bits to compare (see
    :func:`check_state_folder`); there the folder belongs in the user's own temp folder,
    private by its ACL."""
    made = False
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
        made = True
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or portable.is_junction(path):
        raise UnsafeFileError(f"{path} is a link; remove it", reason="link")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFileError(f"{path} is not a folder; remove it", reason="not_regular")
    if sys.platform == "win32":
        return path
    if made:  # a umask may have taken the owner's bits too
        os.chmod(path, stat.S_IRWXU)
        info = os.lstat(path)
    if info.st_uid != os.getuid():
        raise UnsafeFileError(f"{path} belongs to another user (uid {info.st_uid}), who may "
                              f"read what is put in it; have it removed", reason="not_mine")
    if info.st_mode & 0o077:
        raise UnsafeFileError(f"group or others may enter {path} (mode "
                              f"{info.st_mode & 0o777:o}); run: chmod 700 {path}",
                              reason="not_mine")
    above = os.stat(path.parent)
    if above.st_uid not in (os.getuid(), 0):
        raise UnsafeFileError(f"another user may replace {path}: {path.parent} is theirs "
                              f"(uid {above.st_uid})", reason="not_mine")
    if above.st_mode & 0o022 and not above.st_mode & stat.S_ISVTX:
        raise UnsafeFileError(f"others may replace {path}: they may write {path.parent}, "
                              f"which is not sticky (mode {above.st_mode & 0o7777:o})",
                              reason="not_mine")
    return path


def _refusal(folder: Path, why: str) -> str:
    return (f"records are not written into {folder}: {why}; use a folder of your own (or set "
            f"{HOME_ENV} to one)")


def replace_file(path: Path, data: bytes | str, *, mode: int = 0o644, durable: bool = False,
                 folder_may_be_link: bool = True) -> None:
    """Replace ``path`` with ``data`` (text as UTF-8) all at once: on failure the old file
    stays and no temporary file is left behind.

    Never through a link: a repository can ship a record folder with a link planted at the
    file's name or at a temporary one, to ``~/.bashrc`` say. The temporary file has a name
    no one can guess and is made new (``O_CREAT|O_EXCL|O_NOFOLLOW``, ``mode``), in the
    folder opened once (a descriptor, where the platform has them), and renamed over
    ``path``: a rename replaces a link at ``path``, it never writes through it.
    ``durable`` syncs the data to disk before the rename (a marker that vouches for a
    download); ``folder_may_be_link=False`` also refuses a link at the folder's own name
    (a session folder a repository carried), where the platform can tell."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    if not portable.DIRECTORY:  # Windows: no folder descriptors
        _write_and_rename(str(path.parent / temporary), str(path), payload, mode, durable,
                          None)
        return
    folder = os.open(path.parent, os.O_RDONLY | portable.DIRECTORY
                     | (0 if folder_may_be_link else portable.NOFOLLOW))
    try:
        _write_and_rename(temporary, path.name, payload, mode, durable, folder)
    finally:
        os.close(folder)


def create_file(path: Path, data: bytes | str, *, mode: int = 0o644) -> None:
    """Make ``path`` with ``data``, all at once, only if no entry of that name exists
    (``FileExistsError`` otherwise, a link or a folder included): the first of several
    writers wins, and what it wrote is what everyone reads. The data goes to a new temporary
    file (as :func:`replace_file`), which is then hard-linked at ``path``: ``link`` fails on
    any existing name, as ``O_CREAT|O_EXCL`` does, but the file appears whole, where an
    ``O_EXCL`` create is seen empty until it is written. A filesystem without hard links
    gets the ``O_EXCL`` create itself."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | portable.NOFOLLOW | portable.BINARY
    with os.fdopen(os.open(temporary, flags, mode), "wb") as out:
        out.write(payload)
    try:
        os.link(temporary, path)  # the source is our own new file, never a link
    except FileExistsError:
        raise
    except OSError:  # no hard links here (FAT, some network filesystems)
        with os.fdopen(os.open(path, flags, mode), "wb") as out:
            out.write(payload)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


class Folder:
    """A folder opened once, whose files are then written relative to that handle: a session
    folder swapped for a link to another place mid-run (by anyone who can write the records'
    folder) kept receiving ``status.json`` and ``result.json`` at the link's target, as every
    write looked the folder up by its path again. Here the path is looked up once, without
    following a link at its last component; every write after that is made through the
    descriptor (``dir_fd``), so a swap of the name cannot redirect it: the writes go on
    landing in the folder that was opened, wherever it has been moved.

    Windows has no folder descriptors (no ``O_DIRECTORY``, no ``dir_fd``): there the folder's
    identity (``st_dev``, ``st_ino``: the volume and file index) is taken when it is opened
    and checked before each write, and a write is refused once the name leads elsewhere or
    is a link. A swap between that check and the write can still redirect one write there;
    making a link on Windows takes an administrator or developer mode."""

    def __init__(self, path: Path, *, _fd: int | None = None) -> None:
        self.path = path
        self._fd = _fd
        self._identity: tuple[int, int] | None = None
        self._closed = False
        if _fd is not None:
            return
        if portable.DIRECTORY:
            self._fd = os.open(path, os.O_RDONLY | portable.DIRECTORY | portable.NOFOLLOW)
        else:
            self._identity = self._identity_now()

    def _identity_now(self) -> tuple[int, int]:
        info = os.lstat(self.path)
        if stat.S_ISLNK(info.st_mode) or portable.is_junction(self.path):
            raise OSError(errno.ELOOP, "a link is not followed", str(self.path))
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(self.path))
        return info.st_dev, info.st_ino

    def _checked(self) -> int | None:
        """The folder's descriptor; None on Windows, once the name is found to lead to the
        folder first opened still (else ``OSError``)."""
        if self._closed:
            raise OSError(errno.EBADF, "the folder was closed", str(self.path))
        if self._fd is not None:
            return self._fd
        if self._identity_now() != self._identity:
            raise OSError(errno.ESTALE, "the folder was replaced since it was opened",
                          str(self.path))
        return None

    def replace(self, name: str, data: bytes | str, *, mode: int = 0o644,
                durable: bool = False) -> None:
        """:func:`replace_file` for ``name`` in this folder."""
        folder = self._checked()
        payload = data.encode("utf-8") if isinstance(data, str) else data
        temporary = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        if folder is None:
            _write_and_rename(str(self.path / temporary), str(self.path / name), payload,
                              mode, durable, None)
        else:
            _write_and_rename(temporary, name, payload, mode, durable, folder)

    def append(self, name: str, *, mode: int = 0o644) -> int:
        """:func:`open_append` for ``name`` in this folder."""
        folder = self._checked()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        if folder is None:
            return _open_checked(self.path / name, flags, mode, None, False)
        return _open_checked(Path(name), flags, mode, None, False, dir_fd=folder)

    def folder(self, name: str) -> Folder:
        """The folder ``name`` in this one, made (``0o755``, as :func:`make_folders`) if
        missing, opened as this one is."""
        folder = self._checked()
        with contextlib.suppress(FileExistsError):
            os.mkdir(name if folder is not None else self.path / name, 0o755, dir_fd=folder)
        if folder is None:
            return Folder(self.path / name)
        return Folder(self.path / name, _fd=os.open(
            name, os.O_RDONLY | portable.DIRECTORY | portable.NOFOLLOW, dir_fd=folder))

    def close(self) -> None:
        self._closed = True
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _write_and_rename(temporary: str, target: str, payload: bytes, mode: int, durable: bool,
                      folder: int | None) -> None:
    """:func:`replace_file`'s work, with names relative to ``folder`` when it is given."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | portable.NOFOLLOW | portable.BINARY
    fd = os.open(temporary, flags, mode, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        if folder is None:
            portable.replace(temporary, target)  # retried on Windows while a reader holds it
        else:
            os.replace(temporary, target, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
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
    this one so too. ``reason`` says which (``link``, ``not_regular``, ``hard_links``,
    ``not_mine``, ``too_big``, ``not_text``) for a caller that words it its own way; ``size``
    is the file's size when it was too big."""

    def __init__(self, message: str, *, reason: str, size: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.size = size


def _open_checked(path: Path, flags: int, mode: int, max_bytes: int | None,
                  mine: bool, follow_link: bool = False, dir_fd: int | None = None) -> int:
    """``path`` opened through no link (:func:`portable.open_nofollow`) and checked on the
    open file, not on the name: a regular file with no other name (hard link), of at most
    ``max_bytes``, and this user's when ``mine``; else :class:`UnsafeFileError`.
    ``follow_link``: a link at ``path`` is followed (and a second name then adds nothing to
    check), the open still never waits on a FIFO and the file is still checked."""
    try:
        fd = (os.open(path, flags | portable.NONBLOCK | portable.BINARY, mode) if follow_link
              else portable.open_nofollow(path, flags, mode, dir_fd=dir_fd))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # what O_NOFOLLOW meets at a link
            raise UnsafeFileError(f"{path.name} is a link", reason="link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{path.name} is not a regular file", reason="not_regular")
        # Another name of it may be anything (a record is never linked).
        if info.st_nlink > 1 and not follow_link:
            raise UnsafeFileError(f"{path.name} has other names (hard links)",
                                  reason="hard_links")
        if mine and not portable.owned_by_me(info):
            raise UnsafeFileError(f"{path.name} is another user's", reason="not_mine")
        if max_bytes is not None and info.st_size > max_bytes:
            raise UnsafeFileError(f"{path.name} is {info.st_size} bytes; the limit is "
                                  f"{max_bytes}", reason="too_big", size=info.st_size)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_safely(path: Path, max_bytes: int, *, follow_link: bool = False) -> BinaryIO:
    """``path`` opened for reading, when it is a regular file of at most ``max_bytes`` with
    no other name (hard link), not reached through a link (its last component; the folders
    above are the caller's: a record's session folder is checked not to be a link).
    ``FileNotFoundError`` when it is missing; :class:`UnsafeFileError` naming why when it is
    not read.

    ``O_NOFOLLOW`` refuses a link where the OS has it (a ``lstat`` check first elsewhere,
    which a race could pass, but Windows needs privilege to make a link); ``O_NONBLOCK``
    makes the open of a FIFO return at once, and the ``fstat`` of the open file, not of the
    name, decides the type and the size: a check of the name first (``is_file()``) and an
    open after it leave a moment in which the name can become a FIFO.

    ``follow_link`` is for a file a person may keep as a link on purpose (a config file in a
    dotfiles repository): the link is followed, the rest is checked the same way."""
    return os.fdopen(_open_checked(path, os.O_RDONLY, 0o666, max_bytes, mine=False,
                                   follow_link=follow_link), "rb")


def open_own(path: Path, *, mode: int = 0o600, max_bytes: int | None = None,
             mine: bool = False) -> int:
    """A read-write descriptor of ``path``, created (``mode``) if missing, for a file that is
    rewritten in place and locked on this descriptor, so :func:`replace_file` cannot serve
    it (a lock on a replaced file guards nothing): a fence, a run's lock, a download's part.
    Checked as :func:`open_safely` checks (no link, a regular file with no other name, at
    most ``max_bytes``; this user's when ``mine``): a link planted at its name, to
    ``~/.bashrc`` say, would otherwise be written through."""
    return _open_checked(path, os.O_RDWR | os.O_CREAT, mode, max_bytes, mine)


def open_append(path: Path, *, mode: int = 0o644) -> int:
    """A descriptor that appends to ``path`` (created with ``mode`` if missing), checked as
    :func:`open_own` checks: an append log in a session folder (``events.jsonl``,
    ``cli.log``) that a cloned repository planted as a link would otherwise be appended
    through, into whatever file it names, when that session is resumed."""
    return _open_checked(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode, None, False)


def read_bytes_safely(path: Path, max_bytes: int, *, follow_link: bool = False) -> bytes:
    """The bytes of ``path`` as :func:`open_safely` allows them (a file that grew past the cap
    since it was opened is refused too)."""
    with open_safely(path, max_bytes, follow_link=follow_link) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{path.name} is over {max_bytes} bytes", reason="too_big")
    return data


def read_text_safely(path: Path, max_bytes: int) -> str:
    """The UTF-8 text of ``path`` as :func:`open_safely` allows it, redacted again: what a
    record holds was masked when it was written here, but a planted record was not."""
    try:
        text = read_bytes_safely(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeFileError(f"{path.name} is not UTF-8 text", reason="not_text") from None
    return redact(text)
