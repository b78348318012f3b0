"""Finding runs the queue lost: a run whose record says it is running or queued, but that no
worker holds and that is not queued, lost its queue entry (Redis restarted without
persistence, a queueing that failed half-way, a delivery acked by a worker that was fenced).
The records are the truth, so one worker of the pool sweeps them every period and queues such
a run again.

A run counts as lost only when it is unheld at two sweeps in a row (a holder that was only
slow to renew, on a busy event loop, has taken its lapsed claim again by then), and a run
queued again is not queued once more until :data:`SWEEP_AGAIN` has passed (a second delivery
is harmless, the claim decides, but it costs a slot).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.pool.records import pool_unfinished
from massgen_mcp.records.store import SessionStore

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

# In redelivery timeouts: how often one worker of the pool sweeps, how long a record must
# have been quiet to be a candidate, and how long a run it queued again is left to its new
# queue entry before it may be queued once more.
SWEEP_EVERY = 1.0
SWEEP_QUIET = 2.0
SWEEP_AGAIN = 10.0


class Sweep:
    """One worker's part in the pool's sweep: ``held`` says whether this worker runs a
    session, ``queue`` puts one on the queue again (marked queued)."""

    def __init__(self, config: PoolConfig, store: SessionStore, worker: str,
                 held: Callable[[str], bool], queue: Callable[[str], Awaitable[None]]) -> None:
        self.config, self.store, self.worker = config, store, worker
        self._held, self._queue = held, queue
        self._unheld: set[str] = set()  # runs the last sweep found unheld

    async def forever(self, redis: Redis) -> None:
        every = self.config.redelivery_timeout_s * SWEEP_EVERY
        while True:
            await asyncio.sleep(every)
            try:
                await self.once(redis)
            except Exception as exc:  # redis or disk trouble: the next sweep tries again
                log.warning("sweep for unheld runs failed (%s); trying again in %g s", exc,
                            every)

    async def once(self, redis: Redis) -> None:
        """Queue again every run lost this period, unless another worker sweeps it."""
        timeout = self.config.redelivery_timeout_s
        if not await redis.set(self.config.sweep_key, self.worker, nx=True,
                               px=int(timeout * SWEEP_EVERY * 1000)):
            return  # another worker sweeps this period
        quiet = await asyncio.to_thread(pool_unfinished, self.store, timeout * SWEEP_QUIET)
        unheld = set()
        for session_id in quiet:
            if self._held(session_id) or await redis.exists(
                    self.config.key("claim", session_id), self.config.key("queued", session_id)):
                continue
            unheld.add(session_id)
            # Unheld at two sweeps in a row: a holder that was only slow to renew (a busy
            # event loop) has taken its lapsed claim again by then.
            if session_id not in self._unheld or not await redis.set(
                    self.config.key("swept", session_id), "1", nx=True,
                    ex=int(timeout * SWEEP_AGAIN)):
                continue
            log.warning("session %s: its record says it is running or queued but no worker "
                        "holds it and it is not queued; queueing it again", session_id)
            await self._queue(session_id)
        self._unheld = unheld
