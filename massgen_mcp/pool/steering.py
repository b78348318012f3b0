"""Steering a pool run from any front end: the Redis
:class:`~massgen_mcp.executors.notes.NoteChannel` (:class:`RedisNotes`), whose delivery loop
(:func:`massgen_mcp.executors.notes.deliver`) and reply record are the file channel's own.

The front end that is asked (any of them) publishes the note; the worker that holds the
session's claim applies it with the engine's own checks and replies::

    channel <name>:steer             {"sid", "id", "note"}: every worker hears it; only the
                                     one running the session acts on it
    key     <name>:steer-id:<id>     whoever settles the request first: the worker that takes
                                     it (its name), or the front end that stopped waiting
                                     ("withdrawn"); SET NX, so a request is applied at most
                                     once, however often it is delivered (a PUBLISH retried
                                     after a dropped connection, a second subscription)
    list    <name>:steer-reply:<id>  the worker's reply {"ok", "message", "cleared"}, which
                                     the front end pops (BLPOP); it lapses after
                                     :data:`REPLY_TTL_S` if nobody does

A worker takes a request only while its claim is the newest (the same fencing as its
writes), so a worker paused past its lease does not apply a note the next worker never
sees; and the note itself is applied through the run's fenced record (the ``steered``
event), so a worker taking the run over replays it. The note travels only as a message:
Redis keeps no copy of it (the record does, redacted, like the question).

A front end that hears nothing within :data:`WAIT_S` withdraws the request; if a worker took
it meanwhile, it waits for that worker's reply once more. Everything read back is validated:
anyone who can write to Redis can publish a request or push a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Container
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.exceptions import RedisError

from massgen_mcp.consensus.steering import MAX_NOTE_CHARS
from massgen_mcp.core.errors import MassgenError
from massgen_mcp.executors import notes
from massgen_mcp.executors.notes import MAX_REPLY_CHARS, NoteReply
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.records.ids import check_session_id
from massgen_mcp.records.recorder import RecordRefused

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from massgen_mcp.executors.host import LiveRun
    from massgen_mcp.pool.channel import LivePublisher

log = logging.getLogger(__name__)

WAIT_S = 5.0  # how long a front end waits for the worker's reply before withdrawing
REPLY_TTL_S = 30  # an unread reply lapses
SETTLED_TTL_S = 600  # a request's id is remembered this long (duplicates come soon or never)
# A request with the longest note, every character of it escaped (six bytes each).
MAX_REQUEST_CHARS = 6 * MAX_NOTE_CHARS + 256
WITHDRAWN = "withdrawn"
# A worker's reply: {"ok", "message" (at most MAX_REPLY_CHARS), "cleared"}, every character
# escaped; a longer one is not read.
MAX_REPLY_BYTES = 6 * MAX_REPLY_CHARS + 256


class SteerRequest(BaseModel):
    """A note for the worker running session ``sid``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sid: str
    id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    note: Annotated[str, Field(min_length=1, max_length=MAX_NOTE_CHARS)]


# Settle a request for this worker, if its claim on the session is still the newest (as in
# claims._RENEW: ours, or lapsed and about to be renewed by us) and nobody settled it before.
_TAKE = """
if tonumber(redis.call('GET', KEYS[2]) or '0') > tonumber(ARGV[2]) then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
if not redis.call('SET', KEYS[3], ARGV[3], 'NX', 'EX', ARGV[4]) then return 0 end
return 1
"""


def _settled_key(config: PoolConfig, request_id: str) -> str:
    return config.key("steer-id", request_id)


def _reply_key(config: PoolConfig, request_id: str) -> str:
    return config.key("steer-reply", request_id)


# -- the front end ---------------------------------------------------------------------------

