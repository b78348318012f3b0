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
is what a pool's shared ``MASSGEN_HOME`` is.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

FENCE_FILE = "fence"
_WIDTH = 20  # every token is written with this many digits, so a rewrite covers the last


class RecordFenced(asyncio.CancelledError):
    """A record refused a write: a newer claim owns it, or its writer was told to stop.

    A cancellation, not an error, on purpose: it must stop the whole run at once, and no
    ``except Exception`` on the way (provider retries, tools, the engine's crash handler) may
    treat it as a failure to record and go on making calls."""


def _read(fd: int) -> int:
    text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else 0  # a new (empty) file: no claim yet


def take(folder: Path, token: int) -> int:
    """Make ``token`` the record's newest claim and return the token in force: ``token``,
    or one above the file's when the file already holds as much (see module)."""
    fd = os.open(folder / FENCE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        token = max(token, _read(fd) + 1)
        os.pwrite(fd, f"{token:0{_WIDTH}d}\n".encode("ascii"), 0)
        os.fsync(fd)
        return token
    finally:
        os.close(fd)  # releases the lock


class Fence:
    """The check every write of one claim's recorder makes (see module)."""

    def __init__(self, folder: Path, token: int) -> None:
        self.token = token
        self._fd = os.open(folder / FENCE_FILE, os.O_RDWR | os.O_CREAT, 0o644)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the record for one write, or raise :class:`RecordFenced`."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            newest = _read(self._fd)
            if newest > self.token:
                raise RecordFenced(f"a newer claim (token {newest}) owns the record; "
                                   f"this one holds token {self.token}")
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)
