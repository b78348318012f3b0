"""The HTTP server's connections: a deadline on each request, whether its body is read or not,
and one line (not a traceback per connection) when the process runs out of file descriptors.

Imported by ``serve --http`` only, once uvicorn is loaded (stdio never pays for h11)."""

from __future__ import annotations

import asyncio
import errno
import logging
import sys
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class AcceptLimit:
    """What the server says when it runs out of file descriptors (or socket buffers) to accept
    connections with: a line when it starts, then at most one a minute while it lasts (it
    flaps: each descriptor freed lets one connection in), each with how many accepts failed
    since the last. asyncio alone logs a traceback for each failed accept (thousands a
    minute: Python 3.11's accept loop retries its whole backlog each time), and one more at
    shutdown for each retry it had scheduled."""

    EVERY_S = 60.0  # the most often a line is logged about it

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.failed = 0  # failed accepts not yet in a line
        self.said_at: float | None = None  # when the last line was logged
        self.hint = _fd_limit_hint()  # now: at the limit, even an import fails

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The serving loop's exception handler: accept failures, and the retries that outlive
        the listening socket, are counted; anything else goes to asyncio's own handler."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCE and "socket" in context:
            self.failed += 1
            if self._may_say():
                self.log.warning(
                    "cannot accept connections: %s (%s; %d failed accepts since the last "
                    "such line); new connections wait until some close%s",
                    exc.strerror or exc, errno.errorcode.get(exc.errno or 0, "?"),
                    self.failed, self.hint if exc.errno == errno.EMFILE else "")
                self.failed = 0
            return
        handle = context.get("handle")
        if (isinstance(exc, ValueError) and handle is not None
                and "_start_serving" in repr(handle)):
            return  # an accept retry, scheduled by the above, that found the socket closed
        loop.default_exception_handler(context)

    def accepted(self) -> None:
        """A connection was accepted: failures not yet told are told, within the rate."""
        if self.failed and self._may_say():
            self.log.warning("accepting connections again (%d more failed accepts before)",
                             self.failed)
            self.failed = 0

    def _may_say(self) -> bool:
        now = time.monotonic()
        if self.said_at is not None and now - self.said_at < self.EVERY_S:
            return False
        self.said_at = now
        return True


_OUT_OF_RESOURCE = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def _fd_limit_hint() -> str:
    """The process's open-file limit and how to raise it, where the platform has one."""
    if sys.platform == "win32":
        return ""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return f"; this process may open {soft} files (raise it with `ulimit -n`)"


class ConnectionDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request, whether its body is read or
    not: uvicorn has none, so a client that sends half a request line, or announces a body
    that no handler reads (a 404, ``/healthz``, a 401) and drips it after the response,
    would hold its connection for ever (each byte restarts uvicorn's keep-alive timer).

    A request's headers must be in within :attr:`header_timeout_s` of the connection or of
    the last response; its body within :attr:`body_deadline_s` of its headers. A body the app
    reads meets :class:`~massgen_mcp.server.transports.BodyReadTimeout`'s finer limits (and
    its 408) first; this deadline closes the connection once the response is complete and
    the body still is not, so it never cuts a response short. :func:`deadline_protocol`
    sets the times.

    Writes have a deadline too: a client that reads nothing (say it pipelines requests to
    ``/healthz`` and never reads the answers) fills the socket's buffers and the transport's,
    the transport pauses writing, and the app waits in uvicorn's ``drain()`` with no other
    deadline running (the request is whole). Writes that stay paused for
    :attr:`body_deadline_s`, or answers still unsent that long after a deadline closed the
    connection, end it with ``transport.abort()``: ``close()`` alone waits for the unsent
    answers, which that client never takes."""

    header_timeout_s: float
    body_deadline_s: float
    accepts: AcceptLimit
    _deadline: asyncio.TimerHandle | None = None
    _write_stall: asyncio.TimerHandle | None = None  # while the transport pauses our writes
    _body_of: object = None  # the request (uvicorn's cycle) whose body the timer is for
    _overdue: bool = False  # that body's deadline passed while the app still answered

    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._body_of = None
        self._overdue = False

    def _close(self) -> None:
        """Close once our answers are sent (a response is never cut short), within the
        write deadline: a client that stopped reading would otherwise hold the connection
        with the answers it never takes (below the transport's high-water mark, no pause
        starts that deadline)."""
        self.transport.close()
        if self.transport.get_write_buffer_size() and self._write_stall is None:
            self._write_stall = self.loop.call_later(self.body_deadline_s, self._not_read)

    def _headers_too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE:  # still no complete request headers
            self._close()

    def _body_too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state is not h11.SEND_BODY or self.cycle is not self._body_of:
            return  # the body came in (or the connection moved on)
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE, h11.SEND_BODY):
            self._overdue = True  # the app is still answering: close once it has
        else:
            self._close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.accepts.accepted()
        super().connection_made(transport)
        self._arm(self.header_timeout_s, self._headers_too_slow)

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._body_of is not None:  # an unread body came in after its response
                self._arm(self.header_timeout_s, self._headers_too_slow)
        elif state is h11.SEND_BODY:
            if self._body_of is not self.cycle:  # a new request's body
                self._arm(self.body_deadline_s, self._body_too_slow)
                self._body_of = self.cycle
        else:
            self._disarm()  # the request is whole: the app's time is its own

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE:  # the next request gets the same deadline
            self._arm(self.header_timeout_s, self._headers_too_slow)
        elif self.conn.their_state is h11.SEND_BODY and self._overdue:
            self._close()  # a body nobody read, and past its deadline

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_stall is None:
            self._write_stall = self.loop.call_later(self.body_deadline_s, self._not_read)

    def resume_writing(self) -> None:
        self._stop_write_stall()
        super().resume_writing()

    def _stop_write_stall(self) -> None:
        if self._write_stall is not None:
            self._write_stall.cancel()
            self._write_stall = None

    def _not_read(self) -> None:
        """Our writes stayed paused (or unsent after a close) for the whole deadline: the
        client takes too little to matter, so drop the connection, unsent data and all."""
        self._write_stall = None
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._stop_write_stall()
        super().connection_lost(exc)


def deadline_protocol(header_timeout_s: float, body_deadline_s: float,
                      accepts: AcceptLimit) -> type[asyncio.Protocol]:
    """:class:`ConnectionDeadline` with these times, for uvicorn's ``http`` setting (it
    makes each connection's protocol from the class)."""
    return type("ConnectionDeadline", (ConnectionDeadline,), {
        "header_timeout_s": header_timeout_s, "body_deadline_s": body_deadline_s,
        "accepts": accepts})
