"""Fencing tokens: one writer per record, even after a writer was paused past its lease.

A pool worker holds a run by a lease in Redis. A worker frozen past its lease (SIGSTOP, a VM
pause, a long GC) cannot notice that it lost the run: when it wakes, its next write lands in
a record another worker has taken over. Leases alone cannot stop that, so every claim also
gets a *fencing token*, larger than every earlier claim's, and the record refuses writers
with an older one:

* taking a claim writes its token to the session folder's ``fence`` file (:func:`take`),
  under an exclusive ``flock``, and never lowers it: a token below what the file holds (the
  pool's Redis lost its counter) is raised above it;
* every write to the record first reads the file under a shared ``flock`` held for the whole
  write (:meth:`Fence.hold`) and is refused with :class:`RecordFenced` when the file names a
  newer token. A write of the old holder therefore either lands before the new holder took
  over, or not at all.

The file is rewritten in place, never replaced by a rename: a lock on a replaced file would
guard nothing. ``flock`` works on local disks and on NFSv4 (Linux maps it to NFS locks), which
is what a pool's shared ``MASSGEN_HOME`` is. On Windows the lock is ``msvcrt.locking`` and
exclusive only (:mod:`massgen_mcp.core.portable`): writes of one claim then take turns, and the
guarantee is the same. Where the home's file system gives no lock at all, the pool refuses to
start (:func:`check`): a fence that does not lock fences nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from massgen_mcp.core import portable
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import open_own
from massgen_mcp.records.recorder import GuardFactory, RecordRefused

FENCE_FILE = "fence"
_WIDTH = 20  # every token is written with this many digits, so a rewrite covers the last


class RecordFenced(RecordRefused):
    """A record refused a write: a newer claim owns it (a cancellation, see
    :class:`~massgen_mcp.records.recorder.RecordRefused`)."""


def check(home: Path) -> None:
    """Refuse, in one line, to run a pool whose ``home`` cannot hold a fence: a file system
    without locks (see module)."""
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why: str | None = f"cannot create it ({exc.strerror or exc})"
    else:
        why = portable.locks_work(home)
    if why is not None:
        raise ConfigError(
            f"the pool cannot fence its records on {sys.platform} in {home}: {why}. Put "
            "MASSGEN_HOME on a local disk or NFSv4, or run without --redis (one server)")


def _open(folder: Path) -> int:
    """The fence, opened to be read, written and locked in place (:func:`open_own`): a link
    planted as ``fence`` by a repository that carried the session folder, or a FIFO, is
    refused (:class:`UnsafeFileError`, an ``OSError``), never written through or locked."""
    return open_own(folder / FENCE_FILE, mode=0o644)


def _read(fd: int) -> int:
    text = portable.pread(fd, 64, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else 0  # a new (empty) file: no claim yet


def take(folder: Path, token: int) -> int:
    """Make ``token`` the record's newest claim and return the token in force: ``token``,
    or one above the file's when the file already holds as much (see module)."""
    fd = _open(folder)
    try:
        portable.lock(fd)
        token = max(token, _read(fd) + 1)
        portable.pwrite(fd, f"{token:0{_WIDTH}d}\n".encode("ascii"), 0)
        os.fsync(fd)
        return token
    finally:
        os.close(fd)  # releases the lock


class Fence:
    """The check every write of one claim's recorder makes (see module)."""

    def __init__(self, folder: Path, token: int) -> None:
        self.token = token
        self._fd = _open(folder)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the record for one write, or raise :class:`RecordFenced`."""
        portable.lock(self._fd, shared=True)
        try:
            newest = _read(self._fd)
            if newest > self.token:
                raise RecordFenced(f"a newer claim (token {newest}) owns the record; "
                                   f"this one holds token {self.token}")
            yield
        finally:
            portable.unlock(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def guard(token: int) -> GuardFactory:
    """The guard a claim's recorder asks before every write: the :class:`Fence` of ``token``
    in the session's folder."""
    return lambda folder: Fence(folder, token)
