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
* **Other platforms** (macOS, the BSDs): there is no subreaper; the child leads its own
  process group and :func:`stop` SIGKILLs the group. A descendant that leaves the group
  (``setsid``, a daemon) can outlive the call there.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REAPER = Path(__file__).with_name("reaper.py")  # imported only where tracked (Linux)
STOP_GRACE_S = 5.0  # for the reaper to kill and reap a tree; SIGKILL to the group after
_EXIT_POLL_S = 0.01
# Python's start-up sets LC_CTYPE when the locale is C (PEP 538); the reaper removes it again
# unless the caller's environment has it, so the command gets exactly the environment asked.
_STARTUP_ADDS = ("LC_CTYPE",)


def tracked() -> bool:
    """Whether descendants are tracked beyond the process group (Linux, with /proc)."""
    return (sys.platform.startswith("linux") and bool(sys.executable) and REAPER.is_file()
            and os.path.isdir("/proc/self"))


def command(argv: Sequence[str], env: Mapping[str, str], cwd: str | Path | None = None
            ) -> list[str]:
    """The argument vector to spawn, in its own session (``start_new_session=True``), for
    ``argv`` to run with ``env`` in ``cwd``: under the reaper where :func:`tracked`, else
    ``argv`` itself.

    The program is looked up here as exec would (``PATH`` of ``env``, or relative to
    ``cwd``), so a missing one raises :class:`FileNotFoundError` (or
    :class:`PermissionError`) naming it, as the spawn would without the reaper."""
    if not tracked():
        return list(argv)
    program = _resolve(argv[0], env, cwd)
    unset = ",".join(name for name in _STARTUP_ADDS if name not in env)
    return [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), unset, program, *argv]


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


async def stop(proc: asyncio.subprocess.Process) -> None:
    """End ``proc`` (spawned from :func:`command`) and everything it started.

    Under the reaper: :data:`massgen_mcp.core.reaper.AT_ONCE` to the reaper, which SIGKILLs and
    reaps the whole tree at once and exits; then, and at once on other platforms or once the
    process has exited, SIGKILL to its process group, for whatever a stuck reaper left.
    Returns once the process has exited or :data:`STOP_GRACE_S` has passed after the group
    kill; its pipes are the caller's."""
    if proc.returncode is None and tracked():
        from massgen_mcp.core.reaper import AT_ONCE

        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(AT_ONCE)
        await _exited(proc, STOP_GRACE_S)
    _kill_group(proc.pid)
    await _exited(proc, STOP_GRACE_S)


def _kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid`` (a child spawned in its own session leads it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _exited(proc: asyncio.subprocess.Process, within_s: float) -> None:
    # Not proc.wait(): on Python 3.11 it also waits for the pipes to close.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within_s):
            while proc.returncode is None:
                await asyncio.sleep(_EXIT_POLL_S)
