"""What the processes of a pool share through Redis, next to Docket's queue.

Keys (``<name>`` is the pool's name, ``massgen`` by default):

``<name>:status:<session>``  the run's latest status (masked JSON, as in status.json)
``<name>:claim:<session>``   the worker running it (``host#pid``), a lease renewed while it
                             runs; ``cancelled`` when a front end cancelled it while queued
``<name>:cancel:<session>``  set when a cancel was asked for, for a worker that missed the
                             message
``<name>:task:<task id>``    the session an MCP task started (so a redelivered task follows it)
channel ``<name>:live``      ``{"sid", "status"}`` and ``{"sid", "event"}`` as the run goes
channel ``<name>:cancel``    session ids to stop

Nothing here holds a key: statuses and events are masked before they are recorded
(:class:`~massgen_mcp.sessions.store.FileRecorder`), and that masked copy is what is
published (it includes the question and answer previews, as status.json does). MCP tasks'
own keys hold their call's arguments and, encrypted with FASTMCP_TASKS_ENCRYPTION_KEY, the
caller's headers. Redis is not the record: every status is also in the session's status.json, so
readers fall back to the files while Redis is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from massgen_mcp.errors import ConfigError
from massgen_mcp.records import Event, StatusRecord
from massgen_mcp.secrets import mask_url_credentials, register_secret

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

URL_ENV = "MASSGEN_REDIS_URL"
STATUS_TTL_S = 7 * 86_400  # a finished run's status stays readable from Redis for a week
RECONNECT_S = 1.0
TASK_NAME = "massgen.run_session"  # the Docket task every worker registers


async def run_session(session_id: str) -> None:
    """What a front end puts on the queue, by name (:data:`TASK_NAME`): Docket needs the
    function registered to queue it, but only workers run it, with their own
    (:meth:`massgen_mcp.pool.worker.PoolWorker.run_session`)."""
    raise RuntimeError("sessions run on massgen-mcp worker processes, not on a front end")


def redact_url(url: str) -> str:
    """The URL with its password (in the userinfo or a ``?password=`` query parameter, both
    of which redis-py reads) replaced by ``***``, for logs and doctor."""
    parts = urlsplit(url)
    if parts.password is not None:
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        url = urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    return mask_url_credentials(url)


def url_password(url: str) -> str | None:
    """The password a Redis client connects with: redis-py takes ``?password=`` over the
    userinfo's."""
    parts = urlsplit(url)
    queried = parse_qs(parts.query).get("password")
    return (queried[-1] if queried else parts.password) or None


def authenticated(url: str) -> bool:
    """Whether only those who hold a secret can use this Redis: one on this machine (a
    socket, loopback) is as safe as the machine; elsewhere it needs a password, or a client
    certificate over TLS (``rediss://…?ssl_certfile=…``)."""
    from massgen_mcp.trust import is_loopback

    parts = urlsplit(url)
    if parts.scheme == "unix" or is_loopback(parts.hostname or ""):
        return True
    if url_password(url):
        return True
    return parts.scheme == "rediss" and "ssl_certfile" in parse_qs(parts.query)


