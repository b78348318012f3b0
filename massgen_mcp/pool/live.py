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
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from massgen_mcp.core.errors import ConfigError, PoolUnavailableError
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
