"""Helpers the tests share: free ports, scripted teams, a run helper, a record reader.

End-to-end tests send every model call over real HTTP through litellm to a scripted
OpenAI-compatible server on 127.0.0.1 (:mod:`massgen_mcp.testing.scripted`); tests of the
protocol and the engine use the same scripts in process (``ScriptedProvider``), without
litellm. Nothing reaches the network.

Plain functions live here, not in ``conftest.py``: pytest loads a conftest itself, so a test
that imported it too would hold a second copy of it. ``tests`` is a package, and every test
imports what it shares as ``tests.helpers`` or ``tests.test_<name>``, never by a bare name.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fastmcp.client.client import CallToolResult
from mcp.types import (
    BlobResourceContents,
    ContentBlock,
    TextContent,
    TextResourceContents,
)

from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.providers.litellm_provider import LiteLLMProvider
from massgen_mcp.sessions.runner import SessionRunner
from massgen_mcp.sessions.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Policy, Reply, ScriptedServer, agree, answer

FAST = {"retry_backoff_s": 0.01, "call_timeout_s": 10.0}
NEVER_S = 30.0  # a scripted model this slow is never waited for in the tests


def unused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def data(result: CallToolResult) -> dict[str, Any]:
    """A tool result's structured content (every tool here returns one)."""
    assert result.structured_content is not None, result
    return result.structured_content


def text_of(item: ContentBlock | TextResourceContents | BlobResourceContents) -> str:
    """The text of a content block or a resource's contents; fails on any other kind."""
    assert isinstance(item, TextContent | TextResourceContents), item
    return item.text


class Scripted(Protocol):
    """The ``scripted`` fixture: starts a scripted model server, stopped after the test."""

    def __call__(self, policy: Policy = ..., latency_s: float = ...) -> ScriptedServer: ...


def hostile(payload: str) -> Policy:
    """Agent b's answer and the final answer (Markdown) carry ``payload``: escaping tests."""
    def policy(req: ChatRequest) -> Reply:
        if req.model == "b" and not req.vote_labels and not req.is_final:
            return answer(f"My answer {payload}")
        if req.is_final:
            return Reply("text", content=f"# Final\n\n**42** {payload}\n\n- one\n- two")
        return agree(req)
    return policy


def by_model(default: Policy = agree, **policies: Policy) -> Policy:
    """Dispatch on the request's model name (agents use models openai/a, openai/b, ...)."""
    def policy(req: ChatRequest) -> Reply:
        return policies.get(req.model, default)(req)
    return policy


def team_for(server: ScriptedServer, models: tuple[str, ...] = ("a", "b", "c"),
             agent_overrides: dict[str, dict[str, Any]] | None = None,
             **options: Any) -> TeamConfig:
    """A team of one agent per model, every one served by ``server``."""
    agents = []
    for model in models:
        agent = {"id": f"agent_{model}", "model": f"openai/{model}", "base_url": server.base_url}
        agent.update((agent_overrides or {}).get(model, {}))
        agents.append(agent)
    return build_team({"agents": agents, "options": {**FAST, **options}})


@dataclass
class Outcome:
    """A finished run: its result record, its folder and the store that wrote it."""

    result: dict[str, Any]
    folder: Path
    store: SessionStore

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The recorded events as the JSON lines on disk, optionally of one type."""
        events = self.store.read_events(self.result["session_id"])
        return [e.as_dict() for e in events if kind is None or e.type == kind]


async def run_team(team: TeamConfig, question: str = "What is 6*7?", context: str | None = None,
                   listener: Callable[[str, dict[str, Any]], None] | None = None, *,
                   drafts: bool = True) -> Outcome:
    """Run to the end; ``listener`` sees every event as the engine applies it. ``drafts``:
    with live drafts (calls stream), as a server runs; without, as the headless CLI does."""
    store = SessionStore()
    runner = SessionRunner(store, LiteLLMProvider(), drafts=drafts)
    if listener is not None:
        runner.add_event_listener(lambda sid, event: listener(sid, event.as_dict()))
    run = await runner.start(question, team, context=context)
    result = await run.task
    return Outcome(result.model_dump(mode="json"), store.folder(run.session_id), store)


def read_record(folder: Path) -> dict[str, Any]:
    """Parse every file of a session record (fails if any is missing or torn)."""
    record: dict[str, Any] = {}
    for name in ("config.json", "request.json", "status.json", "result.json"):
        record[name] = json.loads((folder / name).read_text())
    record["events"] = [json.loads(line) for line in
                        (folder / "events.jsonl").read_text().splitlines()]
    record["answers"] = {p.stem: p.read_text() for p in (folder / "answers").glob("*.md")}
    final = folder / "final.md"
    record["final.md"] = final.read_text() if final.exists() else None
    return record
