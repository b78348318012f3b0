"""What differs between Linux, macOS and Windows, in one place: every other module calls these
and imports no POSIX-only module (fcntl, resource, termios, pwd, grp) itself.

* **Open flags.** ``O_NOFOLLOW``, ``O_NONBLOCK`` and ``O_DIRECTORY`` do not exist on Windows
  (``O_BINARY`` exists only there). :func:`open_nofollow` opens without following a link at
  the name: with ``O_NOFOLLOW`` where there is one; on Windows, where only an administrator
  or developer mode can make links, the name is refused when ``lstat`` finds a link or a
  junction there (a check then an open, which a process racing us could still beat).
* **Owners.** Windows has no uid; a file there counts as ours (:func:`owned_by_me`): the
  profile folders our caches live in are the user's own by their ACLs.
* **Positioned reads and writes.** ``os.pread``/``pwrite`` are POSIX; elsewhere a seek, then
  a read or write on the same descriptor (each descriptor is used by one thread at a time).
* **File locks** (:func:`lock`, :func:`unlock`), held on the *descriptor* that also reads
  and writes the file, as the fencing tokens need (pool/fencing.py). POSIX: ``flock``,
  shared or exclusive. Windows: ``msvcrt.locking`` on one byte far past the data (Windows
  locks are mandatory, so the data itself stays readable), exclusive only: a shared lock
  there is taken as an exclusive one, which serialises the writers and keeps the guarantee.
  Written by hand, because both are a few lines of the standard library, and the locking
  libraries lock a *path* through a lock file of their own (which cannot also hold the
  token) and fall back on some file systems to a lock file's existence, which a paused or
  killed process never releases: a fence must fail closed. :func:`locks_work` says whether
  a folder's file system gives real locks.
* **Replacing a file.** On Windows a rename over a file that another process has open (a
  reader of ``status.json``, say) fails with ``PermissionError`` for as long as it is open;
  :func:`replace` tries again for a moment, as such reads take milliseconds.
* **Signals.** Windows' event loop has no ``add_signal_handler``; :func:`on_signal` falls
  back to ``signal.signal`` (Ctrl-C, Ctrl-Break) handing the callback to the loop.
  ``SIGKILL`` does not exist there either: :data:`KILL` is what kills a process outright
  (``os.kill`` on Windows is ``TerminateProcess`` whatever the number), and :data:`STOP`
  (``SIGSTOP``) is None there. For the same reason :func:`pid_alive` never asks with
  ``os.kill(pid, 0)`` there: that would end the very process it asks about.
  :func:`still_running` also compares a process's start (:func:`process_started`: Linux's
  ``/proc``, psutil elsewhere), so that a pid the system gave to a later process is not
  taken for the one that was recorded.

Child processes and what they start are :mod:`massgen_mcp.core.children`'s, which uses
these; docs/platforms.md says what each platform gives and lacks.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)  # a FIFO's open never waits for a writer
DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
BINARY: int = getattr(os, "O_BINARY", 0)  # Windows: no newline translation by the C runtime
WINDOWS = sys.platform == "win32"

STOP: int | None  # what freezes a process where it stands (None: no such signal, Windows)
if sys.platform == "win32":
    KILL = signal.SIGTERM  # os.kill is TerminateProcess: nothing can catch or ignore it
    STOP = None  # a process is suspended through psutil there (core/children.py)
else:
    KILL = signal.SIGKILL
    STOP = signal.SIGSTOP

_WINDOWS_LOCK_AT = 0x7FFF_FFF0  # the byte locked on Windows: past any data, within 32 bits
_REPLACE_RETRY_S = 2.0


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a record's writer, say; a record may be planted, so
    its pid is anyone's). POSIX: signal 0, which checks and delivers nothing. Windows:
    psutil, which opens the process to read its state; ``os.kill`` there is
    ``TerminateProcess`` whatever the signal number."""
    if pid <= 0:  # 0 and -1 name groups of processes, not one
        return False
    if sys.platform == "win32":
        import psutil

        return bool(psutil.pid_exists(pid))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: it exists
        return True
    return True


def process_started(pid: int) -> int | None:
    """When process ``pid`` started, as a number that tells it apart from a later process the
    system gave the same pid (compared for equality only, on this machine): on Linux its
    start in clock ticks since boot (``/proc/<pid>/stat``); elsewhere psutil's create time
    in hundredths of a second. None when there is no such process or it cannot be read."""
    if pid <= 0:
        return None
    if sys.platform == "linux":
        try:
            stat_line = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return None
        # "pid (name) state ppid ...": the name may hold spaces and ")"; the start is the
        # 22nd field, the 20th after the name.
        fields = stat_line[stat_line.rfind(b")") + 2:].split()
        return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None
    import psutil

    try:
        return round(psutil.Process(pid).create_time() * 100)
    except (psutil.Error, OSError):
        return None


