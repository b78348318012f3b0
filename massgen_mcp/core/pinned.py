"""A file fetched into a cache whose bytes are pinned (a size and a SHA-256): the one way the
embedded model (:mod:`massgen_mcp.providers.local_model`) and a pulled model
(:mod:`massgen_mcp.providers.model_hub`) come onto the disk, so that what holds for one holds
for both:

* the bytes go to a part file beside the target, made private (``0o600``), through no link
  and only as a plain file of this user's (:func:`~massgen_mcp.core.files.open_own`): a link
  planted at the part's name, to ``~/.bashrc`` say, would have a download written, then
  renamed, through it;
* never more than the pinned size is written: a server that sends more is refused at the
  first byte over, not after filling the disk;
* the whole file's size and SHA-256 are checked before the rename, and the rename is the
  install (``rename(2)`` replaces a link at the target, never writes through it), so a reader
  sees the pinned file or nothing;
* no part is left behind by any failure (a refusal, an error, an interruption), except by a
  *resumable* download interrupted with bytes on disk: its part keeps a fixed name
  (``<file>.part``) that the next call resumes from. The caller of a resumable download holds
  a lock for that name (two writers would interleave); a plain one writes to a part of its
  own (a new name no one can guess), so two processes fetching at once cannot meet. A
  process killed outright (SIGKILL, a power cut) cleans nothing up: the next plain download
  of the same file removes the parts whose writer is gone (:func:`_sweep_parts`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Literal

from massgen_mcp.core import portable
from massgen_mcp.core.files import open_own

CHUNK_BYTES = 1 << 20


class PinRefused(ValueError):
    """Bytes that are not the pinned file: more than its size (``reason="too_big"``), or,
    once whole, another size or SHA-256 (``"mismatch"``, ``got`` the SHA-256 found). The
    part was deleted. A ``ValueError``, which a caller treating bad data as such words with
    its own."""

    def __init__(self, message: str, *, reason: Literal["too_big", "mismatch"],
                 got: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.got = got


class PinnedPart:
    """The part file being filled (see :func:`fetch_pinned`): ``write`` appends, capped at
    the pinned size; ``restart`` goes back to an offset (a server that ignored a Range
    header sends the whole file again). Unbuffered, so ``have`` is always what is on disk
    and an interruption keeps every byte written."""

    def __init__(self, path: Path, out: BinaryIO, size: int) -> None:
        self.path = path
        self._out = out
        self.size = size

    @property
    def have(self) -> int:
        """The bytes on disk."""
        return os.fstat(self._out.fileno()).st_size

    def restart(self, at: int = 0) -> None:
        """Keep the first ``at`` bytes and write on from there."""
        self._out.seek(at)
        self._out.truncate()

    def write(self, chunk: bytes) -> int:
        """Append ``chunk``; the bytes on disk after it. More than the pinned size is refused
        (:class:`PinRefused`), and nothing of the chunk is written."""
        have = self._out.tell()
        if have + len(chunk) > self.size:
            raise PinRefused(f"{self.path.name}: more than the pinned {self.size:,} bytes",
                             reason="too_big")
        view = memoryview(chunk)
        while view:
            written = self._out.write(view)
            if not written:  # a raw write that wrote nothing: never loop on it
                raise OSError(errno.EIO, "the part file took no bytes", str(self.path))
            view = view[written:]
        return have + len(chunk)

    def sync(self) -> None:
        """Put the bytes written so far on the disk (what a resumed download starts from)."""
        os.fsync(self._out.fileno())

    def sha256(self) -> str:
        return sha256_of(self._out)


def sha256_of(handle: BinaryIO) -> str:
    """The SHA-256 of everything in ``handle``, read from its start a chunk at a time."""
    handle.seek(0)
    digest = hashlib.sha256()
    while chunk := handle.read(CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()


def _sweep_parts(target: Path) -> None:
    """Remove the plain parts of ``target`` (``.<name>.<pid>.<hex>.part``) whose writing
    process is gone: a model's part is ~94 MB that nothing else would ever remove. A part
    whose pid lives (another download, or a reused pid) is left alone."""
    prefix, suffix = f".{target.name}.", ".part"
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            pid, dot, token = entry.name[len(prefix):-len(suffix)].partition(".")
            if (entry.name.startswith(prefix) and entry.name.endswith(suffix) and dot
                    and pid.isdigit() and len(token) == 16
                    and entry.is_file(follow_symlinks=False)
                    and not portable.pid_alive(int(pid))):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def part_path(target: Path) -> Path:
    """The part file a resumable download of ``target`` resumes from."""
    return target.with_name(f"{target.name}.part")


def fetch_pinned(target: Path, *, size: int, sha256: str,
                 fill: Callable[[PinnedPart], None], resumable: bool = False
                 ) -> os.stat_result:
    """Install at ``target`` the file of ``size`` bytes and SHA-256 ``sha256`` that ``fill``
    writes into the part it is handed (blocking); the installed file's ``stat`` (the part's
    own: the inode a marker may vouch for). See the module for what holds on the way.

    ``resumable``: the part is ``<file>.part`` (:func:`part_path`), kept when ``fill`` fails
    with bytes written, and found again by the next call (one longer than the pin is started
    again); the caller holds a lock for it. Raises :class:`PinRefused` (the part deleted),
    :class:`~massgen_mcp.core.files.UnsafeFileError` for a part that is not a plain file of
    this user's, or whatever ``fill`` raises."""
    if resumable:
        path = part_path(target)
        fd = open_own(path, mode=0o600, mine=True)
    else:
        _sweep_parts(target)
        path = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(8)}.part")
        fd = portable.open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    keep = False
    try:
        with os.fdopen(fd, "r+b", buffering=0) as out:
            part = PinnedPart(path, out, size)
            if part.have > size:  # not this file's bytes: start again
                part.restart()
            out.seek(0, os.SEEK_END)
            try:
                fill(part)
            except PinRefused:
                raise
            except BaseException:
                keep = resumable and part.have > 0
                raise
            got = part.sha256()
            if part.have != size or got != sha256:
                raise PinRefused(
                    f"{target.name} does not match its pinned SHA-256 (got {got[:16]}..., "
                    f"expected {sha256[:16]}...)", reason="mismatch", got=got)
            part.sync()
            found = os.fstat(out.fileno())
        portable.replace(path, target)  # rename(2): replaces a link at target, never follows it
        return found
    except BaseException:
        if not keep:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