class RedisNotes:
    """The note channel of pool run ``session_id`` (:mod:`massgen_mcp.executors.notes`): a
    note is published to every worker; the one holding the run's claim settles it."""

    def __init__(self, redis: Redis, config: PoolConfig, session_id: str) -> None:
        self.redis, self.config, self.session_id = redis, config, session_id
        self._unheard: set[str] = set()  # published while no worker listened

    async def post(self, note: str) -> str | None:
        request = SteerRequest(sid=self.session_id, id=uuid.uuid4().hex, note=note)
        if not await self.redis.publish(self.config.steer_channel,
                                        request.model_dump_json()):
            self._unheard.add(request.id)  # still withdrawn, so a late worker cannot take it
        return request.id

    async def reply(self, note_id: str, timeout_s: float) -> NoteReply | None:
        """The reply within ``timeout_s``; replies that are not a worker's are skipped,
        within the same ``timeout_s`` (a writer that keeps pushing forged ones must not hold
        the sender past it) and logged once."""
        if note_id in self._unheard:
            return None
        key = _reply_key(self.config, note_id)
        deadline = time.monotonic() + timeout_s
        forged = 0
        while (left := deadline - time.monotonic()) > 0:
            # BLPOP's timeout 0 waits for ever: never ask for less than a millisecond.
            popped: Any = await self.redis.blpop([key], timeout=max(left, 0.001))
            if popped is None:
                break
            data = popped[1]
            try:
                if len(data) <= MAX_REPLY_BYTES:
                    return NoteReply.model_validate_json(data)
            except ValidationError:
                pass
            if not forged:
                log.warning("dropped a steering reply that no worker sends (%.80r)", data)
            forged += 1
        if forged > 1:
            log.warning("dropped %d steering replies that no worker sends", forged)
        return None

    async def withdraw(self, note_id: str) -> bool:
        return bool(await self.redis.set(_settled_key(self.config, note_id), WITHDRAWN,
                                         nx=True, ex=SETTLED_TTL_S))


# -- the worker ------------------------------------------------------------------------------

def read(data: str) -> SteerRequest | None:
    """The steering request ``data``, or None (logged) if it is not one a front end sends."""
    if len(data) > MAX_REQUEST_CHARS:
        log.error("dropped a steering request of %d characters", len(data))
        return None
    try:
        request = SteerRequest.model_validate(json.loads(data))
        check_session_id(request.sid)
    except (ValueError, TypeError, RecursionError, MassgenError) as exc:
        # ValidationError is a ValueError; anyone who can write to Redis can publish
        log.error("dropped a steering request that no front end sends: %.200s", exc)
        return None
    return request


async def take(redis: Redis, config: PoolConfig, request: SteerRequest, holder: str,
               fence: int, worker: str) -> bool:
    """Settle ``request`` for this worker, whose claim on its session is ``holder`` with
    fencing token ``fence``; False if it is settled already (a duplicate, or withdrawn by
    its sender) or the claim is no longer the newest."""
    script: Any = redis.eval(_TAKE, 3, config.key("claim", request.sid),
                             config.key("fence", request.sid),
                             _settled_key(config, request.id), holder, str(fence), worker,
                             str(SETTLED_TTL_S))
    return bool(await script)


async def answer(redis: Redis, config: PoolConfig, request_id: str, reply: NoteReply) -> None:
    """Give the sender the reply (kept :data:`REPLY_TTL_S`, in case it stopped waiting)."""
    key = _reply_key(config, request_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.rpush(key, reply.model_dump_json())
        pipe.expire(key, REPLY_TTL_S)
        await pipe.execute()


async def apply(redis: Redis, config: PoolConfig, run: LiveRun, request: SteerRequest, *,
                holder: str, fence: int, worker: str, handing_back: Container[str],
                publisher: LivePublisher) -> None:
    """What the worker running ``request``'s session does with it: take it (once, while its
    claim ``holder`` with fencing token ``fence`` is the newest), apply it with the engine's
    own checks, reply. ``handing_back``: the sessions this worker is handing back."""
    try:
        if not await take(redis, config, request, holder, fence, worker):
            return  # a duplicate, withdrawn by its sender, or no longer ours
    except RedisError as exc:  # the sender hears nothing, and says so
        log.warning("session %s: cannot take a note (%s)", request.sid, exc)
        return
    # A run being handed back (or fenced) may be stopped before its record takes the note:
    # the sender is told to send it again, to whichever worker runs it next.
    moving = NoteReply(ok=False, message=(
        f"session {request.sid} is moving to another worker of the pool; send the note "
        "again in a few seconds"))
    if request.sid in handing_back or run.recorder.refused is not None:
        reply = moving
    else:
        try:  # the holder's rule, as for the file channel (the engine's refusals as replies)
            reply = notes.applied(run.engine.steer, request.note)
        except RecordRefused:  # another worker took the run over meanwhile
            reply = moving
        if reply.ok:
            log.info("session %s: a note from a front end cleared %d vote(s)", request.sid,
                     reply.cleared)
    with contextlib.suppress(TimeoutError):  # the sender then reads the status the note
        async with asyncio.timeout(5):  # made (its notes, its cleared votes)
            await publisher.flush()
    try:
        await answer(redis, config, request.id, reply)
    except RedisError as exc:
        log.warning("session %s: cannot reply to a note (%s)", request.sid, exc)