def still_running(pid: int, started: int | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` (:func:`process_started`'s
    number; None: not known) still runs: :func:`pid_alive`, and, where its start can be read
    now, the same start: a pid the system has since given to another process is not it. A
    start that cannot be read counts as the same (the process is left alone)."""
    if not pid_alive(pid):
        return False
    now = None if started is None else process_started(pid)
    return now is None or now == started


def open_nofollow(path: str | Path, flags: int, mode: int = 0o666, *,
                  dir_fd: int | None = None) -> int:
    """``os.open(path, flags)`` that refuses a link at ``path`` (``ELOOP``, as ``O_NOFOLLOW``
    does) and never waits on a FIFO; in binary mode on Windows. ``dir_fd``: ``path`` is
    relative to that open folder (never given where there are no folder descriptors)."""
    if not NOFOLLOW:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(info.st_mode) or is_junction(path):
                raise OSError(errno.ELOOP, "a link is not followed", str(path))
    return os.open(path, flags | NOFOLLOW | NONBLOCK | BINARY, mode, dir_fd=dir_fd)


def is_junction(path: str | Path) -> bool:
    is_junction: Callable[[str | Path], bool] | None = getattr(os.path, "isjunction", None)
    return bool(is_junction and is_junction(path))  # Python 3.12+


def replace(source: str | Path, target: str | Path) -> None:
    """``os.replace``, retried on Windows while a reader holds ``target`` open (see module)."""
    if sys.platform == "win32":
        deadline = time.monotonic() + _REPLACE_RETRY_S
        while True:
            try:
                os.replace(source, target)
                return
            except PermissionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)  # another process's handle: nothing to wait on
    os.replace(source, target)


def owned_by_me(info: os.stat_result) -> bool:
    """Whether the file ``info`` describes is this user's (always, on Windows: see module)."""
    if sys.platform == "win32":
        return True
    return info.st_uid == os.getuid()


def pread(fd: int, size: int, offset: int) -> bytes:
    if sys.platform == "win32":
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)
    return os.pread(fd, size, offset)


def pwrite(fd: int, data: bytes, offset: int) -> None:
    if sys.platform == "win32":
        os.lseek(fd, offset, os.SEEK_SET)
        os.write(fd, data)
        return
    os.pwrite(fd, data, offset)


def lock(fd: int, *, shared: bool = False, wait: bool = True) -> bool:
    """Lock the open file ``fd`` (see module); False only when ``wait`` is off and another
    process holds it. Released by :func:`unlock` or by closing ``fd``."""
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_AT, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            if not wait:
                return False
        while True:  # LK_LOCK itself retries for ~10 s, then fails: go on waiting
            try:
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                return True
            except OSError:
                continue
    else:
        import fcntl

        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                        | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True


def unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_AT, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


def locks_work(folder: Path) -> str | None:
    """None if files in ``folder`` can be locked; else why not, in a few words (a file
    system without locks, e.g. some network or FUSE mounts)."""
    probe = folder / ".lock-probe"
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | BINARY, 0o600)
    except OSError as exc:
        return f"cannot create {probe}: {exc.strerror or exc}"
    try:
        lock(fd, wait=False)
        unlock(fd)
    except OSError as exc:
        return f"its file system gives no file locks ({exc.strerror or exc})"
    finally:
        os.close(fd)
    return None


def on_signal(loop: asyncio.AbstractEventLoop, signum: int, callback: Callable[[], object]
              ) -> None:
    """Call ``callback`` on ``loop`` when ``signum`` arrives (see module for Windows)."""
    try:
        loop.add_signal_handler(signum, callback)
    except NotImplementedError:  # Windows' proactor loop
        signal.signal(signum, lambda _signum, _frame: loop.call_soon_threadsafe(callback))


def off_signal(loop: asyncio.AbstractEventLoop, signum: int) -> None:
    """Undo :func:`on_signal`: ``signum`` gets its default action again (Ctrl-C raises
    KeyboardInterrupt)."""
    try:
        loop.remove_signal_handler(signum)
    except NotImplementedError:
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT
                      else signal.SIG_DFL)