@dataclass(frozen=True)
class PoolConfig:
    """Where the pool's Redis is and how long a silent worker keeps its runs."""

    url: str
    name: str = "massgen"
    # A run whose worker stops renewing its Docket lease for this long (killed, frozen,
    # cut off) is delivered to another worker, which continues it from its record.
    redelivery_timeout_s: float = 30.0
    insecure: bool = False  # --insecure-redis: the user accepts an open Redis elsewhere

    def __post_init__(self) -> None:
        if urlsplit(self.url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"--redis {redact_url(self.url)!r}: not a Redis URL; use "
                              "redis://host:6379/0 (rediss:// for TLS, unix:///path.sock)")
        parts = urlsplit(self.url)
        for password in (parts.password, url_password(self.url)):
            register_secret(password)  # masked wherever it would show
        if not self.insecure and not authenticated(self.url):
            raise ConfigError(
                f"--redis {redact_url(self.url)}: a Redis on another host with no password "
                "lets anyone who reaches it start, cancel and read every run; give it a "
                "password (redis://:PASSWORD@host/0, rediss:// for TLS) or pass "
                "--insecure-redis")
        if not self.name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"pool name {self.name!r}: use letters, digits, - and _")
        if not 1 <= self.redelivery_timeout_s <= 3600:
            raise ConfigError("redelivery timeout: between 1 and 3600 seconds")

    @property
    def lease_s(self) -> float:
        """How long a worker's claim on a run lasts unrenewed: half the redelivery timeout,
        so a dead worker's claim has always lapsed when Docket hands its run to another."""
        return self.redelivery_timeout_s / 2

    def key(self, kind: str, session_id: str) -> str:
        return f"{self.name}:{kind}:{session_id}"

    @property
    def live_channel(self) -> str:
        return f"{self.name}:live"

    @property
    def cancel_channel(self) -> str:
        return f"{self.name}:cancel"


def worker_name() -> str:
    return f"{socket.gethostname()}#{os.getpid()}"


def connect(config: PoolConfig) -> Redis:
    """A client for our keys (Docket keeps its own connections)."""
    from redis.asyncio import Redis

    return Redis.from_url(config.url, decode_responses=True,
                          health_check_interval=10, socket_connect_timeout=5)


# -- claims: which worker runs a session ---------------------------------------------------

# Renew our claim; take it again if it lapsed while Redis was away; 0 if another has it.
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
CANCELLED = "cancelled"  # the claim a front end takes on a queued run it cancels


async def claim(redis: Redis, config: PoolConfig, session_id: str, holder: str) -> str | None:
    """Claim ``session_id`` for ``holder``; None if we have it, else who holds it."""
    key = config.key("claim", session_id)
    if await redis.set(key, holder, nx=True, px=int(config.lease_s * 1000)):
        return None
    current = await redis.get(key)
    return None if current == holder else str(current or "")


async def renew(redis: Redis, config: PoolConfig, session_id: str, holder: str) -> bool:
    """Keep the claim alive; False if another worker holds it now."""
    script: Awaitable[Any] = redis.eval(_RENEW, 1, config.key("claim", session_id), holder,
                                        str(int(config.lease_s * 1000)))
    return bool(await script)


async def release(redis: Redis, config: PoolConfig, session_id: str, holder: str) -> None:
    script: Awaitable[Any] = redis.eval(_RELEASE, 1, config.key("claim", session_id), holder)
    await script


async def put_status(redis: Redis, config: PoolConfig, status: StatusRecord) -> None:
    """Store ``status`` as the session's latest and tell every front end."""
    body = status.model_dump_json()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.set(config.key("status", status.session_id), body, ex=STATUS_TTL_S)
        pipe.publish(config.live_channel, _message(status.session_id, "status", body))
        await pipe.execute()


_SID_PREFIX = '{"sid":"'


def _message(session_id: str, kind: str, body: str) -> str:
    return f'{{"sid":{json.dumps(session_id)},"{kind}":{body}}}'


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
    on disk has them, and the next status supersedes the lost ones."""

    def __init__(self, redis: Redis, config: PoolConfig) -> None:
        self.redis = redis
        self.config = config
        self._queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
        self._failing = False

    def status(self, status: StatusRecord) -> None:
        self._queue.put_nowait((status.session_id, "status", status.model_dump_json()))

    def event(self, session_id: str, event: Event) -> None:
        self._queue.put_nowait((session_id, "event", event.to_json()))

    async def flush(self) -> None:
        """Wait until everything queued so far has been written (or dropped)."""
        await self._queue.join()

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
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

    async def _write(self, batch: list[tuple[str, str, str]]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for session_id, kind, body in batch:
                if kind == "status":
                    pipe.set(self.config.key("status", session_id), body, ex=STATUS_TTL_S)
                pipe.publish(self.config.live_channel, _message(session_id, kind, body))
            await pipe.execute()


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
