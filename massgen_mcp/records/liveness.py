"""Whether the process that runs a session is still there, as any reader can tell.

A run's ``status.json`` says ``running`` until its process writes the last status. A process
killed with ``kill -9``, or a ``massgen-mcp run`` whose terminal closed, never writes it, and a
full disk may refuse it. A pid alone cannot tell: pids are reused, and another machine's pid
means nothing here. So the process that runs a session holds a lock on ``running.lock`` in its
folder (:class:`RunLock`) from before its first status write to after its last; the kernel
drops the lock when the process dies, however it dies. A reader (``sessions``, ``show``,
``get_status``, ``list_sessions``, in any process) that finds a ``running`` status and a free
lock knows the run is over, and shows it so (:func:`as_seen`).

The lock file also holds the run's *last word*, in bytes written when the lock was taken: a
run whose final status the disk refused writes ``failed record_write_failed`` over them, which
needs no new space, and readers show it ``failed`` rather than ``interrupted``.

The lock is ``flock`` on POSIX and ``msvcrt.locking`` of one byte past the last word on
Windows; both are released by the OS with the process. Pool runs are not locked here: a
worker pool has its own claims and sweeps, and readers leave pool-owned runs to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from massgen_mcp.core import portable
from massgen_mcp.core.files import UnsafeFileError, open_own, open_safely
from massgen_mcp.core.records import FinishReason, Phase, RunStatus
from massgen_mcp.core.run_state import StatusRecord

log = logging.getLogger(__name__)

LOCK_FILE = "running.lock"
_SLOT = 64  # bytes of the last word, written (allocated) when the lock is taken
_RUNNING = b"running"
_FAILED = b"failed record_write_failed"
_TAKE_TRIES = 100  # a reader holds the lock for a moment only
_TAKE_PAUSE_S = 0.01


class RunLock:
    """The lock a session's running process holds (see the module)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, folder: Path) -> RunLock | None:
        """Hold ``folder``'s lock, with ``running`` as its last word; None (and a warning) if
        it cannot be taken: the run goes on, and readers go by its status alone."""
        try:  # a link, FIFO or large file planted there is refused (open_own)
            fd = open_own(folder / LOCK_FILE, mode=0o644, max_bytes=4 * _SLOT)
        except UnsafeFileError:
            log.warning("session %s: cannot hold %s: %s is not a lock file this process "
                        "made", folder.name, LOCK_FILE, LOCK_FILE)
            return None
        except OSError as exc:
            log.warning("session %s: no %s: %s", folder.name, LOCK_FILE, exc)
            return None
        try:
            for _ in range(_TAKE_TRIES):
                if portable.lock(fd, wait=False):
                    lock = cls(fd)
                    lock._say(_RUNNING)
                    return lock
                time.sleep(_TAKE_PAUSE_S)
            log.warning("session %s: another process holds %s", folder.name, LOCK_FILE)
        except OSError as exc:
            log.warning("session %s: cannot hold %s: %s", folder.name, LOCK_FILE, exc)
        os.close(fd)
        return None

    def _say(self, word: bytes) -> None:
        if self._fd is not None:
            os.lseek(self._fd, 0, os.SEEK_SET)
            os.write(self._fd, word.ljust(_SLOT))

    def failed(self) -> None:
        """Leave ``failed record_write_failed`` as the run's last word (in place: no new
        space is needed, the disk may be full)."""
        with contextlib.suppress(OSError):
            self._say(_FAILED)

    def release(self) -> None:
        """Drop the lock (the run's final status is written, or could not be)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                portable.unlock(self._fd)
            os.close(self._fd)
            self._fd = None


def lock_state(folder: Path) -> tuple[bool | None, bytes]:
    """Whether the process that held ``folder``'s lock is gone (True: the lock file exists
    and no one holds it; False: someone holds it), and its last word. None when there is no
    sane lock file (a record from before locks, or one a repository carried): not known."""
    try:
        handle = open_safely(folder / LOCK_FILE, 4 * _SLOT)
    except OSError:
        return None, b""
    with handle:
        fd = handle.fileno()
        try:
            free = portable.lock(fd, shared=True, wait=False)
        except OSError:
            return None, b""
        if free:
            portable.unlock(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        return free, os.read(fd, _SLOT).strip()


def held_by_lease(status: StatusRecord) -> bool:
    """Whether the run's owner proves it is alive by a lease, not by this machine's lock: a
    run queued for an owner that holds leases, or stamped with one's name. Its death is
    judged by its lease lapsing (the owner's business), never by a lock here being free."""
    return status.worker is not None or status.phase is Phase.QUEUED


def ended(status: StatusRecord, last_word: bytes) -> StatusRecord:
    """``status`` of a run whose process is gone, as ended: ``failed`` when its last word
    says the disk refused its final status, else ``interrupted``."""
    if last_word == _FAILED:
        return status.model_copy(update={"status": RunStatus.FAILED, "phase": Phase.DONE,
                                         "finish_reason": FinishReason.RECORD_WRITE_FAILED})
    return status.model_copy(update={"status": RunStatus.INTERRUPTED, "phase": Phase.DONE,
                                     "finish_reason": FinishReason.INTERRUPTED})


def as_seen(status: StatusRecord, folder: Path) -> StatusRecord:
    """``status`` as a reader should show it: ended (:func:`ended`) when it says ``running``
    but no process holds the run's lock; otherwise as it is."""
    if status.status is not RunStatus.RUNNING or held_by_lease(status):
        return status
    free, word = lock_state(folder)
    return ended(status, word) if free else status
