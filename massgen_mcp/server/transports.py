"""Serve the MCP app over stdio (what hosts spawn) or streamable HTTP.

On stdio, stdout *is* the protocol: logging goes to stderr and to ``server.log`` only,
and litellm is kept quiet when it loads. Over HTTP the server binds loopback by default, checks
Host/Origin headers, and requires a bearer token (``MASSGEN_MCP_TOKEN``, compared in constant
time) whenever one is set; binding a non-loopback address without a token is refused. A client
gets :data:`HEADER_TIMEOUT_S` to send a request's headers, :data:`BODY_TIMEOUT_S` for each
piece of its body and :data:`BODY_DEADLINE_S` for the whole body, which must also keep up
:data:`MIN_BODY_RATE` once the first :data:`BODY_TIMEOUT_S` are past
(``MASSGEN_MCP_HEADER_TIMEOUT_S``, ``MASSGEN_MCP_BODY_TIMEOUT_S``,
``MASSGEN_MCP_BODY_DEADLINE_S``), so a slow, stalled or dripping client cannot hold a
connection for ever. The whole-body deadline holds whether the body is read or not (a 404
or ``/healthz`` that ignores an announced body closes the connection once it is due:
:mod:`.connections`).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from massgen_mcp.core import portable
from massgen_mcp.core.errors import ConfigError, ListenError
from massgen_mcp.core.files import default_home
from massgen_mcp.core.loading import loading
from massgen_mcp.core.net import is_loopback
from massgen_mcp.core.secrets import RedactingFormatter
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.server.guard import token_matches
from massgen_mcp.server.log_file import FollowingLogFile

if TYPE_CHECKING:
    from fastmcp.server.auth import TokenVerifier

    from massgen_mcp.pool.live import PoolConfig

TOKEN_ENV = SETTINGS.mcp_token.env
MAX_BODY_ENV = SETTINGS.mcp_max_body_bytes.env
HEADER_TIMEOUT_S = SETTINGS.mcp_header_timeout_s.default  # connecting (or the last response)
# to a request's full headers
BODY_TIMEOUT_S = SETTINGS.mcp_body_timeout_s.default  # between body pieces
BODY_DEADLINE_S = SETTINGS.mcp_body_deadline_s.default  # for a whole body
MIN_BODY_RATE = 1024  # bytes a second a body must average, past its first BODY_TIMEOUT_S


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes with 413, whether the client
    announces the size (Content-Length) or streams it."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        seen = 0

        async def limited_receive() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send: Any) -> None:
        # OpenAI's error shape, which the /v1 clients parse; MCP clients only need the status.
        body = json.dumps({"error": {
            "message": f"request body over {self.limit} bytes (the limit is "
                       f"{MAX_BODY_ENV})", "type": "invalid_request_error", "param": None,
            "code": "request_too_large"}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class BodyReadTimeout:
    """ASGI middleware: a request body that stalls for ``timeout_s``, or is not whole within
    ``deadline_s``, or falls behind :data:`MIN_BODY_RATE` once ``timeout_s`` has passed (a
    byte every few seconds, each piece in time), gets 408 and the connection is closed. Only
    while the body is incomplete: an open stream (MCP's SSE) then waits for the disconnect as
    long as it likes."""

    def __init__(self, app: Any, timeout_s: float = BODY_TIMEOUT_S,
                 deadline_s: float = BODY_DEADLINE_S) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        complete = False
        loop = asyncio.get_running_loop()
        start = loop.time()
        seen = 0

        async def timed_receive() -> Any:
            nonlocal complete, seen
            if complete:
                return await receive()
            # The time the body may have taken by now: what it sent so far buys it more.
            allowed = start + min(self.deadline_s, self.timeout_s + seen / MIN_BODY_RATE)
            wait = min(self.timeout_s, allowed - loop.time())
            if wait <= 0:
                raise _TooSlow(self._slow())
            try:
                async with asyncio.timeout(wait):
                    message = await receive()
            except TimeoutError:
                raise _TooSlow(self._slow() if wait < self.timeout_s else
                               f"the request body stalled for {self.timeout_s:g} s") from None
            seen += len(message.get("body", b""))
            complete = message["type"] != "http.request" or not message.get("more_body")
            return message

        try:
            await self.app(scope, timed_receive, send)
        except _TooSlow as slow:
            body = json.dumps({"error": {
                "message": str(slow), "type": "invalid_request_error", "param": None,
                "code": "request_timeout"}}).encode()
            await send({"type": "http.response.start", "status": 408,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()),
                                    (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})

    def _slow(self) -> str:
        return (f"the request body came too slowly: a body must arrive within "
                f"{self.deadline_s:g} s, at {MIN_BODY_RATE // 1024} KiB/s or more after the "
                f"first {self.timeout_s:g} s")


class _TooSlow(Exception):
    pass


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, or ListenError saying what to do: bound before the
    server says it serves, so a busy port is one clear line, not a startup log."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ListenError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; check "
                          "--host") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} on {host} is already in use (another server, "
                              "perhaps massgen-mcp itself); stop it or choose another with "
                              "--port") from None
        raise ListenError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; choose "
                          "another --host or --port") from None
    return sock


def bearer_token_auth(token: str) -> TokenVerifier:
    """An auth provider accepting exactly ``token``, compared in constant time.

    fastmcp's auth stack costs ~0.3 s to import, so stdio (which needs no auth) never loads it.
    """
    from fastmcp.server.auth import AccessToken, TokenVerifier

    expected = token

    class BearerToken(TokenVerifier):
        async def verify_token(self, token: str) -> AccessToken | None:
            if token_matches(token, expected):
                return AccessToken(token="bearer", client_id="massgen-mcp-user", scopes=[])
            return None

    return BearerToken()


QUIET_LOGGERS = ("httpx", "httpcore", "uvicorn.access")


def configure_logging(home: Path | None, log_file: str | None = "server.log") -> None:
    """Logs to stderr and ``<home>/<log_file>`` (None: stderr only), which is in the user's
    state folder until the records folder exists (:mod:`.log_file`: a host's health check
    writes nothing into the project); never to stdout."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        handlers.append(FollowingLogFile(home or default_home(), log_file))
    for handler in handlers:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: "
                                                "%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    # A line per HTTP request, each provider call's (httpx) and, over HTTP, each of the host's
    # (uvicorn's access log), would bury the lines that matter in what a host shows of our
    # stderr: those loggers say only warnings and errors.
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # fastmcp logs through its own (rich) handler, which would bypass the redaction: send its
    # records to ours instead, so they reach server.log too.
    fastmcp_log = logging.getLogger("fastmcp")
    fastmcp_log.handlers.clear()
    fastmcp_log.propagate = True


def serve_stdio(home: Path | None = None, *, tasks: bool = False) -> None:
    """Serve until stdin closes, SIGTERM or SIGINT. Each is a graceful stop: runs in flight
    are recorded ``interrupted`` (so ``resume_session`` continues them) and the process exits
    promptly, with status 0 and nothing but log lines on stderr."""
    with loading():  # what is loaded lives as long as we do: no collection walks it again
        from massgen_mcp.server import stdio
        from massgen_mcp.server.app import create_server
        from massgen_mcp.service import ConsensusService

        stdio.install()
        configure_logging(home)
        service = ConsensusService.local(home)
        server = create_server(service=service, tasks=tasks)

    async def stop(signum: int) -> None:
        logging.getLogger(__name__).info("%s: stopping", signal.Signals(signum).name)
        await service.aclose(interrupt=True)
        # stdin is read by a worker thread blocked in read() until the host closes the pipe,
        # and the server waits for it; the records are closed, so exit without waiting.
        sys.stdout.flush()
        logging.shutdown()
        os._exit(0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping: set[asyncio.Task[None]] = set()  # keep the stop task referenced

        def on_signal(signum: int) -> None:
            stopping.add(loop.create_task(stop(signum)))

        for signum in (signal.SIGINT, signal.SIGTERM):
            portable.on_signal(loop, signum, functools.partial(on_signal, signum))
        await server.run_async(transport="stdio", show_banner=False)

    asyncio.run(main())


def serve_http(*, host: str, port: int, path: str, home: Path | None = None,
               api: str = "both", pool: PoolConfig | None = None, tasks: bool = False) -> None:
    """Serve over HTTP: MCP at ``path`` and/or (``api``) the OpenAI-compatible endpoint, one
    token for both. With ``pool``, a front end: runs go to the pool's workers."""
    token = SETTINGS.mcp_token.read()
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"refusing to serve on {host} without a token: anyone on the network could run "
            f"models on your keys. Set {TOKEN_ENV} to a long random string (clients send "
            "'Authorization: Bearer <token>'), or bind 127.0.0.1")
    from massgen_mcp.pool.live import redact_url

    if pool is not None and token and not SETTINGS.tasks_key.read():
        raise ConfigError(
            "a pool front end with a token needs FASTMCP_TASKS_ENCRYPTION_KEY: MCP tasks keep "
            "each request's headers (the bearer token among them) in Redis, encrypted only "
            "with that key. Set it to the same long random string on every front end")
    # Bound before the server's imports (seconds on a busy machine) and the pool's check: a
    # busy port is one line at once, not after the wait.
    sock = listen(host, port)
    with loading():  # what is loaded lives as long as we do: no collection walks it again
        from massgen_mcp.server.app import create_server
        from massgen_mcp.server.shutdown import stopping
    membership = None
    if pool is not None:  # before serving: the pool's front ends must agree
        from massgen_mcp.pool.frontends import Membership

        membership = Membership(pool, token, (home or default_home()).resolve())
        asyncio.run(membership.check())
    configure_logging(home)
    server = create_server(home=home, auth=bearer_token_auth(token) if token else None,
                           token=token, openai_api=api in ("both", "openai"), pool=pool,
                           tasks=tasks or pool is not None, membership=membership)
    origin = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    logging.getLogger(__name__).info(
        "serving %s on %s (token %s; %s); live session pages: %s/sessions%s",
        {"both": f"MCP at {path} and /v1", "mcp": f"MCP at {path}", "openai": "/v1"}[api],
        origin, "required" if token else "off",
        f"runs on the pool at {redact_url(pool.url)}" if pool else "runs in this process",
        origin, f"?token=<{TOKEN_ENV}>" if token else "")
    from starlette.middleware import Middleware

    limit = SETTINGS.mcp_max_body_bytes.read()
    header_timeout = SETTINGS.mcp_header_timeout_s.read()
    body_timeout = SETTINGS.mcp_body_timeout_s.read()
    body_deadline = SETTINGS.mcp_body_deadline_s.read()
    middleware = [Middleware(BodySizeLimit, limit=limit),
                  Middleware(BodyReadTimeout, timeout_s=body_timeout, deadline_s=body_deadline)]
    if membership is not None:  # first: a front end that differs from its pool serves nothing
        from massgen_mcp.pool.frontends import ServingGate

        middleware.insert(0, Middleware(ServingGate, membership=membership))
    app = server.http_app(path=path, middleware=middleware, host_origin_protection="auto")
    if api == "openai":  # the MCP endpoint is not served at all
        app.router.routes = [r for r in app.router.routes if getattr(r, "path", "") != path]
    with loading():
        import uvicorn

    from massgen_mcp.server.connections import AcceptLimit, deadline_protocol

    accepts = AcceptLimit(logging.getLogger(__name__))

    class Server(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            asyncio.get_running_loop().set_exception_handler(accepts.handle)
            await super().serve(sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()  # calls in flight answer now (see server/shutdown.py)
            super().handle_exit(sig, frame)

    # log_config=None: uvicorn's records go to our (redacting) handlers and server.log.
    Server(uvicorn.Config(app, host=host, port=port, log_config=None,
                          http=deadline_protocol(header_timeout, body_deadline, accepts),
                          timeout_graceful_shutdown=5)).run(sockets=[sock])
