"""Answer unparseable stdin lines with a JSON-RPC parse error instead of silence.

mcp's stdio transport hands a line it cannot parse to its dispatcher as an exception, which the
dispatcher drops, so the client waits for a reply that never comes. That includes valid JSON
with a lone surrogate escape (``"\\ud800"``: JSON grammar, not Unicode), which Python's ``json``
reads but pydantic's parser refuses. Over HTTP the same request already gets ``-32700``.

:func:`stdio_server` wraps mcp's and answers each such line with ``-32700``, carrying the
request's id when Python's ``json`` can still read it (the client drops error replies whose id
is null). fastmcp opens the transport through its module attribute ``stdio_server``;
:func:`install` points that at ours.

It also takes over from the launcher, which may have read the host's first line already and
answered its ``initialize`` (:mod:`massgen_mcp.server.handshake`): what the launcher read comes
before the rest of stdin, so the SDK reads that line itself, and the SDK's own reply to it is
dropped, being the one already sent.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, BinaryIO

import anyio
from mcp.server import stdio as mcp_stdio
from mcp.server.stdio import stdio_server as mcp_stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import PARSE_ERROR, ErrorData, JSONRPCError

from massgen_mcp.server import handshake

log = logging.getLogger(__name__)


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
            request_id = handshake.request_id(parsed.get("id"))
    return JSONRPCError(jsonrpc="2.0", id=request_id,
                        error=ErrorData(code=PARSE_ERROR, message=f"Parse error: {detail}"))


class _AnsweringReader:
    """mcp's read stream, minus the parse failures, which are answered on the write
    stream."""

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


class _AfterEarlyReply:
    """mcp's write stream, minus the SDK's reply to the ``initialize`` the launcher already
    answered (the first reply with its id, whatever it says: a request id has one reply); a
    reply that differs from ours is logged (a test keeps them equal)."""

    def __init__(self, inner: Any, early: handshake.Early) -> None:
        self._inner, self._early = inner, early

    async def send(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if (message is not None and self._early.result is not None
                and getattr(message, "id", None) == self._early.request_id):
            ours, self._early.result = self._early.result, None
            theirs = message.model_dump(by_alias=True, exclude_unset=True, mode="json")
            if theirs.get("result") != ours:
                log.warning("the early initialize reply differed from the SDK's: sent %s, "
                            "the SDK's is %s", json.dumps(ours), json.dumps(theirs))
            return
        await self._inner.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _AfterEarlyReply:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)


class _ReadAgain(io.RawIOBase):
    """``data`` (what the launcher read), then the rest of ``inner``: stdin as if the launcher
    had not touched it."""

    def __init__(self, data: bytes, inner: BinaryIO) -> None:
        self._data, self._inner = data, inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not self._data:
            chunk = self._inner.read1(len(view)) if isinstance(self._inner, io.BufferedReader) \
                else self._inner.read(len(view))
        else:
            chunk, self._data = self._data[:len(view)], self._data[len(view):]
        view[:len(chunk)] = chunk
        return len(chunk)


@contextlib.contextmanager
def _stdin_after(early: handshake.Early) -> Iterator[anyio.AsyncFile[str]]:
    """Stdin for the SDK, starting with what the launcher read. fd 0 is claimed as the SDK
    claims it when it opens stdin itself (children read the null device, not the host)."""
    buffer, release = mcp_stdio._claim_fd(0, sys.stdin, "rb", mcp_stdio._open_stdin_diversion)
    try:
        text = mcp_stdio._UnownedTextWrapper(  # decoded as the SDK decodes stdin
            io.BufferedReader(_ReadAgain(early.data, buffer)), encoding="utf-8",
            errors="replace")
        yield anyio.wrap_file(text)
    finally:
        if release is not None:
            release()


@contextlib.asynccontextmanager
async def stdio_server(*args: Any, **kwargs: Any) -> AsyncIterator[tuple[Any, Any]]:
    early, handshake.taken = handshake.taken, None
    with contextlib.ExitStack() as stack:
        if early is not None:
            kwargs["stdin"] = stack.enter_context(_stdin_after(early))
        async with mcp_stdio_server(*args, **kwargs) as (read, write):
            if early is not None:
                write = _AfterEarlyReply(write, early)
            yield _AnsweringReader(read, write), write


def install() -> None:
    """Make fastmcp's stdio transport use :func:`stdio_server`."""
    import fastmcp.server.mixins.transport as fastmcp_transport

    setattr(fastmcp_transport, "stdio_server", stdio_server)  # noqa: B010 (not exported)
