"""The launcher's early replies (server/discover, initialize, the lists) are the SDK's own, to
the byte, at every protocol version; whatever a host sends first, each request gets one reply,
the one the SDK gives; and a host that falls back to initialize after server/discover (Claude
Code, when the discover reply is slow) gets a session that works. Real server processes over
raw stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.server import early_snapshot
from massgen_mcp.server.handshake import (
    HANDSHAKE_VERSIONS,
    MODERN_VERSION,
    SNAPSHOT,
    Opening,
    load_snapshot,
)
from tests.servers import server_env

CLIENT = {"name": "raw-test", "version": "1"}
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {
                "roots": {"listChanged": True},
                "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html"]}}},
            "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1"}}
LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")


def req(id_: int | str, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def note(method: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method}).encode()


def initialize(id_: int, version: str) -> bytes:
    return req(id_, "initialize", {"protocolVersion": version, "clientInfo": CLIENT,
                                   "capabilities": {"roots": {"listChanged": True}}})


async def converse(home: Path, lines: list[bytes], replies: int, early: str) -> list[bytes]:
    """Send ``lines`` at once to a fresh server; its first ``replies`` lines, then none more
    once stdin closes (one reply per request, never two)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=server_env(home, MASSGEN_EARLY_INITIALIZE=early))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(line + b"\n" for line in lines))
    await proc.stdin.drain()
    got = [await asyncio.wait_for(proc.stdout.readline(), 60) for _ in range(replies)]
    proc.stdin.close()
    rest, err = await asyncio.wait_for(proc.communicate(), 30)
    assert rest == b"", f"more replies than requests: {rest[:300]!r}"
    assert b"differed" not in err and b"Traceback" not in err, err.decode()[-2000:]
    return got


async def same_as_sdk(tmp_path: Path, lines: list[bytes], replies: int) -> list[bytes]:
    """The replies with early answers on, after checking they are byte for byte the SDK's
    alone (in any order: the SDK answers concurrent requests as they finish)."""
    ours = await converse(tmp_path / "early", lines, replies, "1")
    sdk = await converse(tmp_path / "sdk", lines, replies, "0")
    assert sorted(ours) == sorted(sdk)
    return ours


@pytest.mark.slow
def test_the_snapshot_is_what_the_sdk_answers_now() -> None:
    """A changed tool, resource, prompt or instruction must refresh the snapshot
    (python -m massgen_mcp.server.early_snapshot)."""
    assert SNAPSHOT.read_text(encoding="utf-8") == early_snapshot.render(
        early_snapshot.generate()), "run: python -m massgen_mcp.server.early_snapshot"


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
async def test_initialize_and_the_lists_are_the_sdks_bytes(tmp_path: Path,
                                                           version: str) -> None:
    lines = [initialize(1, version), note("notifications/initialized"),
             *(req(i, method) for i, method in enumerate(LISTS, 2)),
             req(9, "tools/list", {"_meta": {"progressToken": "t"}})]
    replies = await same_as_sdk(tmp_path, lines, 6)
    assert json.loads(replies[0])["result"]["protocolVersion"] == version


async def test_discover_and_the_lists_are_the_sdks_bytes(tmp_path: Path) -> None:
    lines = [req(1, "server/discover", {"_meta": ENVELOPE}),
             *(req(f"r{i}", method, {"_meta": ENVELOPE}) for i, method in enumerate(LISTS))]
    replies = await same_as_sdk(tmp_path, lines, 5)
    assert json.loads(replies[0])["result"]["supportedVersions"] == [MODERN_VERSION]


@pytest.mark.parametrize("lines, replies", [
    ([req(1, "tools/list"), initialize(2, "2025-06-18"), req(3, "tools/list")], 3),
    ([req(1, "no/such/method", {"_meta": ENVELOPE}), req(2, "tools/list", {"_meta": ENVELOPE})],
     2),
    ([req(1, "server/discover", {"_meta": {**ENVELOPE, "io.modelcontextprotocol/"
                                           "protocolVersion": "2099-01-01"}}),
      req(2, "tools/list", {"_meta": ENVELOPE})], 2),
    ([req(1, "server/discover", {"_meta": {"io.modelcontextprotocol/protocolVersion":
                                           MODERN_VERSION}})], 1),
    ([initialize(1, "2025-11-25"), req(2, "tools/list", {"cursor": "x"}),
      req(3, "tools/list")], 3),
    ([initialize(1, "2025-11-25"), req(2, "tools/list", {"_meta": ENVELOPE})], 2),
    ([initialize(1, "2025-11-25"), req(1, "tools/list"), req(2, "prompts/list")], 3),
    ([req(1, "initialize", {"protocolVersion": "2025-11-25"}), req(2, "tools/list")], 2),
    ([b"[" + initialize(1, "2025-11-25") + b"]", initialize(2, "2025-11-25")], 2),
    ([note("notifications/initialized"), req(True, "tools/list"),
      initialize(2, "2025-11-25")], 1),
], ids=["list-before-handshake", "unknown-first-method", "unsupported-version",
        "envelope-without-capabilities", "cursor", "envelope-on-handshake", "reused-id",
        "initialize-refused", "batch", "boolean-id"])
async def test_whatever_comes_first_each_request_gets_the_sdks_one_reply(
        tmp_path: Path, lines: list[bytes], replies: int) -> None:
    await same_as_sdk(tmp_path, lines, replies)


