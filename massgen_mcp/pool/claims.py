"""Which worker runs a session: its claim (a lease renewed while it runs) and the fencing
token every claim takes, kept in Redis by atomic scripts (:mod:`.live` names the keys).
A worker that lost its claim can never write again: every write checks the token
(:mod:`.fencing`, :mod:`.channel`)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from massgen_mcp.pool.live import QUEUED_TTL_S, STATUS_TTL_S, PoolConfig

if TYPE_CHECKING:
    from redis.asyncio import Redis

# -- claims: which worker runs a session ---------------------------------------------------

# Claim the session if nobody holds it and take the next fencing token, atomically: the
# token, else who holds it. Asked again after a lost reply, it answers the same token.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return tonumber(redis.call('GET', KEYS[2]) or '0') end
if holder then return holder end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
local token = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return token
"""
# Renew our claim; take it again if it lapsed while Redis was away (and put back our token
# if Redis lost it); 0 if another has it or a newer claim was made since ours.
_RENEW = """
if tonumber(redis.call('GET', KEYS[2]) or '0') > tonumber(ARGV[3]) then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
  return 1
end
return 0
"""
# Raise the fencing counter to a token the record already holds (Redis lost the counter).
_RAISE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
CANCELLED = "cancelled"  # the claim a front end takes on a queued run it cancels


async def claim(redis: Redis, config: PoolConfig, session_id: str, holder: str) -> int | str:
    """Claim ``session_id`` for ``holder``: its fencing token if we have it now, else who
    holds it."""
    script: Awaitable[Any] = redis.eval(
        _CLAIM, 3, config.key("claim", session_id), config.key("fence", session_id),
        config.key("queued", session_id), holder, str(int(config.lease_s * 1000)),
        str(STATUS_TTL_S))
    found = await script
    return found if isinstance(found, int) else str(found)


async def mark_queued(redis: Redis, config: PoolConfig, session_id: str) -> None:
    """Note that the session goes on Docket's queue (just before it is put there), until a
    claim takes it off: the sweep leaves such a run to its queue entry. A Redis that loses
    the queue loses this mark with it; a mark whose queueing failed lapses after
    :data:`QUEUED_TTL_S`."""
    await redis.set(config.key("queued", session_id), "1", ex=QUEUED_TTL_S)


async def raise_fence(redis: Redis, config: PoolConfig, session_id: str, token: int) -> None:
    """Make Redis's counter agree with the record's when the record's is ahead."""
    script: Awaitable[Any] = redis.eval(_RAISE, 1, config.key("fence", session_id),
                                        str(token), str(STATUS_TTL_S))
    await script


async def renew(redis: Redis, config: PoolConfig, session_id: str, holder: str,
                token: int) -> bool:
    """Keep the claim alive; False if another worker holds it now, or held it since."""
    script: Awaitable[Any] = redis.eval(
        _RENEW, 2, config.key("claim", session_id), config.key("fence", session_id), holder,
        str(int(config.lease_s * 1000)), str(token), str(STATUS_TTL_S))
    return bool(await script)


async def release(redis: Redis, config: PoolConfig, session_id: str, holder: str) -> None:
    script: Awaitable[Any] = redis.eval(_RELEASE, 1, config.key("claim", session_id), holder)
    await script
