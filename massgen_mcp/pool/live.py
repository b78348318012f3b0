"""What the processes of a pool share through Redis, next to Docket's queue.

Keys (``<name>`` is the pool's name, ``massgen`` by default):

``<name>:status:<session>``  the run's latest status (masked JSON, as in status.json)
``<name>:claim:<session>``   the worker running it (``host#pid``), a lease renewed while it
                             runs; ``cancelled`` when a front end cancelled it while queued
``<name>:fence:<session>``   the fencing token of the newest claim: every claim takes the
                             next one, and a worker's writes to Redis and to the record are
                             refused once a newer one exists (see pool/fencing.py)
``<name>:cancel:<session>``  set when a cancel was asked for, for a worker that missed the
                             message
``<name>:task:<task id>``    the session an MCP task started (so a redelivered task follows it)
``<name>:queued:<session>``  set while the session waits on Docket's queue (until claimed)
``<name>:swept:<session>``   set for a while when the sweep queued an unheld run again
``<name>:sweep``             the worker sweeping for unheld runs this period
channel ``<name>:live``      ``{"sid", "status"}`` and ``{"sid", "event"}`` as the run goes, and
                             ``{"sid", "drafts"}``: the agents' live drafts, only ever
                             published, never stored (:mod:`.drafts`)
channel ``<name>:cancel``    session ids to stop
channel ``<name>:steer``     steering notes, and their ``steer-id``/``steer-reply`` keys
                             (:mod:`.steering`)

Nothing here holds a key: statuses and events are masked before they are recorded
(:class:`~massgen_mcp.records.recorder.FileRecorder`), and that masked copy is what is
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
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from massgen_mcp.core.errors import ConfigError, PoolUnavailableError
from massgen_mcp.core.records import Event
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.secrets import mask_url_credentials, register_secret

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

STATUS_TTL_S = 7 * 86_400  # a finished run's status stays readable from Redis for a week
QUEUED_TTL_S = 3600  # the longest a run may wait on the queue before the sweep looks at it
RECONNECT_S = 1.0
# A command that meets a dropped connection (Redis restarted, a pooled socket gone stale) is
# tried again on a new one, this many times, waiting 0.1 s, 0.2 s, ... up to 2 s in between:
# ~7 s in all, so a restart costs a short wait instead of a failed request.
RETRIES = 6
RETRY_BASE_S = 0.1
RETRY_CAP_S = 2.0
# A Redis that accepts connections and never answers (frozen, or another service on its
# port) must not hang anyone: every read on our clients gives up after READ_TIMEOUT_S (above
# the 5 s a steering reply is waited for with BLPOP), and a one-off check (doctor, a front end
# joining the pool) gives up after CHECK_S, in one line naming the Redis.
READ_TIMEOUT_S = 15.0
CHECK_S = 10.0
_T = TypeVar("_T")
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
    from massgen_mcp.core.net import is_loopback

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
    def sweep_key(self) -> str:
        """Held by the worker sweeping the pool for unheld runs this period."""
        return f"{self.name}:sweep"

    @property
    def live_channel(self) -> str:
        return f"{self.name}:live"

    @property
    def cancel_channel(self) -> str:
        return f"{self.name}:cancel"

    @property
    def steer_channel(self) -> str:
        return f"{self.name}:steer"


def worker_name() -> str:
    return f"{socket.gethostname()}#{os.getpid()}"


def connect(config: PoolConfig) -> Redis:
    """A client for our keys (Docket keeps its own connections) that survives a Redis
    restart: every command is retried on a new connection (see :data:`RETRIES`), except
    after a refused password, which no retry mends (redis-py counts it as a lost
    connection: ``doctor`` with a wrong password took 14 s to say so)."""
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    class _Retry(Retry):
        async def call_with_retry(self, do: Any, fail: Any, is_retryable: Any = None,
                                  with_failure_count: bool = False) -> Any:
            def ours(error: Exception) -> bool:
                return retryable(error) and (is_retryable is None or is_retryable(error))
            return await super().call_with_retry(do, fail, ours, with_failure_count)

    # Bytes that are no UTF-8 (anyone who can write to Redis can put them in a key or a
    # message) read as U+FFFD instead of raising inside a worker's or front end's loop.
    return Redis.from_url(config.url, decode_responses=True, encoding_errors="replace",
                          health_check_interval=10, socket_connect_timeout=5,
                          socket_timeout=READ_TIMEOUT_S,
                          retry=_Retry(ExponentialBackoff(cap=RETRY_CAP_S, base=RETRY_BASE_S),
                                       RETRIES),
                          retry_on_error=[RedisConnectionError, RedisTimeoutError])


def no_answer(config: PoolConfig, what: str) -> PoolUnavailableError:
    """The one line for a Redis that did not answer ``what`` within :data:`CHECK_S`."""
    return PoolUnavailableError(
        f"the pool's Redis ({redact_url(config.url)}) did not answer {what} within "
        f"{CHECK_S:g} s; check that --redis names a running Redis (not another service) "
        "that is not frozen")


async def within(config: PoolConfig, what: str, operation: Awaitable[_T]) -> _T:
    """``operation``, or :func:`no_answer` if Redis takes more than :data:`CHECK_S`."""
    try:
        async with asyncio.timeout(CHECK_S):
            return await operation
    except TimeoutError:
        raise no_answer(config, what) from None


async def answers(config: PoolConfig, redis: Redis, what: str) -> None:
    """Redis answers a PING within :data:`CHECK_S`, or PoolUnavailableError in one line: the
    check a long-running process makes before it says it works (a closed port, a wrong
    address or password, a service that accepts and never answers)."""
    from redis.exceptions import RedisError

    try:
        await within(config, what, redis.ping())
    except RedisError as exc:
        raise PoolUnavailableError(
            f"the pool's Redis ({redact_url(config.url)}) did not answer {what}: "
            f"{str(exc).rstrip('.')}; check the address and password in --redis (or "
            "MASSGEN_REDIS_URL)") from None


def retryable(error: BaseException) -> bool:
    """A dropped connection or a timeout is worth another try; a refused password is not."""
    from redis.exceptions import AuthenticationError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (isinstance(error, RedisConnectionError | RedisTimeoutError)
            and not isinstance(error, AuthenticationError))


async def retrying(operation: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """``operation(*args)`` (a call into Docket, whose connections we do not configure),
    tried again on a dropped connection as :func:`connect`'s clients are."""
    from redis.exceptions import RedisError

    for attempt in range(1, RETRIES + 1):
        try:
            return await operation(*args)
        except RedisError as exc:
            if not retryable(exc):
                raise
            log.info("redis connection lost (%s); trying again", exc)
            await asyncio.sleep(min(RETRY_CAP_S, RETRY_BASE_S * 2 ** attempt))
    return await operation(*args)


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
