"""The pool's live channel: a run's statuses and events published to every front end as
they happen (:class:`LivePublisher`, fenced by the run's claim), the latest status stored
beside them, the message envelope read without parsing the rest, and the subscription that
follows it all (:func:`subscribe`). :mod:`.live` names the keys and channels."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from massgen_mcp.core.records import Event
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.pool.live import RECONNECT_S, STATUS_TTL_S, PoolConfig, connect

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

# Store a status (if any) and publish a message, unless a newer claim than ours exists.
_PUBLISH = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > tonumber(ARGV[1]) then return 0 end
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3]) end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""
# The same for every message a batch holds for one run and claim, at once: one script call
# where each message took one (a run's step is an event and a status, often more). The check is
# the same, made once for the group, and the group is applied atomically: as if its messages
# had been written one after the other before any newer claim, which one-by-one writes may
# also do. The status stored is the group's last (each would have replaced the one before);
# every message is published, in order.
_PUBLISH_MANY = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > tonumber(ARGV[1]) then return 0 end
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3]) end
for i = 5, #ARGV do redis.call('PUBLISH', ARGV[4], ARGV[i]) end
return 1
"""

async def put_status(redis: Redis, config: PoolConfig, status: StatusRecord,
                     fence: int | None) -> None:
    """Store ``status`` as the session's latest and tell every front end; written under the
    claim whose fencing token is ``fence``, unless a newer claim exists (None: a record no
    claim guards, such as a run just queued)."""
    body = status.model_dump_json()
    async with redis.pipeline(transaction=False) as pipe:
        _put(pipe, config, status.session_id, "status", body, fence)
        await pipe.execute()


def _put(pipe: Any, config: PoolConfig, session_id: str, kind: str, body: str,
         fence: int | None) -> None:
    message = _message(session_id, kind, body)
    if fence is None:
        if kind == "status":
            pipe.set(config.key("status", session_id), body, ex=STATUS_TTL_S)
        pipe.publish(config.live_channel, message)
        return
    pipe.eval(_PUBLISH, 2, config.key("fence", session_id), config.key("status", session_id),
              str(fence), body if kind == "status" else "", str(STATUS_TTL_S),
              config.live_channel, message)


_SID_PREFIX = '{"sid":"'


def _message(session_id: str, kind: str, body: str) -> str:
    return f'{{"sid":{json.dumps(session_id)},"{kind}":{body}}}'


def message_kind(data: str, session_id: str) -> str | None:
    """What a live message about ``session_id`` carries (``status``, ``event``, ``drafts``),
    read from its envelope as :func:`message_session` reads the session."""
    start = len(_SID_PREFIX) + len(session_id) + 3  # past the id, '","'
    end = data.find('"', start)
    return data[start:end] if end > 0 else None


def message_session(data: str) -> str | None:
    """The session a live message is about, without parsing the rest: a front end hears
    every message of the pool and most concern runs nobody waits on here. Session ids are
    plain (letters, digits, ``-``), so the id is the text up to the next quote."""
    if not data.startswith(_SID_PREFIX):
        return None
    end = data.find('"', len(_SID_PREFIX))
    return data[len(_SID_PREFIX):end] if end > 0 else None


# -- publishing a worker's runs --------------------------------------------------------------

