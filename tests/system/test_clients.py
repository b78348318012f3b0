"""Real MCP clients from npm against real server processes: the MCP Inspector CLI and the
official TypeScript SDK, over stdio and over HTTP with a token.

``.ci/run`` installs them (``npm install`` in tests/clients) and sets MASSGEN_REQUIRE_CLIENTS=1,
which turns a missing install into a failure instead of a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.testing.scripted import ScriptedServer, agree
from tests.helpers import Scripted
from tests.npm_clients import CLIENTS, stdio_command
from tests.servers import TOKEN, server_env

INSPECTOR = CLIENTS / "node_modules" / ".bin" / "mcp-inspector"

pytestmark = pytest.mark.skipif(
    not INSPECTOR.exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
    reason="run 'npm install' in tests/clients to test with real MCP clients")


def inspector(target: list[str], *args: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([str(INSPECTOR), "--cli", *target, *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    reply: dict[str, Any] = json.loads(proc.stdout)
    return reply


def call(tool: str, arguments: dict[str, Any]) -> list[str]:
    return ["--method", "tools/call", "--tool-name", tool, "--tool-args-json",
            json.dumps(arguments)]


def models_for(server: ScriptedServer) -> list[str]:
    return [f"openai/{m}@{server.base_url}" for m in "abc"]


def test_inspector_strict_tools_list_over_stdio(home: Path) -> None:
    listed = inspector([stdio_command()], "--method", "tools/list", "--strict",
                       env=server_env(home))
    names = {t["name"] for t in listed["tools"]}
    assert {"run_consensus", "get_status", "get_result", "list_sessions", "cancel_session",
            "continue_session", "check_setup"} <= names


@pytest.mark.slow
def test_inspector_run_status_result_over_stdio(scripted: Scripted, home: Path) -> None:
    # Each Inspector CLI call starts a fresh server process, so the run is waited for inside
    # the first call; later calls read the record the first process left.
    server = scripted(agree)
    env = server_env(home)
    started = inspector([stdio_command()], *call("run_consensus", {
        "question": "What is 6*7?", "models": models_for(server), "wait_s": 30}), env=env)
    handle = started["structuredContent"]
    assert handle["status"] == "completed"
    status = inspector([stdio_command()], *call("get_status", {
        "session_id": handle["session_id"]}), env=env)["structuredContent"]
    assert status["done"] is True
    result = inspector([stdio_command()], *call("get_result", {
        "session_id": handle["session_id"]}), env=env)["structuredContent"]
    assert result["final_answer"].startswith("Final: ")


def test_inspector_over_http_with_token(http_server: str, scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    target = [http_server, "--transport", "http", "--header", f"Authorization: Bearer {TOKEN}"]
    env = server_env(home)
    listed = inspector(target, "--method", "tools/list", "--strict", env=env)
    assert len(listed["tools"]) >= 7
    handle = inspector(target, *call("run_consensus", {
        "question": "What is 6*7?", "models": models_for(server)}), env=env)["structuredContent"]
    sid = handle["session_id"]
    for _ in range(20):
        status = inspector(target, *call("get_status", {"session_id": sid, "wait_s": 10}),
                           env=env)["structuredContent"]
        if status["done"]:
            break
    result = inspector(target, *call("get_result", {"session_id": sid}), env=env)
    assert result["structuredContent"]["status"] == "completed"


def roundtrip(mode: str, target: str, server: ScriptedServer, env: dict[str, str]
              ) -> dict[str, Any]:
    proc = subprocess.run(["node", str(CLIENTS / "roundtrip.mjs"), mode, target,
                           json.dumps(models_for(server))], env=env, capture_output=True,
                          text=True, timeout=120, cwd=CLIENTS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_typescript_sdk_over_stdio(scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    out = roundtrip("stdio", stdio_command(), server, server_env(home))
    assert out["serverVersion"] == {"name": "massgen", "version": "0.1.0"}
    assert out["result"]["status"] == "completed"
    assert out["result"]["usage"]["calls"] == 7


def test_typescript_sdk_over_http(http_server: str, scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    out = roundtrip("http", http_server, server, server_env(home, MASSGEN_MCP_TOKEN=TOKEN))
    assert out["result"]["status"] == "completed"
    assert out["result"]["final_answer"].startswith("Final: ")
