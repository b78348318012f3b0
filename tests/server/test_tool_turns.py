"""The MCP tools save the host's turns (issue 31 §4).

A host pays a turn (time, tokens) for every tool call, so ``get_status(wait_s)`` waits for the
run's end by default and answers once, sending progress notifications meanwhile;
``until="change"`` is the live views' way to hear every step. ``get_result``'s summary keeps
vote reasons short whatever the team's size, and ``continue_session`` says that it started a
new session to poll.

Runs move in steps the test releases (from the progress notifications the server sends while
it waits), so every wait has something to wake it and nothing depends on timing; real servers
over stdio, except where a test must see inside the server's event loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from mcp import Client as SdkClient
from mcp.client.stdio import StdioServerParameters
from mcp.shared.dispatcher import ProgressFnT

from massgen_mcp.server import launch
from massgen_mcp.server.app import create_server
from massgen_mcp.server.views import SUMMARY_REASON_CHARS, SUMMARY_REASONS
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, vote
from tests.helpers import Scripted
from tests.servers import server_env

BOUND_S = 20.0  # far below wait_s: a wait that slept to its timeout fails the test
GATE_S = 60.0  # a gate nobody opens lets the run go after this, so a failure cannot hang


def stdio_server(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "massgen_mcp"],
                                 env=server_env(home))


def models_for(server: ScriptedServer, n: int = 3) -> list[str]:
    return [f"openai/{chr(ord('a') + i)}@{server.base_url}" for i in range(n)]


class Gates:
    """A run held in two places the test opens: agent c's first answer, and every vote."""

    def __init__(self) -> None:
        self.c_answers = threading.Event()
        self.votes = threading.Event()

    def policy(self, req: ChatRequest) -> Reply:
        if req.vote_labels or (req.wants_json and "<answers>" in req.user):
            self.votes.wait(GATE_S)
        elif req.model == "c" and not req.is_final and not req.is_check:
            self.c_answers.wait(GATE_S)
        return agree(req)

    def open(self) -> None:
        self.c_answers.set()
        self.votes.set()


def progress_log(react: Callable[[str], None]) -> tuple[list[str], ProgressFnT]:
    """A progress callback that records each message and hands it to ``react``."""
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")
        react(message or "")

    return seen, on_progress


async def test_a_default_wait_answers_once_at_the_end_with_progress_on_the_way(
        scripted: Scripted, home: Path) -> None:
    """The run changes twice during the wait (c answers, then everyone votes); the call
    answers once, when the run is done, and the changes arrive as progress."""
    gates = Gates()
    server = scripted(gates.policy)

    def react(message: str) -> None:
        gates.c_answers.set()  # the wait has begun: let the run move
        if "3 answers" in message:
            gates.votes.set()

    seen, on_progress = progress_log(react)
    try:
        async with SdkClient(stdio_server(home), mode="legacy") as client:
            started = await client.call_tool("run_consensus", {
                "question": "What is 6*7?", "models": models_for(server)})
            sid = started.structured_content["session_id"]
            replies: list[dict[str, Any]] = []
            while not (replies and replies[-1]["done"]):
                got = await asyncio.wait_for(client.call_tool(
                    "get_status", {"session_id": sid, "wait_s": 50},
                    progress_callback=on_progress), BOUND_S)
                replies.append(got.structured_content)
    finally:
        gates.open()
    assert len(replies) == 1, [r["phase"] for r in replies]
    assert replies[0]["status"] == "completed" and "get_result" in replies[0]["next_step"]
    assert any("3 answers" in m for m in seen), seen  # a change it did not return on
    assert any("votes" in m for m in seen), seen


