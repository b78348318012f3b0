"""Our server as a process: its environment, a raw JSON-RPC conversation over stdio, and an
HTTP server with a token (the ``http_server`` fixture; tests/conftest.py loads this module as a
plugin)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.testing.scripted import ScriptedServer

TOKEN = "test-token-0123456789abcdef"


def server_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(MASSGEN_HOME=str(home), **extra)
    return env


def models_for(server: ScriptedServer, n: int = 3) -> list[str]:
    return [f"openai/{m}@{server.base_url}" for m in "abc"[:n]]


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


INIT: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def cli(home: Path, *argv: str, timeout: float = 120, **env: str
        ) -> subprocess.CompletedProcess[str]:
    """``massgen-mcp ARGV`` as a user runs it, records under ``home``."""
    return subprocess.run([sys.executable, "-m", "massgen_mcp", *argv], capture_output=True,
                          text=True, timeout=timeout, env=server_env(home, **env))


