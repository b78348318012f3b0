"""Real server processes: stdio with the official SDK client and raw JSON-RPC, streamable
HTTP with token and Origin checks, and recovery after kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client
from mcp import Client as SdkClient
from mcp.client.stdio import StdioServerParameters

from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, error
from tests.helpers import Scripted

TOKEN = "test-token-0123456789abcdef"


def server_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(MASSGEN_HOME=str(home), **extra)
    return env


def models_for(server: ScriptedServer, n: int = 3) -> list[str]:
    return [f"openai/{m}@{server.base_url}" for m in "abc"[:n]]


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


class RawStdio:
    """A JSON-RPC conversation with a stdio server that keeps every stdout line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None, "started with pipes"
        self.proc = proc
        self.stdin: asyncio.StreamWriter = proc.stdin
        self.stdout: asyncio.StreamReader = proc.stdout
        self.lines: list[bytes] = []
        self._id = 0

    async def send(self, method: str, params: dict[str, Any] | None = None,
                   notify: bool = False) -> dict[str, Any] | None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self._id += 1
            message["id"] = self._id
        self.stdin.write((json.dumps(message) + "\n").encode())
        await self.stdin.drain()
        if notify:
            return None
        while True:
            line = await asyncio.wait_for(self.stdout.readline(), 60)
            assert line, "server closed stdout"
            self.lines.append(line)
            reply: dict[str, Any] = json.loads(line)
            if reply.get("id") == self._id:
                return reply

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        reply = await self.send("tools/call", {"name": tool, "arguments": args})
        assert reply is not None
        result: dict[str, Any] = reply["result"]
        return result


async def start_raw(home: Path, cwd: Path | None = None, **env: str) -> RawStdio:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=server_env(home, **env), cwd=cwd)
    raw = RawStdio(proc)
    await raw.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "raw-test", "version": "1"}})
    await raw.send("notifications/initialized", notify=True)
    return raw


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


async def spawn_raw(home: Path, **env: str) -> RawStdio:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=server_env(home, **env))
    return RawStdio(proc)


async def stop_raw(raw: RawStdio) -> str:
    raw.stdin.close()
    _, err = await asyncio.wait_for(raw.proc.communicate(), 30)
    return err.decode()


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
        assert tools is not None and len(tools["result"]["tools"]) == 9
        err = await stop_raw(raw)
        assert [json.loads(line)["id"] for line in raw.lines] == [1, 2], "one reply each"
        # A health check (start, list the tools, stop) writes nothing into the project: the
        # log is in the user's state folder until the records folder exists.
        assert not home.exists()
        state_log = Path(os.environ["XDG_STATE_HOME"]) / "massgen-mcp" / "server.log"
        assert "differed" not in err + state_log.read_text()
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def http_server(home: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
        env=server_env(home, MASSGEN_MCP_TOKEN=TOKEN), stderr=subprocess.PIPE)
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while True:  # wait until the port accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "HTTP server did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


async def test_http_happy_path_with_token(http_server: str, scripted: Scripted) -> None:
    server = scripted(agree)
    async with Client(http_server, auth=TOKEN) as client:
        handle = (await client.call_tool("run_consensus", {
            "question": "6*7?", "models": models_for(server), "wait_s": 30})).structured_content
    assert handle["status"] == "completed"
    assert handle["result"]["final_answer"].startswith("Final: ")


INIT: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


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
