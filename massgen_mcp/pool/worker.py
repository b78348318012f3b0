"""``massgen-mcp worker``: takes session ids off the pool's queue and runs them.

One Docket task, :meth:`PoolWorker.run_session`, whatever the session's state:

* it first claims the session in Redis (a lease it renews while the run goes on). Docket
  delivers at least once, so a second delivery of a session another worker still runs waits
  for that worker's claim to lapse or the run to end; one cancelled while queued is skipped;
* then it runs the session *from its record*: from the start if the record holds no events,
  else from its recorded answers and votes, so a delivery after a worker died repeats only
  the calls that were in flight when it died;
* the engine writes the record to the shared ``MASSGEN_HOME`` as in-process runs do, and every
  status and event also goes to Redis (:class:`~.live.LivePublisher`) for the front ends.

A cancel arrives on the pool's cancel channel (or, if that message was missed, as a flag read
at the next lease renewal) and stops the run like a local cancel. A steering note arrives on
the steer channel and is applied once, by the worker whose claim is the newest
(:func:`.steering.apply`); the runs' live drafts go out on the live channel, never into a key
(:mod:`.drafts`). SIGTERM or SIGINT hands every run back: each is recorded ``requeued``
(still running, phase ``queued``), queued again and released at once, so another worker
continues it without waiting for a redelivery.

A worker that cannot renew its claim for most of a lease (cut off from Redis, or another
worker took the run over) stops the run *without writing to its record*: by the time its
lease lapses someone else may own that record. A run cut off that way is queued again as soon
as Redis answers, so it is never left without a worker.

A worker that cannot notice (frozen past its lease) is stopped by its record instead: every
claim carries a fencing token, and a write under an older token than the newest is refused
(:mod:`massgen_mcp.pool.fencing`), which cancels the run before it calls a model again.
A run whose queue entry was lost (Redis restarted without persistence) is found by a periodic
sweep of the records (:mod:`.sweep`) and queued again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from massgen_mcp.core import portable
from massgen_mcp.core.errors import MassgenError, SessionStateError
from massgen_mcp.core.records import FinishReason, RunStatus
from massgen_mcp.core.run_state import Draft
from massgen_mcp.executors.host import LiveRun, RunHost
from massgen_mcp.executors.local import RUN_PARTS
from massgen_mcp.executors.seam import recorded_team
from massgen_mcp.pool import channel, claims, drafts, fencing, live, steering
from massgen_mcp.pool.channel import LivePublisher
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.pool.payloads import guard_docket
from massgen_mcp.pool.records import end_unstarted
from massgen_mcp.pool.sweep import Sweep
from massgen_mcp.providers.base import TeamProvider
from massgen_mcp.providers.preflight import missing_credentials
from massgen_mcp.records.ids import check_session_id
from massgen_mcp.records.recorder import RecordRefused
from massgen_mcp.records.store import SessionStore

if TYPE_CHECKING:
    from docket import Docket
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

STOP_DEADLINE_S = 10.0  # after SIGTERM, how long handing back may take before runs are cut
CUT_DEADLINE_S = 5.0  # then how long cut runs may take to stop before the worker exits anyway
# A run stops writing once its claim has gone unrenewed for this share of the lease, so it
# has stopped before the lease lapses and another worker may take the run.
FENCE_SHARE = 0.75


class PoolWorker:
    """One worker process: a Docket worker whose only task is running sessions."""

    def __init__(self, config: PoolConfig, store: SessionStore, provider: TeamProvider, *,
                 concurrency: int = 32) -> None:
        fencing.check(store.home)  # one line, where records cannot be fenced
        self.config = config
        self.store = store
        self.name = live.worker_name()
        self.concurrency = concurrency
        # The worker owns its runs through a run host of its own: its name stamps every
        # status, and its claims' fences guard each record (passed per run, to resume).
        self.local = RunHost(store, provider, max_running=concurrency,
                             stamp={"worker": self.name}, parts=RUN_PARTS)
        self._handing_back: set[str] = set()  # runs to queue again when they have stopped
        self._stopping = False  # SIGTERM: deliveries still claiming are handed back too
        self._sweep = Sweep(config, store, self.name, lambda sid: sid in self.local.runs,
                            self._queue)
        self._claims: dict[str, tuple[str, int]] = {}  # session -> (holder, fencing token)
        self._steering: set[asyncio.Task[None]] = set()  # notes being applied
        self._redis: Redis | None = None
        self._docket: Docket | None = None
        self._publisher: LivePublisher

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            raise RuntimeError("the worker is not serving")
        return self._redis

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        """Take runs until ``stop`` is set or SIGTERM/SIGINT arrives, then hand back the
        runs in flight and return."""
        from docket import Docket, Worker

        from massgen_mcp.team.discover import warm_up_litellm

        guard_docket()
        self._redis = live.connect(self.config)
        try:  # before "taking runs": a Redis that never answers is one line, not silence
            await live.answers(self.config, self._redis, "a worker starting")
        except BaseException:
            await self._redis.aclose()
            raise
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            portable.on_signal(loop, signum, stop.set)
        publisher = self._publisher = LivePublisher(self._redis, self.config)
        unsubscribe = [self.local.add_event_listener(publisher.event),
                       self.local.add_status_listener(publisher.status),
                       self.local.add_drafts_listener(self._publish_drafts)]
        stopped = asyncio.create_task(stop.wait(), name="massgen-stop")
        background = [
            stopped,  # owned here like the rest: cancelled and awaited however serve ends
            # Not on the first run's clock, when a run here would likely need it.
            asyncio.create_task(warm_up_litellm(), name="litellm-warm-up"),
            asyncio.create_task(publisher.run(), name="massgen-publisher"),
            asyncio.create_task(channel.subscribe(self.config, self.config.cancel_channel,
                                               self._on_cancel, lambda: None),
                                name="massgen-cancel-feed"),
            asyncio.create_task(channel.subscribe(self.config, self.config.steer_channel,
                                               self._on_steer, lambda: None),
                                name="massgen-steer-feed"),
        ]
        try:
            async with Docket(name=self.config.name, url=self.config.url) as docket:
                self._docket = docket
                docket.register(self.run_session, names=[live.TASK_NAME])
                background.append(asyncio.create_task(self._sweep.forever(self._redis),
                                                      name="massgen-sweep"))
                async with Worker(
                        docket, name=self.name, concurrency=self.concurrency,
                        redelivery_timeout=timedelta(seconds=self.config.redelivery_timeout_s),
                        reconnection_delay=timedelta(seconds=live.RECONNECT_S),
                        minimum_check_interval=timedelta(milliseconds=50)) as worker:
                    taking = asyncio.create_task(worker.run_forever(), name="massgen-worker")
                    log.info("worker %s taking runs from %s (pool %s, %d at once)", self.name,
                             live.redact_url(self.config.url), self.config.name,
                             self.concurrency)
                    await asyncio.wait({taking, stopped},
                                       return_when=asyncio.FIRST_COMPLETED)
                    await self._stop(taking)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await publisher.flush()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                portable.off_signal(loop, signum)
            for task in (*background, *self._steering):
                task.cancel()
            await asyncio.gather(*background, *self._steering, return_exceptions=True)
            for undo in unsubscribe:
                undo()
            await self._redis.aclose()
        log.info("worker %s stopped", self.name)

    async def _stop(self, taking: asyncio.Task[None]) -> None:
        """Stop taking runs, hand back the ones in flight, and give up on any that will
        not stop within the deadline (Docket redelivers those)."""
        self._stopping = True
        self.local.stop_taking()  # a delivery still starting hands its run back instead
        taking.cancel()  # Docket stops claiming and waits for the tasks in flight
        for run in list(self.local.runs.values()):
            self._stop_run(run, requeue=True)
        log.info("stopping: handing back %d run(s)", len(self._handing_back))
        _, late = await asyncio.wait({taking}, timeout=STOP_DEADLINE_S)
        if late:
            taking.cancel()  # a second cancel cuts the tasks in flight
            _, stuck = await asyncio.wait({taking}, timeout=CUT_DEADLINE_S)
            if stuck:
                log.warning("runs did not stop within %g s; exiting anyway (Docket "
                            "redelivers them)", STOP_DEADLINE_S + CUT_DEADLINE_S)
                return
        with contextlib.suppress(asyncio.CancelledError):
            await taking

    async def _queue(self, session_id: str) -> None:
        """Put the session on Docket's queue, marked queued (see :func:`claims.mark_queued`)."""
        assert self._docket is not None
        await claims.mark_queued(self.redis, self.config, session_id)
        await live.retrying(self._docket.add(live.TASK_NAME), session_id)

    def _on_cancel(self, session_id: str) -> None:
        try:
            check_session_id(session_id)
        except MassgenError as exc:  # anyone who can write to Redis can publish
            log.error("dropped a cancel that names no session: %s", exc)
            return
        run = self.local.runs.get(session_id)
        if run is not None and not run.done:
            log.info("session %s: cancelled from a front end", session_id)
            run.task.cancel()

    def _publish_drafts(self, session_id: str, current: Mapping[str, Draft],
                        revision: int) -> None:
        self._publisher.drafts(session_id,
                               drafts.body(session_id, self.name, current, revision))

    def _on_steer(self, data: str) -> None:
        """A note from a front end: applied here if this worker runs its session (every
        worker hears every note)."""
        request = steering.read(data)
        if request is None:
            return
        run = self.local.runs.get(request.sid)
        claim = self._claims.get(request.sid)
        if run is None or run.done or claim is None:
            return  # another worker's run, or nobody's: the sender hears nothing, and says so
        holder, fence = claim
        task = asyncio.create_task(
            steering.apply(self.redis, self.config, run, request, holder=holder, fence=fence,
                           worker=self.name, handing_back=self._handing_back,
                           publisher=self._publisher),
            name=f"steer:{request.sid}")
        self._steering.add(task)
        task.add_done_callback(self._steering.discard)

    # -- the task --------------------------------------------------------------------------------

    async def run_session(self, session_id: str) -> None:
        """Docket's task: run (or continue) one recorded session, once, here."""
        try:
            check_session_id(session_id)
        except MassgenError:
            log.error("dropping a queued item that is not a session id")
            return
        if session_id in self.local.runs:
            return  # a second delivery of a run this process already has
        holder = f"{self.name}/{uuid.uuid4().hex[:12]}"  # one claim per delivery
        claimed = await self._claim(session_id, holder)
        if claimed is None:  # this worker stops: the session goes back to the queue
            await self._requeue(session_id)
        if not claimed:
            return
        run: LiveRun | None = None
        try:
            status = await asyncio.to_thread(self.store.read_status, session_id)
            if not status.done:  # a late second delivery takes no fence from a finished run
                fence = await self._fence(session_id, claimed)
                self._claims[session_id] = (holder, fence)
                run = await self._start(session_id, fence)
                if run is not None:
                    await self._follow(run, holder, fence)
        except RedisError as exc:  # Redis went away before the run started: not done
            log.warning("session %s: redis failed before the run started (%s); queueing it "
                        "again", session_id, exc)
            self._handing_back.add(session_id)
        finally:
            with contextlib.suppress(Exception):
                # The final status reaches Redis before anyone may claim the session again
                # (a cancel that took the claim next would otherwise end a finished run).
                async with asyncio.timeout(5):
                    await self._publisher.flush()
            self._publisher.fences.pop(session_id, None)
            self._claims.pop(session_id, None)
            if run is not None and run.recorder.refused and session_id not in self._handing_back:
                log.warning("session %s: stopped here without writing; it is another worker's "
                            "now", session_id)
            if session_id in self._handing_back:
                self._handing_back.discard(session_id)
                await self._requeue(session_id)  # queued again before the claim goes
            with contextlib.suppress(Exception):
                await claims.release(self.redis, self.config, session_id, holder)

    async def _fence(self, session_id: str, token: int) -> int:
        """Make our claim's fencing token the record's (see pool/fencing.py), and tell
        Redis when the record was ahead of it; the token every write of this run carries."""
        fence = await asyncio.to_thread(fencing.take, self.store.folder(session_id), token)
        if fence != token:
            await claims.raise_fence(self.redis, self.config, session_id, fence)
        self._publisher.fences[session_id] = fence
        return fence

    async def _requeue(self, session_id: str) -> None:
        """Put the session on the queue again, retrying while Redis is away; a worker that
        stops gives up at its deadline (the delivery then stays pending, and Docket hands
        it to another worker after the redelivery timeout)."""
        assert self._docket is not None
        while True:
            try:
                await self._queue(session_id)
                log.info("session %s: handed back to the queue", session_id)
                return
            except Exception as exc:  # redis errors of every kind
                log.warning("session %s: cannot queue it again yet (%s)", session_id, exc)
            await asyncio.sleep(live.RECONNECT_S)

    async def _claim(self, session_id: str, holder: str) -> int | bool | None:
        """Claim the session: its fencing token; False when it is not ours to run (cancelled
        while queued, finished), None when this worker stops before the holder's claim
        lapses or Redis answers again."""
        while not self._stopping:
            try:
                other = await claims.claim(self.redis, self.config, session_id, holder)
            except RedisError as exc:  # still away after the client's retries: wait
                log.warning("session %s: cannot claim it yet (%s)", session_id, exc)
                await asyncio.sleep(live.RECONNECT_S)
                continue
            if isinstance(other, int):
                return other
            if other == claims.CANCELLED:
                return False
            status = await asyncio.to_thread(self.store.read_status, session_id)
            if status.done:
                return False
            log.info("session %s is held by %.80s; waiting for its claim to lapse",
                     session_id, other)
            await asyncio.sleep(self.config.lease_s / 4)
        return None

    async def _start(self, session_id: str, fence: int) -> LiveRun | None:
        """The session's run started here, or None if it ended without running."""
        try:
            team = await asyncio.to_thread(recorded_team, self.store, session_id)
        except MassgenError as exc:
            log.error("session %s cannot run: %s", session_id, exc)
            return None
        problem: tuple[RunStatus, FinishReason, str | None] | None = None
        if await self.redis.get(self.config.key("cancel", session_id)):
            problem = (RunStatus.CANCELLED, FinishReason.CANCELLED, None)
        elif missing := missing_credentials(team):
            problem = (RunStatus.FAILED, FinishReason.ALL_AGENTS_FAILED,
                       f"missing API keys on worker {self.name}:\n" + "\n".join(missing))
        if problem is not None:
            try:
                ended = await asyncio.to_thread(end_unstarted, self.store, session_id, team,
                                                *problem, fence=fence)
            except RecordRefused:
                return None  # another claim took it meanwhile (logged by the recorder)
            if ended is not None:
                await channel.put_status(self.redis, self.config, ended, fence)
            return None
        try:
            return await self.local.resume(session_id, team, guard=fencing.guard(fence))
        except SessionStateError:  # stopping: it was not started, so it goes back as it is
            self._handing_back.add(session_id)
            return None
        except RecordRefused:
            return None  # another claim took it meanwhile (logged by the recorder)

    async def _follow(self, run: LiveRun, holder: str, fence: int) -> None:
        """Wait for the run, renewing the claim; a lost claim or a missed cancel stops it."""
        followed = asyncio.Event()
        renewing = asyncio.create_task(self._renew(run, holder, fence, followed),
                                       name=f"renew:{run.session_id}")
        try:
            await asyncio.wait({run.task})
            # The final status reaches Redis while the claim is still ours: a claim taken
            # next (a second delivery, a cancel) would fence it out, or end a finished run.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await self._publisher.flush()
        except asyncio.CancelledError:  # Docket cut this task (shutdown deadline)
            if not run.done:
                self._stop_run(run, requeue=True)
                await asyncio.gather(run.task, return_exceptions=True)
            raise
        finally:
            # Told twice: on Python 3.11 a cancel that meets asyncio.timeout's own expiry
            # is lost (the timeout wins), so the loop also checks the event.
            followed.set()
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)

    async def _renew(self, run: LiveRun, holder: str, fence: int,
                     followed: asyncio.Event) -> None:
        """Renew the claim every quarter lease; stop the run on a missed cancel, and stop
        it without a word to its record once the claim is gone or may be (see module)."""
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while not followed.is_set():  # after the run too, while its last statuses go out
            await asyncio.sleep(self.config.lease_s / 4)
            try:
                async with asyncio.timeout(self.config.lease_s / 4):  # a hung Redis too
                    ours = await claims.renew(self.redis, self.config, run.session_id, holder,
                                            fence)
                    cancelled = await self.redis.get(self.config.key("cancel",
                                                                     run.session_id))
            except Exception as exc:  # redis errors of every kind, and the timeout
                if run.done or loop.time() - renewed < self.config.lease_s * FENCE_SHARE:
                    log.warning("session %s: cannot renew its claim (%s)", run.session_id,
                                exc)
                    continue
                log.warning("session %s: claim unrenewed for %.0f s; stopping here without "
                            "writing, to queue it again once redis answers", run.session_id,
                            loop.time() - renewed)
                run.recorder.detach("the claim went unrenewed while redis was away")
                self._stop_run(run, requeue=True)
                return
            renewed = loop.time()
            if cancelled and not run.done:
                run.task.cancel()
            elif not ours and not run.done:
                log.warning("session %s: fenced: another worker took it over; stopping here "
                            "without writing", run.session_id)
                run.recorder.detach("another worker took the run over")
                self._stop_run(run, requeue=False)

    def _stop_run(self, run: LiveRun, *, requeue: bool) -> None:
        """Stop ``run`` as handed back (recorded ``requeued``, unless its recorder was
        detached); with ``requeue`` it goes on the queue again once it has stopped."""
        if requeue:
            self._handing_back.add(run.session_id)
        run.engine.hand_back()
        run.task.cancel()
