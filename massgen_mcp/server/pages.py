"""The HTTP server's plain web routes: ``/healthz``, the live report pages and their event
streams.

Kept apart from the MCP tools (server/app.py) because they speak HTTP to browsers and load
balancers, not MCP to models. All read the one service of the running server (they get it
through ``service``, which is None until the lifespan has started it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastmcp import FastMCP
from starlette.responses import StreamingResponse

from massgen_mcp.core.errors import MassgenError
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.secrets import redact_data
from massgen_mcp.server import shutdown
from massgen_mcp.server.guard import bearer_of, token_matches
from massgen_mcp.server.record_reads import read_off_loop
from massgen_mcp.service import ConsensusService

if TYPE_CHECKING:
    from massgen_mcp.pool.live import PoolConfig

RunningService = Callable[[], ConsensusService | None]

# Open event streams (/sessions/{id}/live) one server serves at once: each holds a watcher of
# its run, so a page reloaded in a loop or a script opening streams cannot pile them up.
MAX_LIVE_STREAMS = 32
STOP_POLL_S = 1.0  # a stream notices that the server is stopping within this
HEARTBEAT_S = 15.0  # a comment line after this long without news, so proxies keep it open
RECONNECT_MS = 2000  # what the browser waits before it opens a closed stream again


def add_health_route(mcp: FastMCP, pool: PoolConfig | None, service: RunningService) -> None:
    """``GET /healthz`` for load balancers: 200 when this front end can take runs (in a
    pool: Redis answers and a worker was seen within Docket's heartbeat window), else 503
    with the reason. No token: it says nothing about sessions."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    @mcp.custom_route("/healthz", methods=["GET"])
    async def healthz(_request: Request) -> Response:
        running = service()
        if running is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        info = await running.describe_executor()
        body = {"status": "ok", "mode": info.mode, "workers": len(info.workers)}
        if info.problem:
            return JSONResponse({**body, "status": "unavailable", "problem": info.problem},
                                status_code=503)
        return JSONResponse(body)


def live_payload(status: StatusRecord) -> dict[str, Any]:
    """What the live page draws from one status: the run's state, the user's notes and each
    agent's phase and draft. Built field by field: drafts are memory-only and never part of
    a status's serialised form."""
    agents = [{"id": aid, "phase": str(agent.phase), "activity": agent.activity,
               "draft": None if agent.draft is None else {
                   "purpose": str(agent.draft.purpose), "text": agent.draft.text,
                   "tokens": agent.draft.tokens, "first_token_s": agent.draft.first_token_s}}
              for aid, agent in status.agents.items()]
    return dict(redact_data({"status": str(status.status), "phase": str(status.phase),
                             "revision": status.revision, "notes": status.notes,
                             "agents": agents}))


async def live_events(statuses: AsyncIterator[StatusRecord]) -> AsyncGenerator[str, None]:
    """The event stream of one live page: a ``status`` event for each status ``statuses``
    yields, ``end`` once the run is over. It stops without ``end`` when the server stops
    (the browser reconnects to whoever serves next) or when the watch ends with the run
    still going (a run another process holds: the browser reconnects after
    :data:`RECONNECT_MS`, which polls it). Closing the stream (the client went away) closes
    ``statuses``, so no watcher outlives its page."""
    yield f"retry: {RECONNECT_MS}\n\n"
    pending: asyncio.Task[StatusRecord] | None = None
    try:
        quiet = 0.0
        while not shutdown.stopping.is_set():
            if pending is None:
                pending = asyncio.create_task(_next(statuses))
            done, _ = await asyncio.wait({pending}, timeout=STOP_POLL_S)
            if not done:
                quiet += STOP_POLL_S
                if quiet >= HEARTBEAT_S:
                    quiet = 0.0
                    yield ": still running\n\n"
                continue
            quiet, step, pending = 0.0, pending, None
            try:
                status = step.result()
            except StopAsyncIteration:
                return
            yield f"event: status\ndata: {json.dumps(live_payload(status))}\n\n"
            if status.done:
                yield "event: end\ndata: {}\n\n"
                return
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        aclose = getattr(statuses, "aclose", None)
        if aclose is not None:
            await aclose()


async def _next(statuses: AsyncIterator[StatusRecord]) -> StatusRecord:
    return await anext(statuses)


def add_live_pages(mcp: FastMCP, token: str | None, service: RunningService) -> None:
    """``/sessions`` and ``/sessions/{id}`` on the HTTP server: the report, with each agent's
    draft streaming in while a run goes on (``/sessions/{id}/live``, server-sent events).
    Same token as /mcp, as ``Authorization: Bearer`` or ``?token=`` (browsers cannot send
    headers from the address bar, nor from an EventSource); Host and Origin are checked by
    the app's guard for every route alike."""
    from urllib.parse import quote

    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response

    from massgen_mcp.render.html import LIVE_CSP, REPORT_CSP

    streams: set[object] = set()  # the open event streams (LiveStream)

    def refused(request: Request) -> Response | None:
        given = bearer_of(request.headers) or request.query_params.get("token", "")
        if token_matches(given, token):
            return None
        return Response("missing or wrong token", status_code=401,
                        headers={"WWW-Authenticate": "Bearer"})

    def running() -> ConsensusService:
        found = service()
        assert found is not None, "the server's lifespan has not started"
        return found

    @mcp.custom_route("/sessions", methods=["GET"])
    async def sessions_page(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        from massgen_mcp.render.html import render_session_list

        suffix = f"?token={quote(request.query_params['token'])}" if (
            "token" in request.query_params) else ""
        found, _ = running().list_sessions(limit=200)
        return HTMLResponse(render_session_list(found, link_suffix=suffix),
                            headers={"Content-Security-Policy": REPORT_CSP})

    @mcp.custom_route("/sessions/{session_id}", methods=["GET"])
    async def session_page(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        from massgen_mcp.render.html import render_report

        try:  # in a worker thread, as the report resource: see server/app.py
            record = await read_off_loop(running().record, request.path_params["session_id"])
        except MassgenError as exc:
            return Response(str(exc), status_code=404)
        # The page of a running run carries the live script (render_report says when).
        policy = LIVE_CSP if record.status.status is RunStatus.RUNNING else REPORT_CSP
        page = await read_off_loop(render_report, record, live=True)
        return HTMLResponse(page, headers={
            "Content-Security-Policy": policy, "Cache-Control": "no-store"})

    @mcp.custom_route("/sessions/{session_id}/live", methods=["GET"])
    async def session_events(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        session_id = request.path_params["session_id"]
        try:
            await running().status(session_id)  # an unknown id: 404 now, not a dead stream
        except MassgenError as exc:
            return Response(str(exc), status_code=404)
        if len(streams) >= MAX_LIVE_STREAMS:
            return Response(f"{len(streams)} live pages are open on this server, the most it "
                            "serves at once; close one (a page refused one reloads itself "
                            "every few seconds instead)",
                            status_code=503, headers={"Retry-After": "10"})
        return LiveStream(live_events(running().watch(session_id)), streams)


class LiveStream(StreamingResponse):
    """A live page's event stream, holding its place in ``streams`` from the moment it is
    made until its connection is over, whether it ran to the end, the client went away, or
    it never started (a client that hung up at once): the cap counts every one."""

    def __init__(self, events: AsyncGenerator[str, None], streams: set[object]) -> None:
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self.events, self.streams = events, streams
        streams.add(self)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.streams.discard(self)
            await self.events.aclose()
