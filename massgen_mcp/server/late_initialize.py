"""Accept an ``initialize`` that comes after ``server/discover`` on the same stdio connection.

Claude Code opens with ``server/discover`` (2026-07-28); when the reply takes more than ~3 s,
it falls back to ``initialize`` (2025-11-25) on the same connection and goes on in that era.
The mcp SDK locks a stdio connection to the era of its first request and refuses that
``initialize`` with -32022, which a stricter host would take as the end of us.

So on a connection opened in the 2026-07-28 era, :class:`LateInitialize` answers a later
``initialize`` itself, with the SDK's own handshake result (the snapshot the early replies use,
held equal to the SDK's by a test), and from then on carries each request the host sends
without an envelope into the SDK with one: the protocol version 2026-07-28 plus the client's
info and capabilities from its ``initialize``. The SDK serves it as usual, and the reply goes
back in the negotiated version's shape (the SDK's own per-version sieve, without the 2026
``serverInfo`` stamp). The host's ``notifications/initialized`` is taken here, the modern era
having no such notification.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as sdk_methods
from pydantic import ValidationError

from massgen_mcp.server.handshake import (
    CAPABILITIES_KEY,
    HANDSHAKE_VERSIONS,
    INFO_KEY,
    MODERN_VERSION,
    VERSION_KEY,
    initialize_accepted,
    is_enveloped,
    load_snapshot,
)

log = logging.getLogger(__name__)


class LateInitialize:
    """Follows the connection's era on the read side; :meth:`wrap` gives the write side."""

    def __init__(self, write: Any) -> None:
        self._write = write
        self._modern: bool | None = None  # decided by the first request, as the SDK does
        self._version: str | None = None  # negotiated by a late initialize
        self._envelope: dict[str, Any] | None = None
        self._methods: dict[str | int, str] = {}  # requests carried in, by id: their method

    async def inbound(self, item: Any) -> Any | None:
        """``item`` as the SDK should read it, or None if it was handled here."""
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest):
            if self._modern is None:
                self._modern = message.method != "initialize" and is_enveloped(message.params)
            if self._modern and message.method == "initialize":
                return await self._accept(item, message)
            if self._envelope is not None and not is_enveloped(message.params):
                return self._carry(item, message)
        elif (isinstance(message, JSONRPCNotification) and self._envelope is not None
              and message.method == "notifications/initialized"):
            return None
        return item

    async def _accept(self, item: Any, message: JSONRPCRequest) -> Any | None:
        params = message.params
        snapshot = load_snapshot()
        if snapshot is None or not (isinstance(params, dict) and initialize_accepted(params)):
            return item  # the SDK's refusal
        requested = params["protocolVersion"]
        version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        result = snapshot.get(version, {}).get("initialize")
        if result is None:
            return item
        self._version = version
        self._envelope = {VERSION_KEY: MODERN_VERSION,
                          CAPABILITIES_KEY: params.get("capabilities", {}),
                          INFO_KEY: params["clientInfo"]}
        log.info("initialize %s after server/discover: serving it on the same connection",
                 version)
        await self._write.send(SessionMessage(JSONRPCResponse(
            jsonrpc="2.0", id=message.id, result=json.loads(result))))
        return None

    def _carry(self, item: Any, message: JSONRPCRequest) -> SessionMessage:
        assert self._envelope is not None
        params = dict(message.params or {})
        meta = params.get("_meta")
        params["_meta"] = {**(meta if isinstance(meta, dict) else {}), **self._envelope}
        self._methods[message.id] = message.method
        return SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=message.id,
                                             method=message.method, params=params),
                              metadata=getattr(item, "metadata", None))

    def outbound(self, item: Any) -> Any:
        """A reply to a carried request in the negotiated version's shape."""
        message = getattr(item, "message", None)
        if not (isinstance(message, JSONRPCResponse) and message.id in self._methods):
            if message is not None and getattr(message, "id", None) in self._methods:
                del self._methods[message.id]  # an error: the same in every era
            return item
        method = self._methods.pop(message.id)
        return SessionMessage(JSONRPCResponse(
            jsonrpc="2.0", id=message.id, result=self._downgrade(method, message.result)),
            metadata=getattr(item, "metadata", None))

    def _downgrade(self, method: str, result: dict[str, Any]) -> dict[str, Any]:
        assert self._version is not None
        shaped = dict(result)
        if method in sdk_methods.SPEC_CLIENT_METHODS:
            try:
                shaped = sdk_methods.serialize_server_result(method, self._version, result)
            except (KeyError, ValueError, ValidationError):
                log.warning("a %s result did not fit protocol %s; sent as it was", method,
                            self._version)
        for key in ("resultType", "ttlMs", "cacheScope"):
            shaped.pop(key, None)
        meta = shaped.get("_meta")
        if isinstance(meta, dict):
            meta = {k: v for k, v in meta.items() if k != SERVER_INFO_META_KEY}
            if meta:
                shaped["_meta"] = meta
            else:
                shaped.pop("_meta")
        return shaped

    def wrap(self, write: Any) -> _Downgrading:
        return _Downgrading(write, self)


class _Downgrading:
    """The write stream the SDK gets: replies to carried requests pass :meth:`outbound`."""

    def __init__(self, inner: Any, late: LateInitialize) -> None:
        self._inner, self._late = inner, late

    async def send(self, item: Any) -> None:
        await self._inner.send(self._late.outbound(item))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _Downgrading:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)
