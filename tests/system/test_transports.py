"""Real server processes: stdio with the official SDK client and raw JSON-RPC, streamable
HTTP with token and Origin checks, and recovery after kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from fastmcp import Client
from mcp import Client as SdkClient
from mcp.client.stdio import StdioServerParameters

from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, error
from tests.helpers import Scripted
from tests.servers import (
    HEADERS,
    INIT,
    TOKEN,
    models_for,
    server_env,
    spawn_raw,
    start_raw,
    stop_raw,
)


async def test_official_sdk_client_over_stdio(scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    params = StdioServerParameters(command=sys.executable, args=["-m", "massgen_mcp"],
                                   env=server_env(home))
    async with SdkClient(params, mode="legacy") as client:
        assert client.server_info is not None
        assert client.server_info.name == "massgen" and client.server_info.version == "0.1.0"
        started = await client.call_tool("run_consensus", {
            "question": "What is 6*7?", "models": models_for(server)})
        sid = started.structured_content["session_id"]
        for _ in range(50):
            status = await client.call_tool("get_status", {"session_id": sid, "wait_s": 10})
            if status.structured_content["done"]:
                break
        result = await client.call_tool("get_result", {"session_id": sid})
    assert result.structured_content["status"] == "completed"
    assert result.structured_content["final_answer"].startswith("Final: ")


async def test_stdout_carries_only_json_rpc_while_providers_fail(scripted: Scripted,
                                                                 home: Path) -> None:
    def failing(req: ChatRequest) -> Reply:
        if req.model == "a":
            return error(500, "internal boom")
        if req.model == "b" and req.call_index == 0:
            return error(429, "slow down", retry_after=0)
        return agree(req)

    server = scripted(failing)
    raw = await start_raw(home, LITELLM_LOG="DEBUG")  # litellm at its noisiest
    try:
        started = await raw.call("run_consensus", question="q", models=models_for(server),
                                 options={"max_retries": 1, "retry_backoff_s": 0.01})
        sid = started["structuredContent"]["session_id"]
        for _ in range(50):
            status = await raw.call("get_status", session_id=sid, wait_s=10)
            if status["structuredContent"]["done"]:
                break
        assert status["structuredContent"]["status"] == "completed"
        bad = await raw.call("get_result", session_id="not-an-id")
        assert bad["isError"] is True
    finally:
        raw.proc.terminate()
        await raw.proc.communicate()
    assert len(raw.lines) >= 4  # initialize, run_consensus, get_status (one: it waits), get_result
    for line in raw.lines:
        assert json.loads(line)["jsonrpc"] == "2.0", line
    assert b"Traceback" not in b"".join(raw.lines)
    assert (home / "server.log").is_file()


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "2026-07-28"])
async def test_initialize_is_answered_early_and_exactly_as_the_sdk_would(
        tmp_path: Path, version: str) -> None:
    """The launcher answers initialize before fastmcp is imported; the reply must be the
    SDK's own, to the byte of JSON, and sent once."""
    replies = {}
    for early in ("1", "0"):
        home = tmp_path / early
        raw = await spawn_raw(home, MASSGEN_EARLY_INITIALIZE=early)
        replies[early] = await raw.send("initialize", {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "1"}})
        await raw.send("notifications/initialized", notify=True)
        tools = await raw.send("tools/list")
        assert tools is not None and len(tools["result"]["tools"]) == 10
        err = await stop_raw(raw)
        assert [json.loads(line)["id"] for line in raw.lines] == [1, 2], "one reply each"
        # A health check (start, list the tools, stop) writes nothing into the project: the
        # log is in the user's state folder until the records folder exists.
        assert not home.exists()
        # (No log at all when every request had its early reply before stdin closed: the
        # process then ends without loading the server.)
        state_log = Path(os.environ["XDG_STATE_HOME"]) / "massgen-mcp" / "server.log"
        assert "differed" not in err + (state_log.read_text() if state_log.exists() else "")
    assert replies["1"] == replies["0"]


async def test_a_first_line_that_is_not_initialize_reaches_the_server(home: Path) -> None:
    raw = await spawn_raw(home)
    raw.stdin.write(b'{"jsonrpc": "2.0", "id": 41, "method": \n')
    await raw.stdin.drain()
    parse_error = json.loads(await asyncio.wait_for(raw.stdout.readline(), 60))
    assert parse_error["error"]["code"] == -32700
    reply = await raw.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "raw-test", "version": "1"}})
    assert reply is not None and reply["result"]["serverInfo"]["name"] == "massgen"
    await stop_raw(raw)


