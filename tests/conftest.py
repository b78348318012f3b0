"""Shared fixtures: an isolated record folder, scripted model servers, and a run helper.

End-to-end tests send every model call over real HTTP through litellm to a scripted
OpenAI-compatible server on 127.0.0.1 (:mod:`massgen_mcp.testing.scripted`); tests of the
protocol and the engine use the same scripts in process (``ScriptedProvider``), without
litellm. Nothing reaches the network.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.spec import PROVIDER_KEY_ENV, build_team
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm
from massgen_mcp.sessions.runner import SessionRunner
from massgen_mcp.sessions.store import SessionStore
from massgen_mcp.team import discover
from massgen_mcp.testing.scripted import ChatRequest, Policy, Reply, ScriptedServer, agree, answer

FAST = {"retry_backoff_s": 0.01, "call_timeout_s": 10.0}


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test writes its records to its own folder, never to ./.massgen, and default-team
    discovery sees no local model server and no user config of the developer's machine."""
    folder = tmp_path / "massgen-home"
    monkeypatch.setenv("MASSGEN_HOME", str(folder))
    monkeypatch.setenv("MASSGEN_LOCAL_PORTS", str(unused_port()))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("MASSGEN_CLIS", "none")  # the developer's own CLIs stay out
    discover._probe_cache.clear()
    return folder


@pytest.fixture
def nothing_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider keys and no embedded model: a run must name its team."""
    for names in PROVIDER_KEY_ENV.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("massgen_mcp.providers.llamacpp_provider.embedded_model_name",
                        lambda: None)


@pytest.fixture(scope="session")
def _litellm_loaded() -> None:
    load_litellm()  # once per test session, so no test pays the ~3 s import on its clock


@pytest.fixture
def scripted(_litellm_loaded: None) -> Iterator[Callable[..., ScriptedServer]]:
    """Start scripted servers: ``server = scripted(policy, latency_s=0.0)``."""
    servers: list[ScriptedServer] = []

    def start(policy: Policy = agree, latency_s: float = 0.0) -> ScriptedServer:
        server = ScriptedServer(policy, latency_s=latency_s).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


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
             agent_overrides: dict[str, dict[str, Any]] | None = None, **options: Any):
    agents = []
    for model in models:
        agent = {"id": f"agent_{model}", "model": f"openai/{model}", "base_url": server.base_url}
        agent.update((agent_overrides or {}).get(model, {}))
        agents.append(agent)
    return build_team({"agents": agents, "options": {**FAST, **options}})


@dataclass
class Outcome:
    result: dict[str, Any]
    folder: Path
    store: SessionStore

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The recorded events as the JSON lines on disk, optionally of one type."""
        events = self.store.read_events(self.result["session_id"])
        return [e.as_dict() for e in events if kind is None or e.type == kind]


async def run_team(team, question: str = "What is 6*7?", context: str | None = None,
                   listener: Callable[[str, dict[str, Any]], None] | None = None) -> Outcome:
    """Run to the end; ``listener`` sees every event as the engine applies it."""
    store = SessionStore()
    runner = SessionRunner(store, LiteLLMProvider())
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
