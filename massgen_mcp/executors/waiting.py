"""Wait for a run's status to move, without ever sleeping through a change.

Every wait on a run (``run_consensus(wait_s)``, ``get_status(wait_s)``, the CLI, the Python
API, the OpenAI endpoint, a pool front end) goes through :func:`wait_for_status`, so there is
one place where a lost wake-up could hide, and it is closed by construction:

* a :class:`ChangeSignal` counts changes instead of handing out an event that a change swaps
  for a new one;
* the waiter takes the count (:meth:`ChangeSignal.mark`) *before* it reads the status it
  judges, and :meth:`ChangeSignal.wait` returns at once when the count has moved since.

So a change that lands while the waiter reads the status (a Redis round trip), or while it
reports progress to its caller (an MCP notification), wakes the next wait instead of being
lost. A lost change would leave the waiter asleep until its timeout: a run of 50 ms answered
only after the caller's whole ``wait_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from massgen_mcp.core.run_state import StatusRecord

StatusCallback = Callable[[StatusRecord], Awaitable[None]]
# The status now, and whether it can still change where the waiter looks (False: the run
# ended, or is not running in this process).
StatusReader = Callable[[], Awaitable[tuple[StatusRecord, bool]]]


class ChangeSignal:
    """A count of changes that readers can sleep on; each :meth:`pulse` is one change.

    Pulses and waits run on the event loop's thread (asyncio primitives are not thread-safe).
    """

    def __init__(self) -> None:
        self._count = 0
        self._event = asyncio.Event()

    def pulse(self) -> None:
        self._count += 1
        self._event.set()
        self._event = asyncio.Event()

    def mark(self) -> int:
        """The count now: take it before reading the state, then :meth:`wait` on it."""
        return self._count

    async def wait(self, mark: int, timeout_s: float | None) -> bool:
        """Return once a pulse has come since ``mark`` (at once if one already has), or
        after ``timeout_s``; True if woken by a change."""
        if self._count != mark:
            return True
        event = self._event  # the one the next pulse sets: nothing ran since the check
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            return False
        return True


async def wait_for_status(read: StatusReader, signal: ChangeSignal, timeout_s: float | None,
                          *, until_done: bool = False, after_revision: int | None = None,
                          on_change: StatusCallback | None = None,
                          recheck_s: float | None = None) -> StatusRecord:
    """The run's status once it has changed, or (``until_done``) once it has finished, or
    when ``timeout_s`` has passed (None: no limit).

    "Changed" means since ``after_revision`` (the ``revision`` the caller last saw) if given,
    so a change that landed between two polls is never waited past; else since now. A change
    is a new revision, phase or end: a pool worker that takes a run over numbers its
    revisions afresh. With ``until_done``, ``on_change`` is awaited with every status seen on
    the way. ``recheck_s`` re-reads at least that often whatever the signal says (a pool
    front end whose live feed may drop a message while Redis is away).
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    seen: tuple[int, str, bool] | None = None
    while True:
        mark = signal.mark()
        status, live = await read()
        if status.done or not live:
            return status
        now = (status.revision, status.phase.value, status.done)
        moved = (now != seen) if seen is not None else (
            after_revision is not None and status.revision != after_revision)
        if moved:
            if not until_done:
                return status
            if on_change is not None:
                await on_change(status)
        seen = now
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return status
        if recheck_s is not None:
            remaining = recheck_s if remaining is None else min(remaining, recheck_s)
        await signal.wait(mark, remaining)


async def watch_status(read: StatusReader, signal: ChangeSignal,
                       recheck_s: float | None = None) -> AsyncIterator[StatusRecord]:
    """The status now, then again after each pulse of ``signal``, until the run ends or is
    no longer where the watcher looks. For live views: every step and every draft, with no
    change lost (the mark is taken before each read, as in :func:`wait_for_status`);
    ``recheck_s`` as there."""
    while True:
        mark = signal.mark()
        status, live = await read()
        yield status
        if status.done or not live:
            return
        await signal.wait(mark, recheck_s)
