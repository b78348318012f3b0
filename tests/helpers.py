"""Helpers the tests share: free ports, scripted teams, a run helper, a record reader.

End-to-end tests send every model call over real HTTP through litellm to a scripted
OpenAI-compatible server on 127.0.0.1 (:mod:`massgen_mcp.testing.scripted`); tests of the
protocol and the engine use the same scripts in process (``ScriptedProvider``), without
litellm. Nothing reaches the network.

Plain functions live here, not in ``conftest.py``: pytest loads a conftest itself, so a test
that imported it too would hold a second copy of it. ``tests`` is a package, and every test
imports what it shares as ``tests.helpers`` or from a harness beside it (``tests.servers``,
``tests.pool_harness``, ``tests.coding_clis``, ...), never from another test module and never
by a bare name.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import threading
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

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.base import TeamProvider
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Policy,
    Reply,
    ScriptedProvider,
    ScriptedServer,
    agree,
    answer,
    text,
    vote,
)

FAST = {"retry_backoff_s": 0.01, "call_timeout_s": 10.0}
NEVER_S = 30.0  # a scripted model this slow is never waited for in the tests
# How a reply of 100,000 characters and more streams in a test of what the whole reply holds:
# in the 4-character pieces of a hosted model it is 25,000+ chunks, 1 s of litellm's CPU and
# more, which a loaded 2-core machine stretches past FAST's call_timeout_s (the call is then
# retried from scratch and the agent dropped, and the test sees no corrective retry at all).
# In 4 KiB pieces it still streams, in a few dozen chunks.
BIG_CHUNK_CHARS = 4096


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

    def __call__(self, policy: Policy = ..., latency_s: float = ...,
                 chunk_chars: int = ...) -> ScriptedServer: ...


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


def team_for(server: ScriptedServer | ScriptedProvider,
             models: tuple[str, ...] = ("a", "b", "c"),
             agent_overrides: dict[str, dict[str, Any]] | None = None,
             **options: Any) -> TeamConfig:
    """A team of one agent per model, every one served by ``server`` (in process: no
    base_url, ``run_team(..., provider=server)`` answers)."""
    agents = []
    for model in models:
        agent = {"id": f"agent_{model}", "model": f"openai/{model}"}
        if isinstance(server, ScriptedServer):
            agent["base_url"] = server.base_url
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
                   drafts: bool = True, provider: TeamProvider | None = None) -> Outcome:
    """Run to the end; ``listener`` sees every event as the engine applies it. ``drafts``:
    with live drafts (calls stream), as a server runs; without, as the headless CLI does.
    ``provider``: the models in process (a ScriptedProvider); by default litellm over HTTP."""
    store = SessionStore()
    runner = LocalExecutor(store, provider or ProviderRouter(), drafts=drafts)
    if listener is not None:
        runner.add_event_listener(lambda sid, event: listener(sid, event.as_dict()))
    run = await runner.start(RequestRecord(question=question, context=context), team)
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


class KnownAccuracies:
    """Questions 'What is X plus X+3?' for X = 0..4, with known accuracies:

    * agent a right for X in 0..2, one too high otherwise (3 of 5);
    * agent b always one too high (0 of 5);
    * agent c right when X is odd, else one too high (2 of 5);
    * votes go to a's answer, except on X = 3 to c's; the winner's final answer is right
      except on X = 4, where every member was wrong.

    Self-consistency samples of a (its 2nd, 3rd, ... draft of a question) are right on X = 0..2,
    right on X = 3 except every third one (7 samples: 5 right), and wrong on X = 4."""

    def __init__(self) -> None:
        self.drafts_of_a: dict[int, int] = {}
        self.lock = threading.Lock()

    def __call__(self, req: ChatRequest) -> Reply:
        question = re.search(r"What is (\d+) plus (\d+)\?", req.user)
        assert question is not None
        x, y = map(int, question.groups())
        right, wrong = x + y, x + y + 1
        if req.is_final:
            return text(f"Final.\nAnswer: {wrong if x == 4 else right}")
        if req.vote_labels:
            return vote(req.label_of("Model c" if x == 3 else "Model a"), "careful")
        if req.model == "a":
            with self.lock:
                n = self.drafts_of_a[x] = self.drafts_of_a.get(x, -1) + 1
            ok = x <= 2 or (n > 0 and x == 3 and n % 3 != 0)
        else:
            ok = req.model == "c" and x % 2 == 1
        return answer(f"Model {req.model} thinks.\nAnswer: {right if ok else wrong}")


def write_questions(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"question": f"What is {x} plus {x + 3}?",
                                        "answer": 2 * x + 3}) + "\n" for x in range(count)))
    return path


class Gate:
    """Holds agent_b's and agent_c's votes in the server until released; agent_a votes at
    once. :meth:`held` returns once both held votes have arrived."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._arrived = threading.Semaphore(0)

    def policy(self, req: ChatRequest) -> Reply:
        if req.vote_labels and req.model != "a" and not self.release.is_set():
            self._arrived.release()
            self.release.wait(60)
        return agree(req)

    async def held(self) -> None:
        for _ in range(2):
            assert await asyncio.to_thread(self._arrived.acquire, True, 30)


def can_mount_tmpfs() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


FOREIGN_URL = "http://collector.example.invalid/v1"


