"""Steering a pool run from any front end: a note's request and its reply, through Redis.

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

import json
import logging
import uuid
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from massgen_mcp.consensus.steering import MAX_NOTE_CHARS
from massgen_mcp.core.errors import MassgenError
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.records.ids import check_session_id

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

WAIT_S = 5.0  # how long a front end waits for the worker's reply before withdrawing
REPLY_TTL_S = 30  # an unread reply lapses
SETTLED_TTL_S = 600  # a request's id is remembered this long (duplicates come soon or never)
MAX_REPLY_CHARS = 1_000
# A request with the longest note, every character of it escaped (six bytes each).
MAX_REQUEST_CHARS = 6 * MAX_NOTE_CHARS + 256
WITHDRAWN = "withdrawn"


class SteerRequest(BaseModel):
    """A note for the worker running session ``sid``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sid: str
    id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    note: Annotated[str, Field(min_length=1, max_length=MAX_NOTE_CHARS)]


class SteerReply(BaseModel):
    """What the worker made of a note: taken (``cleared`` votes), or refused and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    message: Annotated[str, Field(max_length=MAX_REPLY_CHARS)] = ""
    cleared: Annotated[int, Field(ge=0)] = 0


# Settle a request for this worker, if its claim on the session is still the newest (as in
# live._RENEW: ours, or lapsed and about to be renewed by us) and nobody settled it before.
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

async def send(redis: Redis, config: PoolConfig, session_id: str, note: str
               ) -> SteerReply | None:
    """Deliver ``note`` to the worker running ``session_id``: its reply, or None if no
    worker took it (none runs the session, or none answered in time)."""
    request = SteerRequest(sid=session_id, id=uuid.uuid4().hex, note=note)
    heard = await redis.publish(config.steer_channel, request.model_dump_json())
    reply = await _reply(redis, config, request.id, WAIT_S) if heard else None
    if reply is None and not await redis.set(_settled_key(config, request.id), WITHDRAWN,
                                             nx=True, ex=SETTLED_TTL_S):
        reply = await _reply(redis, config, request.id, WAIT_S)  # taken: its reply is due
    return reply


async def _reply(redis: Redis, config: PoolConfig, request_id: str, timeout_s: float
                 ) -> SteerReply | None:
    """The reply to ``request_id`` within ``timeout_s``; replies that are not a worker's are
    skipped."""
    key = _reply_key(config, request_id)
    popped: Any = await redis.blpop([key], timeout=timeout_s)
    while popped is not None:
        try:
            return SteerReply.model_validate_json(popped[1])
        except ValidationError:
            log.warning("dropped a steering reply that no worker sends (%.80s)", popped[1])
        popped = await redis.blpop([key], timeout=timeout_s)
    return None


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


async def answer(redis: Redis, config: PoolConfig, request_id: str, reply: SteerReply) -> None:
    """Give the sender the reply (kept :data:`REPLY_TTL_S`, in case it stopped waiting)."""
    key = _reply_key(config, request_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.rpush(key, reply.model_dump_json())
        pipe.expire(key, REPLY_TTL_S)
        await pipe.execute()