async def test_http_happy_path_with_token(http_server: str, scripted: Scripted) -> None:
    server = scripted(agree)
    async with Client(http_server, auth=TOKEN) as client:
        handle = (await client.call_tool("run_consensus", {
            "question": "6*7?", "models": models_for(server), "wait_s": 30})).structured_content
    assert handle["status"] == "completed"
    assert handle["result"]["final_answer"].startswith("Final: ")


async def test_no_line_per_http_request_reaches_the_log(http_server: str, scripted: Scripted,
                                                       home: Path) -> None:
    """Neither the providers' calls (httpx) nor the host's requests (uvicorn's access log) get
    a line each at the default level: a host shows our stderr, and a run is dozens of them."""
    server = scripted(agree)
    async with Client(http_server, auth=TOKEN) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "6*7?", "models": models_for(server), "wait_s": 30})).structured_content
    assert done["status"] == "completed" and len(server.requests) >= 6
    # The log follows the records folder from the first line written after it exists
    # (server/log_file.py), so its lines are in one file or the other: read both.
    logs = [home / "server.log", home.parent / "xdg-state" / "massgen-mcp" / "server.log"]
    log = "".join(p.read_text(encoding="utf-8") for p in logs if p.exists())
    assert "INFO" in log  # the log is written: the lines that matter are still there
    assert "HTTP Request:" not in log and "/v1/chat/completions" not in log
    assert '"POST /mcp' not in log


def test_http_requires_token_and_rejects_foreign_origin(http_server: str) -> None:
    no_token = httpx.post(http_server, json=INIT, headers=HEADERS)
    assert no_token.status_code == 401
    wrong = httpx.post(http_server, json=INIT,
                       headers={**HEADERS, "Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    evil = httpx.post(http_server, json=INIT, headers={
        **HEADERS, "Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"})
    assert evil.status_code == 403
    ok = httpx.post(http_server, json=INIT,
                    headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200


def test_non_loopback_without_token_is_refused(home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--host", "0.0.0.0"],
        env=server_env(home), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "refusing to serve on 0.0.0.0 without a token" in proc.stderr
    assert "MASSGEN_MCP_TOKEN" in proc.stderr


async def test_kill_9_then_interrupted_then_resume(scripted: Scripted, home: Path) -> None:
    voting = threading.Semaphore(0)
    state = {"hang_votes": True}

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels and state["hang_votes"]:
            voting.release()
            return Reply("text", delay_s=30)
        return agree(req)

    server = scripted(policy)
    raw = await start_raw(home)
    started = await raw.call("run_consensus", question="What is 6*7?",
                             models=models_for(server))
    sid = started["structuredContent"]["session_id"]
    for _ in range(3):  # all three answered; all three are now deciding how to vote
        assert await asyncio.to_thread(voting.acquire, True, 30)
    raw.proc.send_signal(signal.SIGKILL)
    await raw.proc.wait()

    folder = home / "sessions" / sid
    for path in folder.rglob("*.json"):
        json.loads(path.read_text())  # nothing torn
    assert json.loads((folder / "status.json").read_text())["status"] == "running"

    state["hang_votes"] = False
    async with Client(create_server(), mode="legacy") as client:
        listed = (await client.call_tool("list_sessions", {})).structured_content
        assert listed["sessions"][0] == {**listed["sessions"][0], "session_id": sid,
                                         "status": "interrupted"}
        waiting = await client.call_tool("get_result", {"session_id": sid},
                                         raise_on_error=False)
        assert waiting.is_error  # nobody runs it, so the way on is a resume, not a wait
        assert (f"session {sid} is interrupted and has no result yet; call resume_session"
                in waiting.content[0].text)
        before = len(server.requests)
        resumed = (await client.call_tool("resume_session", {
            "session_id": sid, "wait_s": 30})).structured_content
        assert resumed["status"] == "completed"
        assert resumed["result"]["final_answer"].startswith("Final: ")
        again = await client.call_tool("resume_session", {"session_id": sid},
                                       raise_on_error=False)
        assert again.is_error and "only interrupted runs" in again.content[0].text
    after = server.requests[before:]
    assert all(q.vote_labels or q.is_final for q in after), "answers were not asked again"
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    types = [e["type"] for e in events]
    assert types.count("answer") == 3 and "interrupted" in types and "resumed" in types
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1))