async def test_until_change_returns_at_the_first_change(scripted: Scripted, home: Path
                                                        ) -> None:
    gates = Gates()
    server = scripted(gates.policy)
    _, on_progress = progress_log(lambda _: gates.c_answers.set())
    try:
        async with SdkClient(stdio_server(home), mode="legacy") as client:
            started = await client.call_tool("run_consensus", {
                "question": "What is 6*7?", "models": models_for(server)})
            sid = started.structured_content["session_id"]
            now = (await client.call_tool("get_status", {"session_id": sid})
                   ).structured_content
            changed = (await asyncio.wait_for(client.call_tool("get_status", {
                "session_id": sid, "wait_s": 50, "until": "change",
                "after_revision": now["revision"]}, progress_callback=on_progress), BOUND_S)
                       ).structured_content
            assert not changed["done"], "the votes are held: only a step can have come"
            assert changed["revision"] > now["revision"]
            early = await client.call_tool("get_result", {"session_id": sid})
            assert early.is_error  # still running: the way on is a wait
            assert (f"session {sid} is running and has no result yet; call get_status with "
                    "wait_s=" in early.content[0].text)  # type: ignore[union-attr]
            gates.votes.set()
            done = (await asyncio.wait_for(client.call_tool(
                "get_status", {"session_id": sid, "wait_s": 50}), BOUND_S)).structured_content
            assert done["status"] == "completed"
            refused = await client.call_tool("get_status", {
                "session_id": sid, "wait_s": 1, "until": "whenever"})
    finally:
        gates.open()
    assert refused.is_error and "until" in refused.content[0].text  # type: ignore[union-attr]


async def test_a_quiet_wait_still_sends_progress(scripted: Scripted, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """While nothing changes (c thinks for minutes), progress still comes: hosts such as
    Claude Code reset their idle timer only on it. The interval is shortened so the test
    sees several in a moment; the run is released after three alike in a row."""
    monkeypatch.setattr(launch, "QUIET_PROGRESS_S", 0.05)
    gates = Gates()
    server = scripted(gates.policy)

    def react(message: str) -> None:
        if seen[-3:] == [message] * 3:
            gates.open()

    seen, on_progress = progress_log(react)
    try:
        async with Client(create_server(root=tmp_path), mode="legacy",
                          progress_handler=on_progress) as client:
            sid = (await client.call_tool("run_consensus", {
                "question": "q", "models": models_for(server)})).structured_content[
                "session_id"]
            done = (await asyncio.wait_for(client.call_tool(
                "get_status", {"session_id": sid, "wait_s": 50}), BOUND_S)).structured_content
    finally:
        gates.open()
    # Released only by three alike in a row (the same state: no change, still progress),
    # well before the gates' own timeout.
    assert done["status"] == "completed", seen


async def test_a_wait_ends_with_its_run_when_the_run_is_cancelled(scripted: Scripted,
                                                                  home: Path) -> None:
    gates = Gates()
    server = scripted(gates.policy)
    waiting = asyncio.Event()
    _, on_progress = progress_log(lambda _: waiting.set())
    try:
        async with SdkClient(stdio_server(home), mode="legacy") as client:
            sid = (await client.call_tool("run_consensus", {
                "question": "q", "models": models_for(server)})).structured_content[
                "session_id"]
            wait = asyncio.create_task(client.call_tool(
                "get_status", {"session_id": sid, "wait_s": 50},
                progress_callback=on_progress))
            await asyncio.wait_for(waiting.wait(), BOUND_S)
            await client.call_tool("cancel_session", {"session_id": sid})
            ended = (await asyncio.wait_for(wait, BOUND_S)).structured_content
    finally:
        gates.open()
    assert ended["status"] == "cancelled" and ended["done"]


async def test_a_caller_that_gives_up_ends_the_wait(scripted: Scripted, tmp_path: Path
                                                    ) -> None:
    """A host that abandons the call (Esc; the client sends notifications/cancelled) must
    not leave the server waiting on its behalf until wait_s."""
    gates = Gates()
    server = scripted(gates.policy)
    service = ConsensusService.local(tmp_path / "home", Workspace(tmp_path))
    waiting = asyncio.Event()
    _, on_progress = progress_log(lambda _: waiting.set())

    def waits() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks()
                if getattr(t.get_coro(), "__qualname__", "") == "ConsensusService.wait"]

    try:
        async with Client(create_server(root=tmp_path, service=service), mode="legacy",
                          progress_handler=on_progress) as client:
            sid = (await client.call_tool("run_consensus", {
                "question": "q", "models": models_for(server)})).structured_content[
                "session_id"]
            call = asyncio.create_task(client.call_tool(
                "get_status", {"session_id": sid, "wait_s": 50}))
            await asyncio.wait_for(waiting.wait(), BOUND_S)
            assert len(waits()) == 1
            call.cancel()
            # The server handles the cancellation before it answers the next request.
            status = (await client.call_tool("get_status", {"session_id": sid})
                      ).structured_content
            assert status["status"] == "running"
            assert waits() == []
    finally:
        gates.open()


