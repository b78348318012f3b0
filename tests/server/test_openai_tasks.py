"""The /v1 routes' background tasks belong to the server: none outlives its shutdown.

A request whose team never answers is in flight when the server stops; once the lifespan has
ended, every task the route started (the run followed to its end) must be finished."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from massgen_mcp.core.env import user_config_dir
from massgen_mcp.server.app import create_server

QUESTION = [{"role": "user", "content": "What is 6*7?"}]


@pytest.fixture
def silent(home: Path) -> Iterator[str]:
    """Team model ``massgen/silent``: agents whose server accepts connections and never
    answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        base_url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        folder = user_config_dir()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "silent.yaml").write_text(json.dumps({"agents": [
            {"id": f"agent_{m}", "backend": {"type": "openai", "model": m,
                                             "base_url": base_url}}
            for m in "ab"]}))
        yield "massgen/silent"


def route_tasks() -> list[asyncio.Task[object]]:
    """Tasks still going that run the /v1 routes' code (following a run, watching a client)."""
    return [task for task in asyncio.all_tasks()
            if not task.done()
            and getattr(task.get_coro(), "__qualname__", None) in ("follow", "_watch")]


async def test_no_route_task_survives_shutdown(home: Path, silent: str) -> None:
    app = create_server(home=home, openai_api=True).http_app()
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                   base_url="http://127.0.0.1")
        request = asyncio.create_task(client.post(
            "/v1/chat/completions", json={"model": silent, "messages": QUESTION}))
        async with asyncio.timeout(30):
            while not route_tasks():
                assert not request.done(), request.result().text
                await asyncio.sleep(0.05)
    try:
        assert route_tasks() == []
    finally:
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
        await client.aclose()


async def test_the_route_tasks_are_capped(home: Path, silent: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.server import openai_api

    monkeypatch.setattr(openai_api, "MAX_OWNED_TASKS", 1)
    app = create_server(home=home, openai_api=True).http_app()
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        streamed = await client.post("/v1/chat/completions", json={
            "model": silent, "messages": QUESTION, "stream": True})
        assert streamed.status_code == 503, streamed.text
        assert "too many requests at once" in streamed.json()["error"]["message"]
