"""MCP servers as agent tools: a team whose agents use them, a run, and what a call was offered."""

from __future__ import annotations

from typing import Any

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.team.massgen_yaml import team_from_mapping
from massgen_mcp.testing.scripted import ChatRequest
from tests.helpers import FAST


def offered(req: ChatRequest) -> list[str]:
    return [t["function"]["name"] for t in req.tools]


def team(server_url: str, agents: list[dict[str, Any]], **options: Any) -> TeamConfig:
    config = {"agents": [
        {"id": a["id"], "backend": {"type": "chatcompletion", "model": a["id"],
                                    "base_url": server_url, **a.get("backend", {})}}
        for a in agents], "options": {**FAST, **options}}
    built, _ = team_from_mapping(config)
    return built


async def run(the_team: TeamConfig, question: str = "q") -> tuple[dict[str, Any], list[dict[str,
              Any]]]:
    store = SessionStore()
    runner = LocalExecutor(store, ProviderRouter())
    live = await runner.start(RequestRecord(question=question), the_team)
    result = await live.task
    return (result.model_dump(mode="json"),
            [e.as_dict() for e in store.read_events(live.session_id)])


