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
  its sessions were started by callers who had to show one, so a front end without a token
  never serves them. Redis can lose that key (``FLUSHALL``, a restart without persistence),
  so the same fact is also a file in the shared ``MASSGEN_HOME``, ``pool-<pool>.protected``
  (:data:`MARKER`), which Redis cannot lose: either one makes the pool protected, and each
  front end puts back the one that is missing. Deleting both, by hand, is the way back to an
  open pool.

A front end checks again every :data:`TTL_S` / 3. One that finds it differs from the pool
(another front end came first while Redis was empty) stops serving: every request gets 503
and one line (:class:`ServingGate`; the reason goes to the log) until it matches again. A
front end with a token replaces a record written by one without (the pool is protected, so
that record is wrong), so the unprotected one is the one that stops.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from massgen_mcp.core.errors import ConfigError, PoolUnavailableError
from massgen_mcp.core.files import replace_file
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
                "one refuse it. To open it again, stop its front ends, delete this file and "
                "the Redis key {name}:protected\n")


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
            token, tasks_key = await asyncio.gather(
                asyncio.to_thread(fingerprint, self.token, salt),
                asyncio.to_thread(fingerprint, self.tasks_key, salt))
            self._mine[salt] = {"salt": salt, "token": token, "tasks_key": tasks_key}
        return self._mine[salt]

    def _marked(self) -> bool:
        """Whether the shared home says the pool is protected (any entry of that name
        counts: a planted link or folder errs on the side of protection)."""
        return os.path.lexists(self.marker)

    def _mark(self) -> None:
        """Record in the shared home, for good, that the pool is protected."""
        if self._marked():
            return
        try:  # another front end writing it at once writes the same text
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.marker, _MARKER_TEXT.format(name=self.config.name))
        except OSError as exc:  # Redis still holds the fact; the records cannot be written
            log.warning("cannot record in %s that the pool is protected: %s", self.marker,
                        exc.strerror or exc)

    async def join(self, redis: Redis) -> None:
        """Join (or refresh) the pool's record; ConfigError if this front end differs."""
        marked = await asyncio.to_thread(self._marked)
        if self.token:
            if not marked:
                await asyncio.to_thread(self._mark)
            await redis.set(self.protected_key, "1")
        elif marked or await redis.exists(self.protected_key):
            # What one of the two remembers, the other learns again.
            if marked:
                await redis.set(self.protected_key, "1")
            else:
                await asyncio.to_thread(self._mark)
            raise ConfigError(
                f"this pool ({self.config.name}) is served by front ends with a token, so its "
                "sessions are not for callers without one: set MASSGEN_MCP_TOKEN as on the "
                f"other front ends (to open the pool again, stop them and delete "
                f"{self.protected_key} and {self.marker})")
        for _ in range(3):  # another front end may write it between our read and write
            found = await redis.get(self.key)
            theirs = json.loads(found) if found else None
            ours = await self._ours(theirs["salt"] if theirs else secrets.token_hex(16))
            if theirs is None:
                if await redis.set(self.key, json.dumps(ours), nx=True, px=int(TTL_S * 1000)):
                    return
                continue
            if self.token and theirs.get("token") == "none":
                # Written by a front end without a token while Redis was empty: in a protected
                # pool that record is wrong, and ours replaces it (that one stops serving).
                log.error("a front end without %s joined this protected pool (%s) while its "
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
