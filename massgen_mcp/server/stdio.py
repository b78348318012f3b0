"""Answer unparseable stdin lines with a JSON-RPC parse error instead of silence.

mcp's stdio transport hands a line it cannot parse to its dispatcher as an exception, which the
dispatcher drops, so the client waits for a reply that never comes. That includes valid JSON
with a lone surrogate escape (``"\\ud800"``: JSON grammar, not Unicode), which Python's ``json``
reads but pydantic's parser refuses. Over HTTP the same request already gets ``-32700``.

:func:`stdio_server` wraps mcp's and answers each such line with ``-32700``, carrying the
request's id when Python's ``json`` can still read it (the client drops error replies whose id
is null). fastmcp opens the transport through its module attribute ``stdio_server``;
:func:`install` points that at ours.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.stdio import stdio_server as mcp_stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import PARSE_ERROR, ErrorData, JSONRPCError


def parse_error_reply(exc: Exception) -> JSONRPCError | None:
    """The ``-32700`` reply for a line that failed to parse; None for a notification
    (JSON-RPC never answers those)."""
    errors = exc.errors(include_url=False) if hasattr(exc, "errors") else []
    line = errors[0].get("input") if errors else None
    detail = errors[0]["msg"] if errors else str(exc)
    request_id: str | int | None = None
    with contextlib.suppress(ValueError, TypeError):
        parsed = json.loads(line) if isinstance(line, str) else None
        if isinstance(parsed, dict):
            if "method" in parsed and "id" not in parsed:
                return None
            found = parsed.get("id")
            if isinstance(found, str | int) and not isinstance(found, bool):
                request_id = found
    return JSONRPCError(jsonrpc="2.0", id=request_id,
                        error=ErrorData(code=PARSE_ERROR, message=f"Parse error: {detail}"))


class _AnsweringReader:
    """mcp's read stream, minus the parse failures, which are answered on the write stream."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner, self._write = inner, write

    @property
    def last_context(self) -> Any:  # the dispatcher reads the sender's contextvars here
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            reply = parse_error_reply(item)
            if reply is not None:
                await self._write.send(SessionMessage(reply))

    def __aiter__(self) -> _AnsweringReader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _AnsweringReader:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)


@contextlib.asynccontextmanager
async def stdio_server(*args: Any, **kwargs: Any) -> AsyncIterator[tuple[Any, Any]]:
    async with mcp_stdio_server(*args, **kwargs) as (read, write):
        yield _AnsweringReader(read, write), write


def install() -> None:
    """Make fastmcp's stdio transport use :func:`stdio_server`."""
    import fastmcp.server.mixins.transport as fastmcp_transport

    setattr(fastmcp_transport, "stdio_server", stdio_server)  # noqa: B010 (not exported)
