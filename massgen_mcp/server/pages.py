"""The HTTP server's plain web routes: ``/healthz`` and the live report pages.

Kept apart from the MCP tools (server/app.py) because they speak HTTP to browsers and load
balancers, not MCP to models. Both read the one service of the running server (they get it
through ``service``, which is None until the lifespan has started it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fastmcp import FastMCP

from massgen_mcp.core.errors import MassgenError
from massgen_mcp.server.guard import bearer_of, token_matches
from massgen_mcp.service import ConsensusService

if TYPE_CHECKING:
    from massgen_mcp.pool.live import PoolConfig

RunningService = Callable[[], ConsensusService | None]


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


def add_live_pages(mcp: FastMCP, token: str | None, service: RunningService) -> None:
    """``/sessions`` and ``/sessions/{id}`` on the HTTP server: the report, refreshing every
    2 s while a run goes on. Same token as /mcp, as ``Authorization: Bearer`` or ``?token=``
    (browsers cannot send headers from the address bar)."""
    from urllib.parse import quote

    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response

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
        return HTMLResponse(render_session_list(found, link_suffix=suffix))

    @mcp.custom_route("/sessions/{session_id}", methods=["GET"])
    async def session_page(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
        from massgen_mcp.render.html import render_report

        try:
            record = running().record(request.path_params["session_id"])
        except MassgenError as exc:
            return Response(str(exc), status_code=404)
        return HTMLResponse(render_report(record, live=True))
