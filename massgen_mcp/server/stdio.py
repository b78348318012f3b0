"""Answer unparseable stdin lines with a JSON-RPC parse error instead of silence.

mcp's stdio transport hands a line it cannot parse to its dispatcher as an exception, which the
dispatcher drops, so the client waits for a reply that never comes. That includes valid JSON
with a lone surrogate escape (``"\\ud800"``: JSON grammar, not Unicode), which Python's ``json``
reads but pydantic's parser refuses. Over HTTP the same request already gets ``-32700``.

:func:`stdio_server` wraps mcp's and answers each such line with ``-32700``, carrying the
request's id when Python's ``json`` can still read it (the client drops error replies whose id
is null). fastmcp opens the transport through its module attribute ``stdio_server``;
:func:`install` points that at ours.

It also takes over from the launcher, which has been reading stdin since the process started
and may have answered the host's opening requests (:mod:`massgen_mcp.server.early`): the SDK
reads every line from the launcher's reader, those included, and its own replies to the
requests answered early are dropped, being the ones already sent. And it lets a host that
opened with ``server/discover`` fall back to ``initialize`` on the same connection
(:mod:`massgen_mcp.server.late_initialize`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
from mcp.server import stdio as mcp_stdio
from mcp.server.stdio import stdio_server as mcp_stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import PARSE_ERROR, ErrorData, JSONRPCError

from massgen_mcp.server import early, handshake
from massgen_mcp.server.early import EarlyStdin
from massgen_mcp.server.late_initialize import LateInitialize

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

    def __init__(self, inner: Any, write: Any, late: LateInitialize) -> None:
        self._inner, self._write, self._late = inner, write, late

    @property
    def last_context(self) -> Any:  # the dispatcher reads the sender's contextvars here
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                item = await self._late.inbound(item)
                if item is not None:
                    return item
                continue
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


class _AfterEarlyReplies:
    """mcp's write stream, minus the SDK's replies to the requests the launcher answered
    early (the first reply with each id: a request id has one reply). A reply that differs
    from the one sent is logged; a test keeps them equal."""

    def __init__(self, inner: Any, answered: dict[str | int, bytes]) -> None:
        self._inner, self._answered = inner, answered

    async def send(self, item: Any) -> None:
        message = getattr(item, "message", None)
        id_ = getattr(message, "id", None)
        if message is not None and id_ is not None and id_ in self._answered:
            sent = self._answered.pop(id_)
            theirs = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
            if theirs + b"\n" != sent:
                log.warning("an early reply differed from the SDK's: sent %s, the SDK's is %s "
                            "(refresh it: python -m massgen_mcp.server.early_snapshot)",
                            sent.decode(errors="replace").strip(), theirs.decode())
            return
        await self._inner.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _AfterEarlyReplies:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)


class _EarlyRaw(io.RawIOBase):
    """Stdin as the launcher's thread passes it on: every byte, from the first."""

    def __init__(self, early: EarlyStdin) -> None:
        self._early = early

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self._early.read(len(view))
        view[:len(chunk)] = chunk
        return len(chunk)


@contextlib.contextmanager
def _stdin_after(early: EarlyStdin) -> Iterator[anyio.AsyncFile[str]]:
    """Stdin for the SDK, from the launcher's reader. fd 0 is claimed as the SDK claims it
    when it opens stdin itself (children read the null device, not the host); the reader
    holds its own duplicate of it."""
    _unread, release = mcp_stdio._claim_fd(0, sys.stdin, "rb", mcp_stdio._open_stdin_diversion)
    try:
        text = mcp_stdio._UnownedTextWrapper(  # decoded as the SDK decodes stdin
            io.BufferedReader(_EarlyRaw(early)), encoding="utf-8", errors="replace")
        yield anyio.wrap_file(text)
    finally:
        if release is not None:
            release()


@contextlib.asynccontextmanager
async def stdio_server(*args: Any, **kwargs: Any) -> AsyncIterator[tuple[Any, Any]]:
    early_stdin, early.taken = early.taken, None
    answered = early_stdin.hand_over() if early_stdin is not None else {}
    with contextlib.ExitStack() as stack:
        if early_stdin is not None:
            kwargs["stdin"] = stack.enter_context(_stdin_after(early_stdin))
        async with mcp_stdio_server(*args, **kwargs) as (read, write):
            if answered:
                write = _AfterEarlyReplies(write, answered)
            late = LateInitialize(write)
            yield _AnsweringReader(read, write, late), late.wrap(write)


def install() -> None:
    """Make fastmcp's stdio transport use :func:`stdio_server`."""
    import fastmcp.server.mixins.transport as fastmcp_transport

    setattr(fastmcp_transport, "stdio_server", stdio_server)  # noqa: B010 (not exported)
