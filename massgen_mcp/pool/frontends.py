"""The front ends of one pool agree on their token and on the MCP tasks' encryption key.

Any front end serves any session, so they must guard them alike: one with another token
(or none) would open the pool's sessions to other callers, and one with another
``FASTMCP_TASKS_ENCRYPTION_KEY`` cannot read the tasks the others stored (today those tasks
fail late, with "Failed to resolve dependencies"). So a front end joins the pool before it
serves, and refuses to start if it differs:

* ``<pool>:frontends`` holds what the live front ends use: a salt and, for the token and
  the key, a PBKDF2 fingerprint under that salt (never the secret; slow to guess from).
  The first front end writes it; every other compares. It lapses :data:`TTL_S` after the
  last front end stopped refreshing it, so a new token needs all front ends restarted, not
  a word in Redis.
* ``<pool>:protected`` is set, for good, once a front end with a token served the pool:
  its sessions were started by callers who had to show one, so a front end without a token
  never serves them (deleting that key, by hand, is the way back to an open pool).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
from typing import TYPE_CHECKING

from massgen_mcp.core.errors import ConfigError, PoolUnavailableError
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


def fingerprint(secret: str | None, salt: str) -> str:
    """What Redis may hold of ``secret``: a salted, slow hash (or ``none``)."""
    if not secret:
        return "none"
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt), ROUNDS).hex()


class Membership:
    """This front end's token and tasks key, as the pool's record of its front ends."""

    def __init__(self, config: PoolConfig, token: str | None) -> None:
        self.config = config
        self.token = token
        self.tasks_key = SETTINGS.tasks_key.read()
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

    async def join(self, redis: Redis) -> None:
        """Join (or refresh) the pool's record; ConfigError if this front end differs."""
        if self.token:
            await redis.set(self.protected_key, "1")
        elif await redis.exists(self.protected_key):
            raise ConfigError(
                f"this pool ({self.config.name}) is served by front ends with a token, so its "
                "sessions are not for callers without one: set MASSGEN_MCP_TOKEN as on the "
                f"other front ends (to open the pool again, delete {self.protected_key})")
        for _ in range(3):  # another front end may write it between our read and write
            found = await redis.get(self.key)
            theirs = json.loads(found) if found else None
            ours = await self._ours(theirs["salt"] if theirs else secrets.token_hex(16))
            if theirs is None:
                if await redis.set(self.key, json.dumps(ours), nx=True, px=int(TTL_S * 1000)):
                    return
                continue
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
        """Refresh the record while this front end serves (a third of its lifetime apart)."""
        redis = live.connect(self.config)
        try:
            while True:
                await asyncio.sleep(TTL_S / 3)
                try:
                    await self.join(redis)
                except ConfigError as exc:  # Redis was emptied and another came first
                    log.error("%s", exc)
                except Exception as exc:  # redis errors of every kind: try again later
                    log.warning("cannot refresh this front end in the pool: %s", exc)
        finally:
            await redis.aclose()