def long_reasons(req: ChatRequest) -> Reply:
    """Every agent votes with an essay; a and b for the first answer, the rest for another."""
    if req.vote_labels or (req.wants_json and "<answers>" in req.user):
        labels = sorted(req.answers) if req.answers else req.vote_labels
        pick = labels[0] if req.model in ("a", "b") else labels[-1]
        return vote(pick, f"{req.model} says: " + "because " * 300)
    return agree(req)


async def test_get_result_summary_caps_vote_reasons(scripted: Scripted, home: Path) -> None:
    server = scripted(long_reasons)
    async with SdkClient(stdio_server(home), mode="legacy") as client:
        handle = (await client.call_tool("run_consensus", {
            "question": "Which?", "models": models_for(server, 8), "wait_s": 50,
            "options": {"decide": "all"}})).structured_content
        sid = handle["session_id"]
        assert handle["status"] == "completed", handle
        summary = await client.call_tool("get_result", {"session_id": sid})
        full = (await client.call_tool("get_result", {"session_id": sid, "detail": "full"})
                ).structured_content
    votes = summary.structured_content["votes"]
    assert len(votes) == 8  # every vote is still listed, who for what
    shown = [v for v in votes if v["reason"]]
    assert len(shown) == SUMMARY_REASONS
    assert len({v["answer"] for v in shown}) == len({v["answer"] for v in votes})  # dissent kept
    assert all(v["reason_truncated"] for v in votes)
    assert all(len(v["reason"]) <= SUMMARY_REASON_CHARS + 2 and v["reason"].endswith(" …")
               for v in shown)
    # The record keeps each reason up to MAX_REASON_CHARS (2,000); detail="full" gives it all.
    assert all(len(v["reason"]) > 1000 and not v["reason_truncated"] for v in full["votes"])
    reply = json.dumps(summary.structured_content)
    assert len(reply) < len(json.dumps(full)) / 4, len(reply)


async def test_continue_session_says_it_started_a_new_session(scripted: Scripted, home: Path
                                                              ) -> None:
    server = scripted(agree)
    async with SdkClient(stdio_server(home), mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "NEW session_id" in (listed["continue_session"].description or "")
        first = (await client.call_tool("run_consensus", {
            "question": "What is 6*7?", "models": models_for(server), "wait_s": 50})
                 ).structured_content
        follow = (await client.call_tool("continue_session", {
            "session_id": first["session_id"], "follow_up": "And 6*8?"})).structured_content
        new_id = follow["session_id"]
        assert new_id != first["session_id"]
        assert f"NEW session {new_id}" in follow["message"]
        assert "get_status" in follow["message"]
        done = (await client.call_tool("get_status", {"session_id": new_id, "wait_s": 50})
                ).structured_content
        waited = (await client.call_tool("continue_session", {
            "session_id": new_id, "follow_up": "And 6*9?", "wait_s": 50})).structured_content
    assert done["status"] == "completed"
    assert waited["result"]["status"] == "completed"
    assert f"NEW session {waited['session_id']}" in waited["message"]
    assert waited["session_id"] not in (first["session_id"], new_id)


async def test_elapsed_time_runs_on_while_a_call_is_in_flight(scripted: Scripted,
                                                              home: Path) -> None:
    """A status read between two changes tells the run's age now, not at its last change (a
    reader saw 39 s for a run 100 s old, with a slow call in flight)."""
    gates = Gates()
    server = scripted(gates.policy)
    try:
        async with Client(create_server()) as client:
            sid = (await client.call_tool("run_consensus", {
                "question": "q", "models": models_for(server)})).structured_content[
                "session_id"]
            status: dict[str, Any] = {"answers": []}
            while len(status["answers"]) < 2:  # a and b answered; c is held at its gate
                status = (await client.call_tool("get_status", {
                    "session_id": sid, "wait_s": 10, "until": "change",
                    "after_revision": status.get("revision")})).structured_content
            first = (await client.call_tool("get_status", {"session_id": sid})
                     ).structured_content
            second = (await client.call_tool("get_status", {"session_id": sid})
                      ).structured_content
    finally:
        gates.open()
    assert first["revision"] == second["revision"], "nothing changed between the two reads"
    assert second["elapsed_s"] > first["elapsed_s"] > 0
