"""The front ends of one pool agree on their token and on the MCP tasks' encryption key.

Any front end serves any session, so they must guard them alike: one with another token
(or none) would open the pool's sessions to other callers, and one with another
``FASTMCP_TASKS_ENCRYPTION_KEY`` cannot read the tasks the others stored (such a task fails
late, with "Failed to resolve dependencies"). So a front end joins the pool before it
serves, and refuses to start if it differs:

* ``<pool>:frontends`` holds what the live front ends use: a salt and, for the token and
  the key, a PBKDF2 fingerprint under that salt (never the secret; slow to guess from).
  The first front end writes it; every other compares. It lapses :data:`TTL_S` after the
  last front end stopped refreshing it, so a new token needs all front ends restarted, not
  a word in Redis.
* ``<pool>:protected`` is set, for good, once a front end with a token served the pool:
  its sessions were started by callers who had to show *that* token, so a front end without
  one, or with another, never serves them. The key names the token by a salted PBKDF2
  fingerprint (never the token) and the time the pool was first protected. Redis can lose
  that key (``FLUSHALL``, a restart without persistence), so the same record is also a file
  in the shared ``MASSGEN_HOME``, ``pool-<pool>.protected`` (:data:`MARKER`), which Redis
  cannot lose: either one makes the pool protected. The home's record, where it holds one,
  is the pool's and Redis only copies it: anyone who reaches Redis writes there what it
  likes (a ``since`` of 0 included), while writing the home takes the filesystem. The first
  front end makes the marker only where none is (:func:`create_file`), so of front ends
  sharing the home the first wins, whatever a record says of its date. A front end whose
  token matches puts the record back wherever it is missing or different, and one whose
  token does not refuses to serve. Deleting both, by hand, is the way back to an open pool
  (or to another token).

A front end checks again every :data:`TTL_S` / 3. One that finds it differs from the pool
(another front end came first while Redis was empty) stops serving: every request gets 503
and one line (:class:`ServingGate`; the reason goes to the log) until it matches again. A
front end with a token replaces a record written by one without (the pool is protected, so
that record is wrong), and so does one whose token the pool's protection names over one
whose token it does not: the one that does not match is the one that stops.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from massgen_mcp.core.errors import ConfigError, PoolUnavailableError
from massgen_mcp.core.files import create_file, read_bytes_safely, replace_file
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.pool import live
from massgen_mcp.pool.live import PoolConfig

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

TASKS_KEY_ENV = SETTINGS.tasks_key.env
TTL_S = 30.0
ROUNDS = 200_000
LABELS = {"token": SETTINGS.mcp_token.env, "tasks_key": TASKS_KEY_ENV}  # as the user sets them
MARKER = "pool-{name}.protected"  # in MASSGEN_HOME: this pool was served with a token
_MARKER_TEXT = ("a front end with MASSGEN_MCP_TOKEN served the pool {name}: front ends without "
                "that token refuse it (the last line names it by a salted hash, never the "
                "token). To open it again, stop its front ends, delete this file and the "
                "Redis key {name}:protected\n")
MARKER_MAX_BYTES = 4096
LEGACY = "legacy"  # a protection that names no token (written before records named one)
Protection = dict[str, Any]  # {"salt": hex, "token": fingerprint, "since": epoch seconds}


def protection(text: str | bytes) -> Protection | None:
    """The record in ``text`` (a marker file's last line, or the Redis key), or None when it
    holds none (an older marker, or anything planted): checked field by field, since anyone
    who reaches Redis writes what it likes."""
    if len(text) > MARKER_MAX_BYTES:  # a record is one short line
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = text.strip().splitlines()
    try:
        record = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):  # not JSON, or nested deep enough to overflow
        return None
    if not isinstance(record, dict):
        return None
    salt, token, since = record.get("salt"), record.get("token"), record.get("since")
    if not (isinstance(salt, str) and len(salt) == 32 and _is_hex(salt)
            and isinstance(token, str) and len(token) == 64 and _is_hex(token)
            and isinstance(since, int | float) and not isinstance(since, bool)
            and math.isfinite(since)):
        return None
    return {"salt": salt, "token": token, "since": since}


def members(text: str | bytes) -> dict[str, str] | None:
    """The record of front ends in ``text`` (the ``<pool>:frontends`` value), or None when it
    holds none: checked field by field as :func:`protection`, since anyone who reaches Redis
    writes what it likes there."""
    if len(text) > MARKER_MAX_BYTES:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), or nested too deep
        return None
    if not isinstance(record, dict):
        return None
    salt = record.get("salt")
    if not (isinstance(salt, str) and len(salt) == 32 and _is_hex(salt)):
        return None
    fields = {"salt": salt}
    for name in LABELS:
        value = record.get(name)
        if not (isinstance(value, str)
                and (value == "none" or (len(value) == 64 and _is_hex(value)))):
            return None
        fields[name] = value
    return fields


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def fingerprint(secret: str | None, salt: str) -> str:
    """What Redis may hold of ``secret``: a salted, slow hash (or ``none``)."""
    if not secret:
        return "none"
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), ROUNDS).hex()


class Membership:
    """This front end's token and tasks key, as the pool's record of its front ends."""

    def __init__(self, config: PoolConfig, token: str | None, home: Path) -> None:
        self.config = config
        self.token = token
        self.tasks_key = SETTINGS.tasks_key.read()
        self.marker = home / MARKER.format(name=config.name)
        self.mismatch: str | None = None  # why this front end must not serve, while it differs
        self._mine: dict[str, dict[str, str]] = {}  # salt -> our fingerprints under it

    @property
    def key(self) -> str:
        return f"{self.config.name}:frontends"

    @property
    def protected_key(self) -> str:
        return f"{self.config.name}:protected"

    async def _ours(self, salt: str) -> dict[str, str]:
        if salt not in self._mine:
            if len(self._mine) >= 8:  # salts come from Redis too: keep a few, not each
                self._mine.clear()
            token, tasks_key = await asyncio.gather(
                asyncio.to_thread(fingerprint, self.token, salt),
                asyncio.to_thread(fingerprint, self.tasks_key, salt))
            self._mine[salt] = {"salt": salt, "token": token, "tasks_key": tasks_key}
        return self._mine[salt]

    def _marked(self) -> bool:
        """Whether the shared home says the pool is protected (any entry of that name
        counts: a planted link or folder errs on the side of protection)."""
        return os.path.lexists(self.marker)

    def _read_marker(self) -> Protection | str | None:
        """The shared home's record: None when there is no marker, :data:`LEGACY` when it is
        one that names no token (or cannot be read: a planted link or folder errs on the side
        of protection)."""
        if not self._marked():
            return None
        try:
            return protection(read_bytes_safely(self.marker, MARKER_MAX_BYTES)) or LEGACY
        except OSError:
            return LEGACY

    def _mark(self, record: Protection | None, *, claim: bool = False) -> bool:
        """Record in the shared home, for good, that the pool is protected (by ``record``'s
        token; None: by a token not named). The marker is made only where none is
        (:func:`create_file`: of front ends writing at once, the first wins, whatever any
        record says of its date), except that ``claim`` replaces one naming no token (a
        marker written before records named one). False when another entry was there first
        (re-read it)."""
        text = _MARKER_TEXT.format(name=self.config.name)
        if record is not None:
            text += json.dumps(record) + "\n"
        try:
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            if claim:
                replace_file(self.marker, text)
            else:
                create_file(self.marker, text)
        except FileExistsError:
            return False
        except OSError as exc:  # Redis still holds the fact; the records cannot be written
            log.warning("cannot record in %s that the pool is protected: %s", self.marker,
                        exc.strerror or exc)
        return True

    def _refusal(self) -> ConfigError:
        return ConfigError(
            f"the front ends that protect this pool ({self.config.name}) use another "
            f"{LABELS['token']}: its sessions are for callers with theirs, and every "
            "front end of a pool needs the same (to hand the pool to a new token, stop "
            f"them all and delete {self.protected_key} and {self.marker})")

    async def _protect(self, redis: Redis) -> None:
        """Check this front end against the pool's protection, and put the protection back
        where it is missing; ConfigError if this front end must not serve the pool.

        The shared home's record, where it holds one, is the pool's: writing it takes the
        filesystem, and Redis only copies it (anyone who reaches Redis writes there what it
        likes, a ``since`` of 0 included). Redis's record counts where the home holds none
        (a front end with another home, or the marker not yet written), and only a front
        end whose token it names writes it into the home."""
        for _ in range(3):  # a front end sharing the home may make the marker meanwhile
            on_file = await asyncio.to_thread(self._read_marker)
            stored = await redis.get(self.protected_key)
            in_redis = None if stored is None else (protection(stored) or LEGACY)
            if not self.token:
                if on_file is None and in_redis is None:
                    return
                # What one of the two remembers, the other learns again (the home as a
                # marker naming no token: a token from Redis is not the home's to trust).
                if in_redis is None:
                    await redis.set(self.protected_key,
                                    json.dumps(on_file) if isinstance(on_file, dict) else "1")
                elif on_file is None:
                    await asyncio.to_thread(self._mark, None)
                raise ConfigError(
                    f"this pool ({self.config.name}) is served by front ends with a token, so "
                    "its sessions are not for callers without one: set MASSGEN_MCP_TOKEN as on "
                    f"the other front ends (to open the pool again, stop them and delete "
                    f"{self.protected_key} and {self.marker})")
            if isinstance(on_file, dict):
                await self._check_home(redis, on_file, in_redis)
                return
            if isinstance(in_redis, dict):
                if (await self._ours(in_redis["salt"]))["token"] != in_redis["token"]:
                    raise self._refusal()
                pools = in_redis
            else:  # the first front end with a token (or the first since markers named it)
                salt = secrets.token_hex(16)
                pools = {"salt": salt, "token": (await self._ours(salt))["token"],
                         "since": time.time()}
            if await asyncio.to_thread(self._mark, pools, claim=on_file == LEGACY):
                if in_redis != pools:
                    await redis.set(self.protected_key, json.dumps(pools))
                return
        raise ConfigError(f"could not join the pool {self.config.name}: its protection "
                          f"({self.marker}) keeps changing; try again")

    async def _check_home(self, redis: Redis, home: Protection,
                          in_redis: Protection | str | None) -> None:
        """Serve by the home's record ``home``, and copy it into Redis, unless Redis holds an
        older record naming another token: then a front end with another home protected the
        pool first (front ends of a pool must share their home), or someone who reaches
        Redis planted it. Either way this one stops serving until it is gone, and leaves it
        there (two homes that each copied their own would take turns); that record is never
        taken into the home nor served by, so a planted one can stop front ends, as anyone
        who writes Redis can, but not take the pool over."""
        if (await self._ours(home["salt"]))["token"] != home["token"]:
            if in_redis != home:
                await redis.set(self.protected_key, json.dumps(home))
            raise self._refusal()
        if (isinstance(in_redis, dict) and in_redis["since"] < home["since"]
                and (await self._ours(in_redis["salt"]))["token"] != in_redis["token"]):
            raise ConfigError(
                f"the pool's Redis ({self.protected_key}) names front ends with another "
                f"{LABELS['token']} that protected this pool ({self.config.name}) before this "
                f"front end's home ({self.marker}) did: front ends of a pool must share one "
                "MASSGEN_HOME (if that record was planted, delete it)")
        if in_redis != home:
            await redis.set(self.protected_key, json.dumps(home))

    async def join(self, redis: Redis) -> None:
        """Join (or refresh) the pool's record; ConfigError if this front end differs."""
        await self._protect(redis)
        for _ in range(3):  # another front end may write it between our read and write
            found = await redis.get(self.key)
            theirs = None if found is None else members(found)
            ours = await self._ours(theirs["salt"] if theirs else secrets.token_hex(16))
            if theirs is None:
                if found is not None:  # no front end wrote that: ours replaces it
                    log.warning("the pool's record of front ends (%s) is not one; replacing "
                                "it", self.key)
                if await redis.set(self.key, json.dumps(ours), nx=found is None,
                                   px=int(TTL_S * 1000)):
                    return
                continue
            if self.token and theirs.get("token") != ours["token"]:
                # Written by a front end without a token, or with another, while Redis was
                # empty: this one's token is the one the pool's protection names (checked
                # above), so that record is wrong, and ours replaces it (that one stops).
                log.error("a front end without this pool's %s joined it (%s) while its "
                          "Redis was empty; it stops serving at its next check",
                          LABELS["token"], self.config.name)
                await redis.set(self.key, json.dumps(ours), px=int(TTL_S * 1000))
                return
            differ = [label for name, label in LABELS.items() if theirs.get(name) != ours[name]]
            if differ:
                raise ConfigError(
                    f"the other front ends of this pool ({self.config.name}) use another "
                    f"{' and '.join(differ)}: every front end of a pool needs the same "
                    f"(or stop them all first; the pool forgets theirs {TTL_S:g} s later)")
            await redis.pexpire(self.key, int(TTL_S * 1000))
            return
        raise ConfigError(f"could not join the pool {self.config.name}: its record of front "
                          "ends keeps changing; try again")

    async def check(self) -> None:
        """Join once with a connection of its own (before serving)."""
        from redis.exceptions import RedisError

        redis = live.connect(self.config)
        try:
            await live.within(self.config, "a front end joining the pool", self.join(redis))
        except RedisError as exc:
            raise PoolUnavailableError(
                f"the pool's Redis ({live.redact_url(self.config.url)}) did not answer: "
                f"{exc}") from exc
        finally:
            await redis.aclose()

    async def keep(self) -> None:
        """Refresh the record while this front end serves (a third of its lifetime apart);
        while it differs from the pool, :attr:`mismatch` says why and it serves nothing."""
        redis = live.connect(self.config)
        try:
            while True:
                await asyncio.sleep(TTL_S / 3)
                await self.refresh(redis)
        finally:
            await redis.aclose()

    async def refresh(self, redis: Redis) -> None:
        """Join again, and serve or stop serving by the answer."""
        try:
            await self.join(redis)
        except ConfigError as exc:  # Redis was emptied and another came first
            if self.mismatch is None:
                log.error("this front end stops serving: %s", exc)
            self.mismatch = str(exc)
        except Exception as exc:  # redis errors of every kind: try again later
            log.warning("cannot refresh this front end in the pool: %s", exc)
        else:
            if self.mismatch is not None:
                log.warning("this front end matches the pool again; serving")
            self.mismatch = None


GATE_MESSAGE = ("this front end differs from the other front ends of its pool (in "
                f"{LABELS['token']} or {LABELS['tasks_key']}) and serves nothing until it "
                "matches; its log says how")


class ServingGate:
    """ASGI middleware: while ``membership`` differs from its pool, every HTTP request gets
    503 and one line (``/healthz`` too, so a load balancer drops it). The details (the pool's
    keys, the shared folder) are in the log, not told to any caller."""

    def __init__(self, app: Any, membership: Membership) -> None:
        self.app = app
        self.membership = membership

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.membership.mismatch is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": {
            "message": GATE_MESSAGE, "type": "server_error",
            "param": None, "code": "pool_mismatch"}}).encode()
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
