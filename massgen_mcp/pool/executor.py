"""The front end's executor: runs go onto Docket's queue, workers run them.

:class:`PoolExecutor` has the same methods as the in-process
:class:`~massgen_mcp.executors.local.LocalExecutor`, so the service, the MCP tools and the
OpenAI endpoint cannot tell them apart. It keeps nothing about a run in memory: whichever
front end is asked reads the status from Redis (falling back to status.json), wakes on the
pool's live channel, and cancels and steers through Redis, so any front end serves any
session. The one thing it holds is what it heard of the agents' live drafts, which are never
stored anywhere (:mod:`.drafts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from redis.exceptions import RedisError

from massgen_mcp.consensus.steering import clean_note, not_running
from massgen_mcp.core.errors import (
    ConfigError,
    MassgenError,
    PoolUnavailableError,
    Refusal,
    SteerRefusedError,
)
from massgen_mcp.core.records import (
    Event,
    FinishReason,
    Phase,
    RequestRecord,
    RunKind,
    RunStatus,
)
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.executors import notes
from massgen_mcp.executors.seam import (
    EventListener,
    ExecutorInfo,
    Listeners,
    Progress,
    StartedRun,
    StatusListener,
    Unsubscribe,
    recorded_team,
)
from massgen_mcp.executors.waiting import (
    ChangeSignal,
    StatusCallback,
    wait_for_status,
    watch_status,
)
from massgen_mcp.pool import channel, claims, drafts, fencing, live, steering
from massgen_mcp.pool.drafts import HeardDrafts
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.pool.payloads import guard_docket
from massgen_mcp.pool.records import end_unstarted, mark_queued
from massgen_mcp.providers import preflight
from massgen_mcp.records.ids import check_session_id, new_session_id
from massgen_mcp.records.store import SessionStore
from massgen_mcp.tools.workspace import workspace_refusals

if TYPE_CHECKING:
    from docket import Docket
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 15.0  # how long cancel waits for the worker to record the end


class PoolExecutor:
    """Queues runs for the pool's workers and follows them through Redis."""

    def __init__(self, store: SessionStore, config: PoolConfig) -> None:
        fencing.check(store.home)  # one line, where records cannot be fenced
        self.store = store
        self.config = config
        self._listeners = Listeners()
        self._signals: dict[str, ChangeSignal] = {}  # sessions someone waits on or watches
        self._waiters: dict[str, int] = {}
        self.drafts = HeardDrafts()  # the latest drafts workers published, per session
        self._redis: Redis | None = None
        self._docket: Docket | None = None
        self._stack = contextlib.AsyncExitStack()
        self._feed: asyncio.Task[None] | None = None
        # A waiter re-reads at least this often, whatever the live channel says (a message
        # dropped while Redis was away); the tests set it high to prove that the live channel
        # alone wakes every waiter in time.
        self.recheck_s = SETTINGS.pool_recheck_s.read()

    def add_event_listener(self, listener: EventListener) -> Unsubscribe:
        """Follow every run's events, as the workers publish them on the live channel."""
        return self._listeners.add_event(listener)

    def add_status_listener(self, listener: StatusListener) -> Unsubscribe:
        return self._listeners.add_status(listener)

    async def open(self) -> PoolExecutor:
        """Connect to Redis and Docket and follow the live channel."""
        from docket import Docket

        guard_docket()
        self._redis = live.connect(self.config)
        self._docket = await self._stack.enter_async_context(
            Docket(name=self.config.name, url=self.config.url))
        self._docket.register(live.run_session, names=[live.TASK_NAME])
        self._feed = asyncio.create_task(channel.subscribe(
            self.config, self.config.live_channel, self._on_message, self._pulse_all),
            name="massgen-pool-feed")
        return self

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            raise RuntimeError("PoolExecutor.open() was not awaited")
        return self._redis

    @property
    def docket(self) -> Docket:
        if self._docket is None:
            raise RuntimeError("PoolExecutor.open() was not awaited")
        return self._docket

    async def aclose(self, deadline_s: float = 5.0, *, interrupt: bool = False) -> None:
        """Stop following; the runs go on in the workers (``interrupt`` changes nothing)."""
        if self._feed is not None:
            self._feed.cancel()
            await asyncio.gather(self._feed, return_exceptions=True)
        await self._stack.aclose()
        if self._redis is not None:
            await self._redis.aclose()

    # -- starting ------------------------------------------------------------------------------

    async def preflight(self, team: TeamConfig, *, workspace: Path, probe_base_urls: bool
                        ) -> list[Refusal]:
        """What holds on any machine (context_paths, model strings, keys, and each kind's
        checks marked ``anywhere``: the coding-agent CLIs' versions here, as before preflight
        had one owner). No probe of servers or offline models: a worker may see another
        network and has a cache of its own, and reports what it lacks at its first call."""
        return [*workspace_refusals(team, workspace), *await preflight.anywhere(team)]

    async def prepare(self, team: TeamConfig, progress: Progress) -> None:
        """Nothing: each worker fetches the bundled model itself, on its first run."""

    async def start(self, request: RequestRecord, team: TeamConfig) -> StartedRun:
        """Write the record of ``request``, mark it queued and put it on the queue; returns
        at once. Its ``kind`` is recorded as a plain run: the queue carries none, so eval's
        runs here stay listed."""
        inline = [a.id for a in team.agents if a.api_key is not None]
        if inline:
            raise ConfigError(
                f"agents {', '.join(inline)}: an inline api_key cannot travel to a pool "
                "worker (keys never go through Redis); set the key in the workers' "
                "environment and name it with api_key_env")
        session_id = new_session_id()
        request = request.model_copy(update={"kind": RunKind.RUN})
        # Record files may live on a network share: their I/O stays off the event loop.
        recorder = await asyncio.to_thread(partial(
            self.store.create, session_id, config=team.redacted(), request=request))
        recorder.close()
        try:
            await self._enqueue(session_id, team)
        except BaseException:
            # Not queued: no record either, so nothing waits for a worker that never comes.
            await asyncio.to_thread(shutil.rmtree, recorder.folder, True)
            raise
        return StartedRun(session_id, recorder.folder, notes=request.notes)

    async def resume(self, session_id: str, team: TeamConfig) -> StartedRun:
        """Queue a recorded run again; the worker continues from its record. If Redis
        fails half-way, the record says queued with nothing on the queue: resume_session
        takes such a run again (the error says so)."""
        await self._enqueue(session_id, team)
        return StartedRun(session_id, self.store.folder(session_id))

    async def _enqueue(self, session_id: str, team: TeamConfig) -> None:
        try:
            # Redis first: while it is away nothing is written and the caller is told.
            await self.redis.delete(self.config.key("cancel", session_id))
            queued = await asyncio.to_thread(mark_queued, self.store, session_id, team)
            await self._publish(queued)
            await claims.mark_queued(self.redis, self.config, session_id)
            await live.retrying(self.docket.add(live.TASK_NAME), session_id)
        except RedisError as exc:
            raise PoolUnavailableError(
                f"the pool's Redis ({live.redact_url(self.config.url)}) did not take the "
                f"run: {exc}. Check that Redis is up; a resumed run can be resumed again "
                "once it is") from exc

    async def _publish(self, status: StatusRecord | None) -> None:
        """What this front end wrote to a record, for every reader (Redis's copy would
        otherwise still say what the last worker left)."""
        if status is not None:
            await channel.put_status(self.redis, self.config, status, None)

    # -- reading -------------------------------------------------------------------------------

    async def status(self, session_id: str) -> StatusRecord:
        """The latest status a worker published, else status.json (Redis away, or a run
        from before the pool), with the drafts its worker last published."""
        return self.drafts.merged(await self._status(session_id))

    async def _status(self, session_id: str) -> StatusRecord:
        try:
            body = await self.redis.get(self.config.key("status", session_id))
        except Exception as exc:  # any redis failure: the files still answer
            log.debug("status from redis failed: %s", exc)
            body = None
        if body:
            with contextlib.suppress(ValidationError):
                found = StatusRecord.model_validate_json(body)
                if found.session_id == session_id:  # not another run's, copied there
                    return found
            await self._drop(self.config.key("status", session_id), str(body))
        return await asyncio.to_thread(self.store.read_status, session_id)

    async def _drop(self, key: str, body: str) -> None:
        """Delete ``key``, which does not hold what a worker puts there (anyone who can
        write to Redis can): logged once. Should a worker's status land in between, it goes
        too, and readers read status.json, which the worker wrote first, until the next."""
        log.warning("dropped %s from redis: it does not hold this session's status (%.80s)",
                    key, body)
        with contextlib.suppress(Exception):  # any redis failure: the next read tries again
            await self.redis.delete(key)

    async def result(self, session_id: str) -> ResultRecord | None:
        return await asyncio.to_thread(self.store.read_result, session_id)

    async def count_running(self) -> int:
        """Runs a worker holds now (claims), across the pool."""
        count = 0
        async for key in self.redis.scan_iter(match=self.config.key("claim", "*"), count=500):
            count += (await self.redis.get(key)) != claims.CANCELLED
        return count

    async def describe(self) -> ExecutorInfo:
        url = live.redact_url(self.config.url)
        try:
            async with asyncio.timeout(live.CHECK_S):
                await self.redis.ping()
                workers = tuple(sorted(w.name for w in await live.retrying(self.docket.workers)))
        except TimeoutError:  # frozen: how many workers live is unknown, not zero
            return ExecutorInfo("pool", url, problem=f"redis did not answer within "
                                                     f"{live.CHECK_S:g} s", surveyed=False)
        except Exception as exc:  # failing to reach Redis is the answer itself...
            if not live.retryable(exc):  # ...but a refusal (a wrong password) is the caller's
                raise
            return ExecutorInfo("pool", url, problem=f"redis unreachable: {exc}",
                                surveyed=False)
        return ExecutorInfo("pool", url, workers, None if workers else
                            "no worker seen recently; start massgen-mcp worker")

    async def recall(self, key: str) -> str | None:
        found = await self.redis.get(self.config.key("task", key))
        if not found:
            return None
        try:
            return check_session_id(str(found))
        except MassgenError as exc:  # anyone who can write to Redis can set it
            log.error("task %.80s: dropped what redis says it started (%s); starting it anew",
                      key, exc)
            return None

    async def remember(self, key: str, session_id: str) -> None:
        await self.redis.set(self.config.key("task", key), session_id, ex=live.STATUS_TTL_S)

    async def wait(self, session_id: str, timeout_s: float | None, *, until_done: bool = False,
                   after_revision: int | None = None, on_change: StatusCallback | None = None
                   ) -> StatusRecord:
        """As :meth:`LocalExecutor.wait`, woken by the pool's live channel (and re-reading
        every :attr:`recheck_s` in case the channel dropped a message)."""
        async def read() -> tuple[StatusRecord, bool]:
            return await self.status(session_id), True

        with self._following(session_id) as signal:
            return await wait_for_status(read, signal, timeout_s, until_done=until_done,
                                         after_revision=after_revision, on_change=on_change,
                                         recheck_s=self.recheck_s)

    async def watch(self, session_id: str) -> AsyncIterator[StatusRecord]:
        """As :meth:`LocalExecutor.watch`: the status now, then on every status or drafts
        message its worker publishes (and every :attr:`recheck_s`), until the run ends."""
        async def read() -> tuple[StatusRecord, bool]:
            return await self.status(session_id), True

        last: StatusRecord | None = None
        with self._following(session_id) as signal:
            async for status in watch_status(read, signal, self.recheck_s):
                if status != last:  # an event alone wakes it too, and changes nothing here
                    yield status
                last = status

    @contextlib.contextmanager
    def _following(self, session_id: str) -> Iterator[ChangeSignal]:
        """The signal the live channel pulses for ``session_id`` while someone follows it."""
        signal = self._signals.setdefault(session_id, ChangeSignal())
        self._waiters[session_id] = self._waiters.get(session_id, 0) + 1
        try:
            yield signal
        finally:
            self._waiters[session_id] -= 1
            if not self._waiters[session_id]:
                del self._waiters[session_id], self._signals[session_id]

    def _on_message(self, data: str) -> None:
        session_id = channel.message_session(data)
        if session_id is None:
            return
        kind = channel.message_kind(data, session_id)
        if kind == "drafts":
            message = drafts.read(session_id, data)
            if message is None:
                return
            self.drafts.heard(message)
        elif kind == "status" and session_id in self.drafts:
            self._forget_ended(session_id, data)
        if self._listeners:  # the CLI's progress lines
            self._notify(data)
        signal = self._signals.get(session_id)
        if signal is not None:
            signal.pulse()

    def _forget_ended(self, session_id: str, data: str) -> None:
        """Drop the drafts of a run whose status says it ended (or that went back to the
        queue), so none lingers if their last message was lost."""
        try:
            status = StatusRecord.model_validate(json.loads(data)["status"])
        except (ValueError, KeyError, TypeError, RecursionError):  # anyone can publish
            return
        if status.session_id == session_id and (status.done or status.phase is Phase.QUEUED):
            self.drafts.forget(session_id)

    def _notify(self, data: str) -> None:
        try:
            message = json.loads(data)
            session_id = str(message["sid"])
        except (ValueError, KeyError, TypeError, RecursionError):  # anyone can publish
            return
        if "event" in message:
            with contextlib.suppress(ValidationError):
                event = Event.model_validate(message["event"])
                self._listeners.event(session_id, event)
        if "status" in message:
            with contextlib.suppress(ValidationError):
                status = StatusRecord.model_validate(message["status"])
                self._listeners.status(status)

    def _pulse_all(self) -> None:
        self.drafts.clear()  # a draft's end may be among the messages missed
        for signal in self._signals.values():
            signal.pulse()

    # -- steering ------------------------------------------------------------------------------

    async def steer(self, session_id: str, note: str) -> int:
        """Deliver the user's note to the worker running the session (:mod:`.steering`);
        returns the votes it cleared. SteerRefusedError if the run is not running, is still
        queued, or its worker refuses the note or does not answer."""
        note = redact(clean_note(note))  # this process's keys never travel; the worker's
        status = await self.status(check_session_id(session_id))  # engine masks its own
        if status.status is not RunStatus.RUNNING:
            raise not_running(session_id, status.status)
        if status.phase is Phase.QUEUED:
            raise SteerRefusedError(
                f"session {session_id} is queued, waiting for a worker of the pool: a note "
                "reaches a team at work, so send it once get_status shows the run under way "
                "(or cancel the run and start it with the note in the question)")
        try:
            reply = await notes.deliver(
                steering.RedisNotes(self.redis, self.config, session_id), note, steering.WAIT_S)
        except RedisError as exc:
            raise PoolUnavailableError(
                f"the pool's Redis ({live.redact_url(self.config.url)}) did not take the "
                f"note: {exc}. Check that Redis is up, then send it again") from exc
        if reply is None:
            raise SteerRefusedError(
                f"no worker took the note for session {session_id} within "
                f"{steering.WAIT_S:g} s (its status names worker {status.worker}); if that "
                "worker has stopped, another continues the run once its lease lapses: send "
                "the note again then")
        if not reply.ok:
            raise SteerRefusedError(reply.message)
        return reply.cleared

    # -- cancelling ----------------------------------------------------------------------------

    async def cancel(self, session_id: str) -> bool:
        """Stop the run wherever it is: still queued, the record is ended here; on a
        worker, that worker stops it. False if it had already finished."""
        status = await self.status(session_id)
        if status.done:
            return False
        await self.redis.set(self.config.key("cancel", session_id), "1", ex=live.STATUS_TTL_S)
        claimed = await claims.claim(self.redis, self.config, session_id, claims.CANCELLED)
        if isinstance(claimed, int) and (await asyncio.to_thread(
                self.store.read_status, session_id)).done:  # it ended just now; Redis had
            await claims.release(self.redis, self.config, session_id,  # not heard yet
                               claims.CANCELLED)
            return False
        if isinstance(claimed, int):  # no worker has it: it never runs now
            # Fenced like a worker's claim: a worker paused past its lease must not write
            # into the record this ends.
            fence = await asyncio.to_thread(fencing.take, self.store.folder(session_id),
                                            claimed)
            if fence != claimed:
                await claims.raise_fence(self.redis, self.config, session_id, fence)
            team = await asyncio.to_thread(recorded_team, self.store, session_id)
            ended = await asyncio.to_thread(
                end_unstarted, self.store, session_id, team, RunStatus.CANCELLED,
                FinishReason.CANCELLED, fence=fence)
            if ended is not None:
                await channel.put_status(self.redis, self.config, ended, fence)
            return True
        await self.redis.publish(self.config.cancel_channel, session_id)
        status = await self.wait(session_id, CANCEL_WAIT_S, until_done=True)
        return status.status is RunStatus.CANCELLED