class LivePublisher:
    """Sends every status and event of this worker's runs to Redis, in order, without ever
    making a run wait: the recorder's hooks only queue, and one task writes in pipelined
    batches. While Redis is away messages are dropped (logged once per outage); the record
    on disk has them, and the next status supersedes the lost ones.

    Each message carries the fencing token of the claim its run holds here (``fences``), so
    what a paused worker had queued is refused once another worker took the run over."""

    def __init__(self, redis: Redis, config: PoolConfig) -> None:
        self.redis = redis
        self.config = config
        self.fences: dict[str, int] = {}  # session -> the token of this worker's claim
        self._queue: asyncio.Queue[tuple[str, str, str, int | None]] = asyncio.Queue()
        self._failing = False

    def status(self, status: StatusRecord) -> None:
        session_id = status.session_id
        self._queue.put_nowait((session_id, "status", status.model_dump_json(),
                                self.fences.get(session_id)))

    def event(self, session_id: str, event: Event) -> None:
        self._queue.put_nowait((session_id, "event", event.to_json(),
                                self.fences.get(session_id)))

    def drafts(self, session_id: str, body: str) -> None:
        """A run's drafts now (:func:`.drafts.body`): published, never stored."""
        self._queue.put_nowait((session_id, "drafts", body, self.fences.get(session_id)))

    async def flush(self) -> None:
        """Wait until everything queued so far has been written (or dropped)."""
        await self._queue.join()

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(_latest_drafts(batch))
                if self._failing:
                    log.warning("redis is back; publishing live status again")
                self._failing = False
            except Exception as exc:  # redis errors of every kind: keep going
                if not self._failing:
                    log.warning("cannot publish live status to redis (%s); the records on "
                                "disk stay complete", exc)
                self._failing = True
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, batch: list[tuple[str, str, str, int | None]]) -> None:
        """Write ``batch`` in one pipeline (see :func:`_entries`)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry in _entries(batch):
                self._put(pipe, entry)
            await pipe.execute()

    def _put(self, pipe: Any, entry: _Group | tuple[str, str, str]) -> None:
        if not isinstance(entry, _Group):
            _put(pipe, self.config, *entry, None)
            return
        statuses = [body for kind, body in entry.messages if kind == "status"]
        pipe.eval(_PUBLISH_MANY, 2, self.config.key("fence", entry.session_id),
                  self.config.key("status", entry.session_id), str(entry.fence),
                  statuses[-1] if statuses else "", str(STATUS_TTL_S),
                  self.config.live_channel,
                  *(_message(entry.session_id, kind, body) for kind, body in entry.messages))


def _latest_drafts(batch: list[tuple[str, str, str, int | None]]
                   ) -> list[tuple[str, str, str, int | None]]:
    """``batch`` without the drafts a later drafts message of the same run replaces (each
    message holds all of a run's drafts): after a slow write, only the newest go out."""
    last = {item[0]: i for i, item in enumerate(batch) if item[1] == "drafts"}
    return [item for i, item in enumerate(batch)
            if item[1] != "drafts" or last[item[0]] == i]


@dataclass
class _Group:
    """One run's messages of a batch under one claim, written by one script call."""

    session_id: str
    fence: int
    messages: list[tuple[str, str]]  # (kind, body), in the order they were queued


def _entries(batch: list[tuple[str, str, str, int | None]]
             ) -> list[_Group | tuple[str, str, str]]:
    """``batch`` as pipeline entries: each unfenced message alone, and the fenced messages of
    one run and claim together, as a :class:`_Group` at the place of its first. Each run's
    messages keep the order they were queued in (an unfenced one ends its run's group, so a
    fenced one after it starts another); across runs, order means nothing to a reader."""
    entries: list[_Group | tuple[str, str, str]] = []
    open_groups: dict[str, _Group] = {}
    for session_id, kind, body, fence in batch:
        group = open_groups.get(session_id)
        if fence is None:
            open_groups.pop(session_id, None)
            entries.append((session_id, kind, body))
        elif group is not None and group.fence == fence:
            group.messages.append((kind, body))
        else:
            open_groups[session_id] = _Group(session_id, fence, [(kind, body)])
            entries.append(open_groups[session_id])
    return entries


# -- following the pool ----------------------------------------------------------------------

async def subscribe(config: PoolConfig, channel: str, handle: Callable[[str], None],
                    on_gap: Callable[[], None]) -> None:
    """Call ``handle`` with every message on ``channel`` until cancelled; reconnects on its
    own. ``on_gap`` runs whenever messages may have been missed (Redis went away), so
    waiters re-read what they follow instead of sleeping through a change."""
    while True:
        redis = connect(config)
        try:
            async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(channel)
                on_gap()  # anything published before the subscription took hold
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        handle(str(message["data"]))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # connection errors of every kind
            log.warning("redis subscription to %s lost (%s); reconnecting", channel, exc)
            on_gap()
        finally:
            with contextlib.suppress(Exception):
                await redis.aclose()
        await asyncio.sleep(RECONNECT_S)
