"""The reaper: a small parent that runs one command and leaves nothing of it behind (Linux).

Run by :mod:`massgen_mcp.core.children` as ``python -I -S reaper.py PARENT UNSET PROGRAM ARGV...``
(``PARENT`` our server's pid, ``UNSET`` a comma-separated list of variables to remove before
the command starts, ``PROGRAM`` the resolved path to execute, ``ARGV`` its argument vector,
``ARGV[0]`` included). It is a plain script: stdlib only, never imports massgen_mcp, so it
starts in tens of milliseconds whatever the child's environment.

It declares itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the
command starts, however deep, and even after ``setsid`` or a double-fork, is re-parented to
the reaper when its own parent dies, instead of to init. So the reaper's descendants, found by
walking ``/proc`` by parent pid, are exactly what the command started, with nothing to guess.
When the command exits, or the reaper is told to stop, it SIGKILLs every descendant, reaps
each one (giving up after ``GIVE_UP_S`` on one it may not kill), and only then exits, with
the command's exit status (a signal death is re-raised on itself, so the caller sees the same
status as without the reaper; ``-9`` when the reaper killed the command). Told to stop with
SIGTERM, SIGHUP or SIGINT (the MCP SDK's shutdown signals the whole group), the command first
gets ``TERM_GRACE_S`` to exit on its own; with SIGUSR1 (:func:`massgen_mcp.core.children.stop`, or
``PR_SET_PDEATHSIG`` when the thread that started the reaper dies) everything goes at once.
While the command runs the reaper reaps whatever orphan is re-parented to it, so nothing
stays a zombie.

Why a process of its own, rather than making the server itself a subreaper: a subreaper
server would adopt the orphans of *every* child of its process (pip, a test's redis-server,
libraries' helpers), could not tell which call or run an orphan came from when several run at
once, and would have to reap them without stealing exit statuses from asyncio's child watcher
(Python 3.11's ``ThreadedChildWatcher`` calls ``waitpid(pid)`` per child and reports 255 for a
child reaped behind its back; ``subprocess.Popen`` reads ECHILD as exit 0). Here the server's
only child is the reaper, watched like any other child; the reaper owns nobody else.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

# Linux only (prctl, /proc, sigtimedwait): massgen_mcp.core.children starts it nowhere else, and
# the type checker skips the rest of this file for the other platforms.
assert sys.platform == "linux", "the reaper runs on Linux only"

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# The MCP SDK's shutdown SIGTERMs the whole group, the command included, and SIGKILLs it 2 s
# later: the command gets TERM_GRACE_S to exit on its own before everything is killed.
GRACEFUL = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
TERM_GRACE_S = 1.0
# Kill everything now: sent by massgen_mcp.core.children.stop (a coding CLI only reads: nothing to
# save), and by the kernel when the thread that started us dies (PR_SET_PDEATHSIG).
AT_ONCE = signal.SIGUSR1
GIVE_UP_S = 3.0
# Blocked, and taken with sigtimedwait: no handler ever interrupts the reaper half-way.
_WATCHED = {signal.SIGCHLD, *GRACEFUL, AT_ONCE}


def main(argv: list[str]) -> NoReturn:
    parent, unset, program, args = int(argv[1]), argv[2], argv[3], argv[4:]
    for name in filter(None, unset.split(",")):  # what Python's start-up added (LC_CTYPE)
        os.environ.pop(name, None)
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write("massgen-mcp: not a child subreaper here (prctl refused); what "
                         f"{program} starts and detaches may outlive it\n")
    libc.prctl(PR_SET_PDEATHSIG, AT_ONCE, 0, 0, 0)
    if os.getppid() != parent:  # it died before PR_SET_PDEATHSIG took effect
        os._exit(128 + AT_ONCE)
    try:
        # The command starts with no signal blocked, and with the default action for the
        # signals Python ignores for itself, as subprocess does.
        child = os.posix_spawn(program, args, os.environ, setsigmask=(),
                               setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as exc:
        sys.stderr.write(f"massgen-mcp: could not start {program}: {exc}\n")
        os._exit(127)
    status, stop = _wait(child, None)
    if stop in GRACEFUL:
        status, _ = _wait(child, TERM_GRACE_S)
    kill_descendants(GIVE_UP_S)
    _exit_like(status if status is not None else signal.SIGKILL)  # a wait status: killed


def _wait(child: int, within_s: float | None) -> tuple[int | None, int | None]:
    """Until the command exits (its wait status, first), a stop signal comes (second), or
    ``within_s`` passes (neither). Orphans re-parented to us meanwhile are reaped."""
    deadline = None if within_s is None else time.monotonic() + within_s
    while True:
        status, _ = _reap(child)
        if status is not None:
            return status, None
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None, None
        got = (signal.sigwaitinfo(_WATCHED) if left is None
               else signal.sigtimedwait(_WATCHED, left))
        if got is None:
            return None, None
        if got.si_signo != signal.SIGCHLD:
            return None, got.si_signo


def _reap(child: int) -> tuple[int | None, bool]:
    """Reap every child that has exited: the command's wait status if it was among them, and
    whether any child is left."""
    status = None
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == child:
            status = code


def pin(pid: int) -> int | None:
    """A descriptor of the process ``pid`` names now (a pidfd, Linux 5.3+), or None (an
    older kernel, no descriptor left, the process gone): a signal sent through it reaches
    that very process or none, even once the pid is used again. Taken *before* checking what
    the process is (its parent, its environment), so that the check is of the process the
    descriptor holds: a pid alone can be freed and given to another process between a look
    at ``/proc`` and the signal."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def send(pid: int, pinned: int | None, signum: int) -> None:
    """``signum`` to the process :func:`pin` gave ``pinned`` for (to ``pid`` where there is
    none); one that is gone, or not ours to signal, is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pinned is None:
            os.kill(pid, signum)
        else:
            signal.pidfd_send_signal(pinned, signum)


def kill_pinned(pid: int, pinned: int | None) -> None:
    """SIGKILL the process :func:`pin` gave ``pinned`` for, and let the descriptor go: a
    process the sweep stopped that something else killed meanwhile frees its pid, and the
    process given that pid is not ours to kill."""
    send(pid, pinned, signal.SIGKILL)
    if pinned is not None:
        os.close(pinned)


def kill_descendants(within_s: float) -> None:
    """SIGKILL every descendant and reap it, until there is none. Nothing escapes between
    two rounds: an orphan is re-parented to us, and a process forked meanwhile is found by
    the next walk. Each is pinned (:func:`pin`) and its parent read again before it is
    signalled: a descendant that a descendant reaped since the walk frees its pid, and a
    process that got it is killed only if it is below us too. One we may not signal
    (another user's, setuid) or stuck in the kernel is given up on after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        found = descendants(os.getpid())
        below = {os.getpid(), *found}
        for pid in found:
            pinned = pin(pid)
            try:
                if pinned is None or parent_of(pid) in below:
                    send(pid, pinned, signal.SIGKILL)
            finally:
                if pinned is not None:
                    os.close(pinned)
        _, left = _reap(0)
        remaining = deadline - time.monotonic()
        if not left or remaining <= 0:
            return
        signal.sigtimedwait({signal.SIGCHLD}, remaining)


def descendants(root: int) -> list[int]:
    """Pids below ``root``, by parent pid in ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        ppid = parent_of(int(entry.name))
        if ppid is not None:  # else gone since the listing
            children.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for pid in children.get(queue.pop(), []):
            found.append(pid)
            queue.append(pid)
    return found


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` by ``/proc``, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces


def _exit_like(status: int) -> NoReturn:
    """Exit as the command did: its code, or death by its signal (without a core file)."""
    import resource  # here, not at the top: only a signal death needs it

    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
