"""Child processes that leave nothing behind: what a child starts dies with the call or run.

Every process we start that may start others (a coding CLI per call, an MCP stdio server per
run) is spawned through :func:`command` and ended through :func:`stop`, the one mechanism for
both. A process-group kill is not enough: a grandchild that calls ``setsid``, or a daemon that
double-forks, leaves the group, and a server that exits by itself leaves its group behind with
nobody to signal it.

* **Linux**: the child runs under :mod:`massgen_mcp.core.reaper`, a small parent that is a child
  subreaper, so every descendant stays below it (orphans are re-parented to it, not to init)
  and all of them are SIGKILLed and reaped when the command exits, when :func:`stop` (or the
  death of the thread that started it) tells the reaper to, or after a short grace when the
  MCP SDK's shutdown SIGTERMs the group. That module's docstring says why the reaper is a
  process of its own rather than our server being the subreaper (asyncio's child watcher,
  concurrent runs). The spawn is in its own session, as before; if the reaper
  does not finish within :data:`STOP_GRACE_S`, :func:`stop` SIGKILLs the group.
* **macOS, the BSDs**: there is no subreaper; the child leads its own process group and
  :func:`stop` SIGKILLs the group.
* **Windows**: no process groups to signal; :func:`stop` kills the child and every process
  below it by parent pid (``psutil``), which misses one whose parent exited before.

And everywhere, a net under these: every spawn carries a *marker*, a random value in its
environment (:data:`MARKER_ENV`) that whatever it starts inherits, and :func:`stop` (or
:func:`sweep`, for an MCP server the SDK stops) kills every process that still carries it.
That catches what escaped the mechanism above: on macOS a descendant that left the group
(``setsid``, a daemon); on Linux the tree of a command that SIGKILLed its own reaper (the
reaper then cannot kill it, and the orphans go to init). What it cannot catch is a process
that also drops the marker from its environment (an ``exec`` with a clean one): only a
pid namespace or a cgroup could hold that one, and neither is there for an ordinary user
everywhere (docs/platforms.md, docs/security.md). Linux reads the environments in ``/proc``;
elsewhere ``psutil`` does (imported there only: on Linux it imports ``resource``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from massgen_mcp.core import portable

if TYPE_CHECKING:
    import psutil

REAPER = Path(__file__).with_name("reaper.py")  # imported only where tracked (Linux)
STOP_GRACE_S = 5.0  # for the reaper to kill and reap a tree; SIGKILL to the group after
# The marker sweep ends once a scan settles (at once, for any child that is not hiding); only
# a marked process that keeps a step ahead of the scans makes it go on, up to this. On a
# loaded machine a forking daemon outlived a 5 s sweep (issue 57, N1, seen under load 7).
SWEEP_LIMIT_S = 30.0
_EXIT_POLL_S = 0.01
# Python's start-up sets LC_CTYPE when the locale is C (PEP 538); the reaper removes it again
# unless the caller's environment has it, so the command gets exactly the environment asked.
_STARTUP_ADDS = ("LC_CTYPE",)
MARKER_ENV = "MASSGEN_MCP_CALL"
# Which platform's cleanup a spawn gets: sys.platform, or another one a test forces (the
# macOS path runs on Linux in tests/system/test_platforms.py).
PLATFORM = sys.platform


@dataclass(frozen=True)
class Spawn:
    """What to spawn, in its own session (``start_new_session=True``): ``argv`` with ``env``
    (the caller's environment and the :data:`MARKER_ENV` ``marker``)."""

    argv: list[str]
    env: dict[str, str]
    marker: str


def tracked() -> bool:
    """Whether descendants are tracked beyond the process group (Linux, with /proc)."""
    return (PLATFORM.startswith("linux") and bool(sys.executable) and REAPER.is_file()
            and os.path.isdir("/proc/self"))


def command(argv: Sequence[str], env: Mapping[str, str], cwd: str | Path | None = None
            ) -> Spawn:
    """How to spawn ``argv`` with ``env`` in ``cwd``: under the reaper where :func:`tracked`,
    else ``argv`` itself; with a new marker (see module).

    The program is looked up here as exec would (``PATH`` of ``env``, or relative to
    ``cwd``), so a missing one raises :class:`FileNotFoundError` (or
    :class:`PermissionError`) naming it, as the spawn would without the reaper."""
    marker = secrets.token_hex(12)
    marked = {**env, MARKER_ENV: marker}
    if not tracked():
        return Spawn(list(argv), marked, marker)
    program = _resolve(argv[0], env, cwd)
    unset = ",".join(name for name in _STARTUP_ADDS if name not in env)
    return Spawn([sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), unset, program,
                  *argv], marked, marker)


def _resolve(name: str, env: Mapping[str, str], cwd: str | Path | None) -> str:
    if os.sep in name:
        path = os.path.abspath(os.path.join(cwd or "", name))
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
        return path
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    return os.path.abspath(found)


async def stop(proc: asyncio.subprocess.Process, marker: str) -> None:
    """End ``proc`` (spawned from :func:`command` with ``marker``) and everything it started.

    Under the reaper: :data:`massgen_mcp.core.reaper.AT_ONCE` to the reaper, which SIGKILLs and
    reaps the whole tree at once and exits; then, and at once on other platforms or once the
    process has exited, a kill of its process group (of its tree, on Windows), for whatever a
    stuck reaper left; then :func:`sweep` for what carries the marker. Returns once the
    process has exited or :data:`STOP_GRACE_S` has passed after the group kill; its pipes
    are the caller's."""
    if proc.returncode is None and tracked():
        _stop_reaper(proc)
        await _exited(proc, STOP_GRACE_S)
    _kill_tree(proc.pid)
    await asyncio.to_thread(sweep, marker)
    await _exited(proc, STOP_GRACE_S)