@pytest.mark.parametrize("lines", [
    [req(1, "server/discover", {"_meta": ENVELOPE}),
     *(req(i, method, {"_meta": ENVELOPE}) for i, method in enumerate(LISTS[:3], 2))],
    [initialize(1, "2025-06-18"), note("notifications/initialized"),
     *(req(i, method) for i, method in enumerate(LISTS[:3], 2))],
], ids=["claude-code", "gemini-cli"])
async def test_the_opening_is_answered_while_fastmcp_is_still_loading(
        tmp_path: Path, lines: list[bytes]) -> None:
    """A fastmcp that never finishes importing: every opening request a host waits for is
    answered all the same (hosts wait for these before their first model request)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env=never_loading_fastmcp(tmp_path))
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"".join(line + b"\n" for line in lines))
        await proc.stdin.drain()
        ids = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))["id"]
               for _ in range(4)]
    finally:
        proc.kill()
        await proc.wait()
    assert sorted(ids) == [1, 2, 3, 4]


def never_loading_fastmcp(tmp_path: Path) -> dict[str, str]:
    """A server environment whose fastmcp never finishes importing."""
    shadow = tmp_path / "shadow" / "fastmcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("import threading\nthreading.Event().wait()\n")
    return server_env(tmp_path / "home", PYTHONPATH=str(shadow.parent))


async def test_a_host_that_closes_after_the_opening_ends_the_process_at_once(
        tmp_path: Path) -> None:
    """A host checking the server is up (spawn, handshake, lists, close stdin) got every
    reply early: the process ends with 0, as the SDK would, without loading the server (here
    a fastmcp that never loads: before, the process waited on it forever)."""
    lines = [initialize(1, "2025-06-18"), note("notifications/initialized"),
             *(req(i, method) for i, method in enumerate(LISTS, 2))]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=never_loading_fastmcp(tmp_path))
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(b"".join(line + b"\n" for line in lines)), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert sorted(json.loads(line)["id"] for line in out.splitlines()) == [1, 2, 3, 4, 5]


async def test_a_request_left_to_the_server_still_loads_it_after_stdin_closes(
        tmp_path: Path) -> None:
    """The end of input with a request the early replies do not make (a tool call): the
    process goes on to load the server, which reads it (here a fastmcp that says it was
    imported and ends the process)."""
    shadow = tmp_path / "shadow" / "fastmcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "import os, sys\nsys.stderr.write('fastmcp imported\\n')\nsys.stderr.flush()\n"
        "os._exit(7)\n")
    lines = [initialize(1, "2025-06-18"), note("notifications/initialized"),
             req(2, "tools/list"),
             req(3, "tools/call", {"name": "list_sessions", "arguments": {}})]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=server_env(tmp_path / "home", PYTHONPATH=str(shadow.parent)))
    out, err = await asyncio.wait_for(
        proc.communicate(b"".join(line + b"\n" for line in lines)), 60)
    assert (proc.returncode, err.count(b"fastmcp imported")) == (7, 1), err.decode()[-2000:]
    assert sorted(json.loads(line)["id"] for line in out.splitlines()) == [1, 2]


def test_it_answers_only_what_it_is_sure_of() -> None:
    snapshot = load_snapshot()
    assert snapshot is not None
    opening = Opening(snapshot)
    assert opening.answer(req(1, "server/discover", {"_meta": ENVELOPE})) is not None
    assert opening.answer(req(2, "tools/list", {"_meta": ENVELOPE})) is not None
    assert opening.answer(req(3, "tools/call", {"_meta": ENVELOPE, "name": "x"})) is None
    assert opening.stopped  # for good: later lines go to the SDK alone
    assert opening.answer(req(4, "tools/list", {"_meta": ENVELOPE})) is None
    opening = Opening(snapshot)
    assert opening.answer(note("notifications/initialized")) is None and not opening.stopped
    answered = opening.answer(initialize(7, "2030-01-01"))  # the SDK's latest instead
    assert answered is not None and answered[0] == 7
    assert json.loads(answered[1])["result"]["protocolVersion"] == HANDSHAKE_VERSIONS[-1]


# -- Claude Code's fallback --------------------------------------------------------------------


async def test_initialize_after_discover_is_served_and_the_session_works(
        tmp_path: Path) -> None:
    """Claude Code sends initialize (2025-11-25) on the connection it opened with
    server/discover when the discover reply is slow; the SDK alone refuses it (-32022)."""
    lines = [req(1, "server/discover", {"_meta": ENVELOPE}), initialize(2, "2025-11-25"),
             note("notifications/initialized"), req(3, "tools/list"),
             req(4, "tools/call", {"name": "list_sessions", "arguments": {},
                                   "_meta": {"progressToken": 4}})]
    got = {json.loads(line)["id"]: line for line in
           await converse(tmp_path / "late", lines, 4, "1")}
    assert json.loads(got[2])["result"]["protocolVersion"] == "2025-11-25", got[2]
    legacy = await converse(tmp_path / "legacy", [initialize(2, "2025-11-25"),
                                                  note("notifications/initialized"),
                                                  req(3, "tools/list")], 2, "0")
    assert got[2] == legacy[0] and got[3] == legacy[1], "the handshake era's own replies"
    listed = json.loads(got[4])["result"]
    assert listed["isError"] is False and listed["structuredContent"]["sessions"] == []
    assert "resultType" not in listed and "_meta" not in listed
