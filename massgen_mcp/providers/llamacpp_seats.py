"""The cores the embedded model decodes on, shared with the rest of the machine.

llama.cpp's threads spin at a barrier after every step, so threads beyond the free cores
stall each other (:func:`decode_threads`), and runs in several processes on one machine take
turns for the cores through seats, lock files in the user's cache (:class:`Seats`): as many
processes decode at once as their threads fit the cores, and the others wait, outside their
calls' timeouts, so two runs at once both end. Locks go through :mod:`massgen_mcp.core.portable`,
so this module imports nothing that Windows lacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from massgen_mcp.core import portable
from massgen_mcp.core.files import UnsafeFileError, open_own
from massgen_mcp.core.settings import SETTINGS

SEAT_POLL_S = 0.25  # how often a process waiting for a seat tries the seats again


def cores() -> int:
    """The cores this process may run on (its affinity where the OS says, as in a container
    limited to some CPUs)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def decode_threads(available: int | None = None) -> int:
    """How many CPU threads llama.cpp runs on (prompt and decoding):
    ``MASSGEN_LOCAL_THREADS``, else one less than the cores, up to 8, and at least 1.

    llama.cpp's threads meet at a barrier after every step and wait for each other by
    spinning (OpenMP), so one descheduled thread stalls all of them. The process itself needs
    a core too: a team's agents are decoded together in one batch
    (:data:`.llamacpp_provider.SLOTS`), but the event loop, the live drafts and the record
    run beside it, and so does the rest of the machine. Measured on 2 cores
    (``bench/run.py --only embedded``): 2 threads 100 tokens/s on an idle machine, 29 beside
    one busy process; 1 thread 69 either way; a warm 3-agent run took 33 s with 2 threads and
    18 s with 1 (issue 58)."""
    return SETTINGS.local_threads.read() or max(1, min((available or cores()) - 1, 8))


class Seats:
    """Turns at the cores for the processes of one user that run the embedded model.

    Each process loads its own model (a run in-process cannot share llama.cpp's memory), so
    two runs at once in two processes would each spin their threads on the same cores and
    both slow to a crawl (both timed out on 2 cores). There are ``cores // threads`` seats,
    each a lock file in ``folder``; a process holds one while any of its generations is under
    way, and a process that finds none free waits and tries again. The wait is the router's
    gate (``ProviderRouter.slots``), outside the call's timeout, like any queue for a slot.
    A lock dies with its process, so a killed run never keeps a seat."""

    def __init__(self, folder: Path, count: int) -> None:
        self.folder = folder
        self.count = max(1, count)
        self._fd: int | None = None  # the seat this process holds
        self._users = 0  # this process's generations in their seat
        # Held only between awaits (the router serves one event loop after another, and
        # may serve several threads' loops): no asyncio lock, which binds to one loop.
        self._lock = threading.Lock()

    def _try_seats(self) -> int | None:
        """A free seat's locked descriptor; None when every usable seat is taken. A seat
        whose file is not one (a link, a FIFO, a folder, another user's: planted, or left
        by an older version) is skipped, not allowed to turn the queue off for everyone:
        the other seats are tried, and only when none can be opened is the error raised."""
        self.folder.mkdir(parents=True, exist_ok=True)
        unusable: OSError | None = None
        opened = False
        for seat in range(self.count):
            try:
                fd = open_own(self.folder / f".llama-seat-{seat}.lock", mine=True)
            except OSError as exc:  # UnsafeFileError included; a folder there: EISDIR
                unusable = exc
                continue
            opened = True
            try:
                if portable.lock(fd, wait=False):
                    return fd
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):
                    os.close(fd)
                    raise
                return fd  # a file system without locks: no queue, as before seats
            os.close(fd)
        if not opened and unusable is not None:
            raise unusable
        return None

    def _enter(self) -> bool:
        """Take this process's seat (or join its holder); False if none is free now."""
        with self._lock:
            if self._fd is None and self._users == 0:
                try:
                    self._fd = self._try_seats()
                except (OSError, UnsafeFileError):
                    pass  # no usable cache folder: decode without a seat, as before seats
                else:
                    if self._fd is None:
                        return False
            self._users += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)  # closing the descriptor releases its lock

    @property
    def held(self) -> bool:
        """Whether this process holds a seat now."""
        return self._fd is not None

    @contextlib.asynccontextmanager
    async def seat(self) -> AsyncIterator[None]:
        while not self._enter():
            await asyncio.sleep(SEAT_POLL_S)
        try:
            yield
        finally:
            self._leave()
