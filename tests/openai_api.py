"""``serve --http`` with its OpenAI-compatible /v1 routes (the ``api`` and ``served`` fixtures;
tests/conftest.py loads this module as a plugin), and the team file it serves."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.core.env import user_config_dir
from massgen_mcp.testing.scripted import ScriptedServer
from tests.servers import TOKEN, free_port, server_env


def write_team(server: ScriptedServer, name: str = "team") -> None:
    """A config named ``name`` in the user config folder: team model massgen/<name>."""
    folder = user_config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    agents = [{"id": f"agent_{m}", "backend": {"type": "openai", "model": m,
                                                "base_url": server.base_url}}
              for m in "abc"]
    (folder / f"{name}.yaml").write_text(json.dumps({
        "agents": agents, "options": {"retry_backoff_s": 0.01}}))


@pytest.fixture
def api(served: tuple[str, subprocess.Popen[bytes]]) -> str:
    return served[0]


@pytest.fixture
def served(home: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`massgen-mcp serve --http` with a token: its /v1 base URL and its process."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
        env=server_env(home, MASSGEN_MCP_TOKEN=TOKEN), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1", proc
    proc.terminate()
    proc.wait(10)


