"""The MCP surface through fastmcp's in-memory Client, in both protocol eras."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.client import CallToolResult
from fastmcp.client.transports import FastMCPTransport

from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree
from tests.helpers import Scripted, data, text_of

SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "tools_list.json"

McpClient = Client[FastMCPTransport]  # an in-memory client of create_server()


@pytest.fixture(params=["auto", "legacy"])
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[McpClient]:
    (tmp_path / "notes.md").write_text("The answer must be a number.")
    async with Client(create_server(root=tmp_path), mode=request.param) as c:
        yield c


def models_for(server: ScriptedServer, n: int = 3) -> list[str]:
    return [f"openai/{m}@{server.base_url}" for m in "abc"[:n]]


async def call(client: McpClient, tool: str, **args: Any) -> CallToolResult:
    result = await client.call_tool(tool, args, raise_on_error=False)
    return result


async def finish(client: McpClient, session_id: str) -> dict[str, Any]:
    """Poll get_status the way the instructions tell hosts to, until done."""
    for _ in range(100):
        status = data(await call(client, "get_status", session_id=session_id, wait_s=10))
        if status["done"]:
            return status
    raise AssertionError("run did not finish")


async def test_run_poll_result(client: McpClient, scripted: Scripted) -> None:
    server = scripted(agree)
    started = await call(client, "run_consensus", question="What is 6*7?",
                         models=models_for(server), context_files=["notes.md"])
    handle = data(started)
    assert handle["status"] == "running" and handle["result"] is None
    status = await finish(client, handle["session_id"])
    assert status["status"] == "completed" and "get_result" in status["next_step"]
    assert {a["phase"] for a in status["agents"]} == {"voted"}
    result = data(await call(client, "get_result", session_id=handle["session_id"]))
    assert result["final_answer"].startswith("Final: ")
    assert result["winner"]["model"].startswith("openai/")
    assert len(result["votes"]) == 3 and all(v["reason"] for v in result["votes"])
    assert result["usage"]["calls"] == 7 and result["usage"]["cost_usd"] is None
    assert Path(result["record_dir"]).is_dir()
    assert all("The answer must be a number." in q.user for q in server.requests)


async def test_wait_returns_the_result_and_reports_progress(tmp_path: Path,
                                                            scripted: Scripted) -> None:
    server = scripted(agree, latency_s=0.05)
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with Client(create_server(root=tmp_path), mode="legacy",
                      progress_handler=on_progress) as c:
        handle = (await c.call_tool("run_consensus", {
            "question": "6*7?", "models": models_for(server), "wait_s": 30})).structured_content
    assert handle["status"] == "completed"
    assert handle["result"]["final_answer"].startswith("Final: ")
    assert progress, "progress notifications while waiting"
    values = [v for v, _ in progress]
    assert values == sorted(values) and any("votes" in (m or "") for _, m in progress)


async def test_progress_says_who_is_writing_while_drafts_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.server import launch
    from massgen_mcp.testing.policies import answer

    monkeypatch.setattr(launch, "DRAFT_PROGRESS_S", 0.1)
    long = "Forty-two, " * 60

    def policy(req: ChatRequest) -> Reply:
        return agree(req) if req.vote_labels or req.is_final else answer(long)

    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    with ScriptedServer(policy, chunk_chars=4, chunk_delay_s=0.01) as server:
        async with Client(create_server(root=tmp_path), mode="legacy",
                          progress_handler=on_progress) as c:
            handle = (await c.call_tool("run_consensus", {
                "question": "6*7?", "models": models_for(server, 2),
                "wait_s": 30})).structured_content
    assert handle["status"] == "completed"
    writing = [m for m in progress if "is writing… " in m]
    assert writing, progress
    assert any(re.search(r"agent_\w+ is writing… \d+ tokens", m) for m in writing)


async def test_get_result_summary_truncates_and_full_does_not(client: McpClient,
                                                              scripted: Scripted) -> None:
    long = "x" * 5000

    def verbose(req: ChatRequest) -> Reply:
        if not req.tools and not req.is_final:
            return agree(req)
        if "new_answer" in req.tool_names and not req.vote_labels:
            return Reply("answer", content=f"{req.model} {long}")
        return agree(req)

    server = scripted(verbose)
    sid = data(await call(client, "run_consensus", question="q",
                          models=models_for(server)))["session_id"]
    await finish(client, sid)
    summary = data(await call(client, "get_result", session_id=sid))
    full = data(await call(client, "get_result", session_id=sid, detail="full"))
    assert all(a["truncated"] and len(a["text"]) < 700 for a in summary["answers"])
    assert all(not a["truncated"] and len(a["text"]) > 5000 for a in full["answers"])
    assert len(json.dumps(summary)) < 32_000, "summary stays well under 8k tokens"


async def test_errors_are_clear_tool_errors(client: McpClient, tmp_path: Path,
                                            nothing_available: None) -> None:
    (tmp_path.parent / "secret.txt").write_text("nope")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"question": "q"}, "no team given"),
        ({"question": "q", "models": ["openai/a@http://127.0.0.1:9/v1"],
          "context_files": ["../secret.txt"]}, "outside"),
        ({"question": "q", "models": ["openai/a@http://127.0.0.1:9/v1"],
          "context_files": ["missing.md"]}, "does not exist"),
        ({"question": "q", "models": ["bad model"]}, "model string"),
        ({"question": "q", "config": "/etc/passwd"}, "absolute"),
        ({"question": "q", "models": ["openai/a@http://127.0.0.1:9/v1"],
          "options": {"timeout_s": -1}}, "timeout_s"),
    ]
    for args, message in cases:
        result = await call(client, "run_consensus", **args)
        assert result.is_error, args
        assert message in text_of(result.content[0]), (args, text_of(result.content[0]))
    for tool, args in [("get_status", {"session_id": "../../etc"}),
                       ("get_result", {"session_id": "01M811FXDYM8XNC5FE75XV7FF6"}),
                       ("cancel_session", {"session_id": "nope"})]:
        result = await call(client, tool, **args)
        assert result.is_error
        text = text_of(result.content[0])
        assert "session" in text and "Traceback" not in text


async def test_a_bare_model_without_its_key_is_refused_before_a_record(
        client: McpClient, nothing_available: None, home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """run_consensus checks a bare name's key as the CLI does (issue 58, item 4): a tool
    error naming the variable, and no session folder."""
    monkeypatch.delenv("VERTEXAI_PROJECT", raising=False)
    for model, key in (("gpt-4o-mini", "OPENAI_API_KEY"), ("claude-haiku-4-5",
                       "ANTHROPIC_API_KEY"), ("gemini-2.5-flash", "GEMINI_API_KEY")):
        result = await call(client, "run_consensus", question="q", models=[model])
        assert result.is_error, model
        text = text_of(result.content[0])
        assert f"({model}): set {key}" in text, text
    assert not (home / "sessions").exists()


async def test_list_sessions_pages_newest_first(client: McpClient, scripted: Scripted) -> None:
    server = scripted(agree)
    ids = []
    for i in range(3):
        sid = data(await call(client, "run_consensus", question=f"question {i}",
                             models=models_for(server, 1)))["session_id"]
        await finish(client, sid)
        ids.append(sid)
    page = data(await call(client, "list_sessions", limit=2))
    assert [s["session_id"] for s in page["sessions"]] == ids[::-1][:2]
    rest = data(await call(client, "list_sessions", limit=2, cursor=page["next_cursor"]))
    assert [s["session_id"] for s in rest["sessions"]] == [ids[0]]
    assert rest["next_cursor"] is None
    assert page["sessions"][0]["question"] == "question 2"
    failed = data(await call(client, "list_sessions", status="failed"))
    assert failed["sessions"] == []


async def test_get_status_after_revision_never_misses_a_change(client: McpClient, scripted: Scripted
                                                               ) -> None:
    import asyncio

    arrived = threading.Semaphore(0)
    gate = threading.Event()

    def policy(req: ChatRequest) -> Reply:
        if req.model == "a" and not req.vote_labels:
            return agree(req)  # a's first answer lands at once; everything else waits
        arrived.release()
        gate.wait(30)
        return agree(req)

    server = scripted(policy)
    sid = data(await call(client, "run_consensus", question="q",
                          models=models_for(server, 2)))["session_id"]
    try:
        # Once a has answered and b's answer call is held, a waits for b: nothing moves.
        assert await asyncio.to_thread(arrived.acquire, True, 10)
        now = data(await call(client, "get_status", session_id=sid))
        while not now["answers"]:
            now = data(await call(client, "get_status", session_id=sid, wait_s=10,
                                 until="change", after_revision=now["revision"]))
        assert now["revision"] > 1
        # A poller that last saw an older revision gets the news at once, not after wait_s.
        caught_up = data(await asyncio.wait_for(call(
            client, "get_status", session_id=sid, wait_s=50, until="change",
            after_revision=now["revision"] - 1), timeout=10))
        assert caught_up["revision"] == now["revision"]
        # One that is up to date waits for the next change.
        waiting = asyncio.create_task(call(client, "get_status", session_id=sid, wait_s=50,
                                           until="change", after_revision=now["revision"]))
        gate.set()
        later = data(await asyncio.wait_for(waiting, timeout=10))
        assert later["revision"] > now["revision"]
    finally:
        gate.set()
    assert (await finish(client, sid))["status"] == "completed"


async def test_cancel_session(client: McpClient, scripted: Scripted) -> None:
    arrived = threading.Semaphore(0)

    def hang(req: ChatRequest) -> Reply:
        arrived.release()
        return Reply("text", delay_s=30)

    server = scripted(hang)
    sid = data(await call(client, "run_consensus", question="q",
                          models=models_for(server)))["session_id"]
    import asyncio
    for _ in range(3):
        assert await asyncio.to_thread(arrived.acquire, True, 10)
    cancelled = data(await call(client, "cancel_session", session_id=sid))
    assert cancelled["status"] == "cancelled"
    again = data(await call(client, "cancel_session", session_id=sid))
    assert again["status"] == "cancelled" and "already" in again["message"]
    status = data(await call(client, "get_status", session_id=sid))
    assert status["status"] == "cancelled" and status["done"]


async def test_steer_session_reaches_the_team_and_get_status_shows_it(
        client: McpClient, scripted: Scripted) -> None:
    """The MCP face of steering: the note is delivered (the requests after it carry it),
    get_status lists it, and a note to a finished run is a clear tool error."""
    release, voting = threading.Event(), threading.Semaphore(0)

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels and not release.is_set():
            voting.release()
            release.wait(60)
        return agree(req)

    server = scripted(policy)
    sid = data(await call(client, "run_consensus", question="q",
                          models=models_for(server)))["session_id"]
    import asyncio
    try:
        for _ in range(3):  # every vote held: each request after the note is a new one
            assert await asyncio.to_thread(voting.acquire, True, 30)
        sent = len(server.requests)
        steered = data(await call(client, "steer_session", session_id=sid,
                                  message="Use metric units."))
        assert steered["message"].startswith("delivered: every agent sees the note")
        status = data(await call(client, "get_status", session_id=sid))
        assert status["notes"] == ["Use metric units."]
    finally:
        release.set()
    await finish(client, sid)
    assert all("Use metric units." in r.user for r in server.requests[sent:])
    late = await call(client, "steer_session", session_id=sid, message="more")
    assert late.is_error and "not running" in text_of(late.content[0])
    empty = await call(client, "steer_session", session_id=sid, message="")
    assert empty.is_error and text_of(empty.content[0]).startswith("message: empty; write")


async def test_continue_session_links_both_records(client: McpClient, scripted: Scripted,
                                                   home: Path) -> None:
    server = scripted(agree)
    parent = data(await call(client, "run_consensus", question="What is 6*7?",
                            models=models_for(server, 2)))["session_id"]
    await finish(client, parent)
    reply = await call(client, "continue_session", session_id=parent, follow_up="And 6*8?",
                       wait_s=20)
    assert not reply.is_error, text_of(reply.content[0])
    child = data(reply)
    assert child["status"] == "completed"
    assert child["result"]["parent_session_id"] == parent
    last = server.requests[-1]
    assert "<earlier_question>" in last.user and "What is 6*7?" in last.user
    events = [json.loads(line) for line in
              (home / "sessions" / parent / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "continued"
    assert events[-1]["child_session_id"] == child["session_id"]
    blank = await call(client, "continue_session", session_id=parent, follow_up="   ")
    assert blank.is_error and "follow_up: empty" in text_of(blank.content[0])


async def test_check_setup_names_providers_never_keys(client: McpClient,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-abcdef1234567890")
    setup = data(await call(client, "check_setup"))
    assert "openai" in setup["providers_with_keys"]
    assert "sk-canary" not in json.dumps(setup)
    assert setup["versions"]["massgen-mcp"]


async def test_resources_and_prompt(client: McpClient, scripted: Scripted) -> None:
    server = scripted(agree)
    sid = data(await call(client, "run_consensus", question="q",
                          models=models_for(server, 2)))["session_id"]
    await finish(client, sid)
    templates = {t.uri_template for t in await client.list_resource_templates()}
    assert "massgen://sessions/{session_id}/answers/{label}" in templates
    result = json.loads(text_of(
        (await client.read_resource(f"massgen://sessions/{sid}/result"))[0]))
    label = result["winner"]["label"]
    answer = text_of((await client.read_resource(f"massgen://sessions/{sid}/answers/{label}"))[0])
    assert answer.strip() in {a["content"] for a in result["answers"]}
    events = text_of((await client.read_resource(f"massgen://sessions/{sid}/events"))[0])
    assert json.loads(events.splitlines()[-1])["type"] == "finished"
    status = json.loads(text_of(
        (await client.read_resource(f"massgen://sessions/{sid}/status"))[0]))
    assert status["status"] == "completed"
    prompt = await client.get_prompt("consensus", {"question": "Why?"})
    assert "run_consensus" in text_of(prompt.messages[0].content)


async def test_tools_list_matches_snapshot(tmp_path: Path) -> None:
    async with Client(create_server(root=tmp_path), mode="legacy") as c:
        tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                 for t in await c.list_tools()]
    current = json.dumps(tools, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(current)
    assert current == SNAPSHOT.read_text(), (
        "tools/list changed; if deliberate, run "
        "UPDATE_SNAPSHOTS=1 pytest tests/server/test_server.py")
    for tool in tools:
        hints = tool["annotations"]
        assert {"readOnlyHint", "destructiveHint"} <= set(hints), tool["name"]
        assert hints["destructiveHint"] is False
        assert "outputSchema" not in tool
    # What every host conversation carries (issue 19's budget): compact JSON, all tools.
    # 10,000 until review_changes (issue 55) added its ~2,800; it takes run_consensus's
    # options as an open object rather than repeat their schema (~2,700 more).
    assert len(json.dumps(tools, separators=(",", ":"))) <= 13_000


def test_importing_the_server_does_not_import_litellm() -> None:
    code = ("import sys, massgen_mcp.server.app, massgen_mcp.cli.main; "
            "print('litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_the_early_answers_import_nothing_heavy() -> None:
    """The launcher answers a host's opening before fastmcp loads (server/early.py): what it
    imports is on every host's critical path, so it takes no pydantic, no fastmcp and no mcp
    (a core module importing the records once cost every host start ~90 ms)."""
    code = ("import sys, massgen_mcp.server.early; "
            "print(sorted({'pydantic', 'fastmcp', 'mcp', 'litellm', 'httpx'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("key, loads", [(None, False), ("sk-warm-up-test-1234567890", True)])
def test_a_stdio_server_loads_litellm_only_when_a_run_would_need_it(
        home: Path, key: str | None, loads: bool) -> None:
    """litellm costs a server ~2 s of CPU and ~150 MB: with no provider key and no configured
    team that needs it, the default team is CLIs, local servers or the embedded model, and a
    server a host starts for every session leaves it alone."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    if key is not None:
        env["OPENAI_API_KEY"] = key
    proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    deadline = threading.Timer(60, proc.kill)  # a server that never says ends the wait
    deadline.start()
    said = ""
    try:
        for line in proc.stderr:  # until the server says what it decided
            if b"litellm" in line:
                said = line.decode()
                break
    finally:
        deadline.cancel()
        proc.kill()
        proc.wait()
    assert ("loading litellm in the background" in said) is loads, said
    assert ("not loading litellm" in said) is not loads, said
    assert key is None or key not in said


async def test_a_server_connected_twice_runs_on_both_connections(scripted: Scripted,
                                                                 home: Path) -> None:
    """Each in-memory connection runs the server's lifespan, which closes its service at the
    end: the next connection builds a new one instead of reaching the closed one."""
    models = models_for(scripted(agree))
    server = create_server(home=home)
    for question in ("What is 6*7?", "What is 7*6?"):
        async with Client(server) as client:
            done = await client.call_tool("run_consensus", {
                "question": question, "models": models, "wait_s": 30}, raise_on_error=False)
        assert not done.is_error, text_of(done)
        assert done.structured_content is not None
        assert done.structured_content["status"] == "completed"
