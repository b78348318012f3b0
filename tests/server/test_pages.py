"""The live HTML pages read the server's one service: they build no second one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from massgen_mcp.server.app import create_server
from massgen_mcp.service import ConsensusService


async def test_the_pages_use_the_servers_service(home: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    service = ConsensusService.local(home)
    built: list[Any] = []
    local = ConsensusService.local

    def counted(*args: Any, **kwargs: Any) -> ConsensusService:
        built.append(args)
        return local(*args, **kwargs)

    monkeypatch.setattr(ConsensusService, "local", counted)
    app = create_server(home=home, service=service).http_app()
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        listed = await client.get("/sessions")
        missing = await client.get("/sessions/nosuchsession")
    assert listed.status_code == 200, listed.text
    assert missing.status_code == 404
    assert built == []