def _stop_reaper(proc: asyncio.subprocess.Process) -> None:
    if sys.platform == "linux":
        from massgen_mcp.core.reaper import AT_ONCE

        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(AT_ONCE)


def _kill_tree(pid: int) -> None:
    """Kill process group ``pid`` (a child spawned in its own session leads it); on Windows,
    which has none to signal, the process and every process below it by parent pid."""
    if sys.platform == "win32":
        import psutil

        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(pid)
            for process in [parent, *parent.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    process.kill()
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, portable.KILL)


def sweep(marker: str, within_s: float = SWEEP_LIMIT_S) -> list[int]:
    """Kill every process whose environment carries ``marker`` (see module); the pids killed.
    Blocking: call it in a thread.

    A scan finds pids, and a pid can be gone by the time it is signalled: a daemon that
    forks and exits again and again is always one step ahead of a sweep that scans, then
    kills. So each process found is *stopped* at once (SIGSTOP; suspended on Windows), before
    the scan goes on: a stopped process can neither fork nor exit, and it stays where it is
    until the end. Scans follow, each reading only the processes no earlier scan read, until
    one reads every process it lists, finds none that carries the marker and none that was
    gone before it was read: what a process forked before it was stopped, or before it died,
    is newer than the scan that met it, so the next scan reads it. Only then, or after
    ``within_s``, is every stopped process killed. Processes are told apart by pid and a
    second identity (``/proc``'s inode, a start time), so a pid reused by a fork is read
    again."""
    deadline = time.monotonic() + within_s
    scan = _proc_scan if PLATFORM.startswith("linux") and os.path.isdir("/proc/self") \
        else _psutil_scan
    seen: set[tuple[int, float]] = set()
    stopped: dict[int, Callable[[], None]] = {}
    while not scan(marker, seen, stopped) and time.monotonic() < deadline:
        pass  # each scan reads only what is new: no wait between them
    for kill in stopped.values():
        kill()
    return list(stopped)


def _proc_scan(marker: str, seen: set[tuple[int, float]],
               stopped: dict[int, Callable[[], None]]) -> bool:
    """One scan of ``/proc`` for :func:`sweep`, newest pid first (a daemon's next pid is
    higher): stop each new process that carries ``marker`` into ``stopped``. True when the
    scan settles it (see :func:`sweep`). Each process is pinned (a pidfd) before its
    environment is read, and stopped and killed through that descriptor: a pid can be freed
    and given to another process between a look at ``/proc`` and a signal."""
    entry = f"{MARKER_ENV}={marker}".encode()
    with os.scandir("/proc") as entries:  # the inode: a new one for a pid used again
        listed = sorted(((int(item.name), item.inode()) for item in entries
                         if item.name.isdigit()), reverse=True)
    settled = True
    if sys.platform == "linux":  # sweep scans /proc there only (pidfds: Linux 5.3+)
        from massgen_mcp.core.reaper import kill_pinned, pin, send

        for key in listed:
            pid = key[0]
            if key in seen or pid == os.getpid():
                continue
            seen.add(key)
            pinned = pin(pid)  # first: the process read is then the one signalled
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except PermissionError:  # another user's: not one we could signal either
                environ = None
            except OSError:  # gone since it was listed: what it forked is newer than this
                environ, settled = None, False
            if environ is not None and not environ:  # a zombie (or no environment): read on
                settled = False
            elif environ and entry in environ.split(b"\0"):
                send(pid, pinned, signal.SIGSTOP)
                stopped[pid] = functools.partial(kill_pinned, pid, pinned)
                settled = False
                continue  # the descriptor is closed when the process is killed
            if pinned is not None:
                os.close(pinned)
    return settled


def _psutil_scan(marker: str, seen: set[tuple[int, float]],
                 stopped: dict[int, Callable[[], None]]) -> bool:
    """:func:`_proc_scan` through ``psutil`` (macOS, Windows): a process is told apart by its
    start time, stopped with ``suspend`` (SIGSTOP; ``NtSuspendProcess`` on Windows) and
    killed with ``kill``, which psutil refuses for a pid used again since."""
    import psutil

    settled = True
    for process in sorted(psutil.process_iter(), key=lambda item: item.pid, reverse=True):
        if process.pid == os.getpid():
            continue
        try:
            key = (process.pid, process.create_time())
            if key in seen:
                continue
            seen.add(key)
            marked = process.environ().get(MARKER_ENV) == marker
        except psutil.NoSuchProcess:  # gone, or a zombie (a subclass): as in _proc_scan
            settled = False
            continue
        except psutil.Error:  # not ours to read
            continue
        if marked:
            with contextlib.suppress(psutil.Error):
                process.suspend()
            stopped[process.pid] = functools.partial(_kill_process, process)
            settled = False
    return settled


def _kill_process(process: psutil.Process) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):
        process.kill()


async def _exited(proc: asyncio.subprocess.Process, within_s: float) -> None:
    # Not proc.wait(): on Python 3.11 it also waits for the pipes to close.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within_s):
            while proc.returncode is None:
                await asyncio.sleep(_EXIT_POLL_S)
