"""Bounded buffers and slow clients: `serve --http` against clients that never finish a
request, a port that is taken and a command line that is wrong (each connection is closed, each
exit is one line and a documented code; a real server process and raw sockets), and an agent's
MCP server that answers with far more than is kept (a real stdio server)."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.cli.main import EXIT_LISTEN, EXIT_USAGE
from tests.servers import TOKEN, free_port, server_env


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """`serve --http` with 1 s for a request's headers and for each piece of its body: one
    for the module, since each test holds connections of its own and the server keeps
    nothing between them."""
    port = free_port()
    home = tmp_path_factory.mktemp("impatient") / "massgen-home"
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
        env=server_env(home, MASSGEN_MCP_TOKEN=TOKEN, MASSGEN_MCP_HEADER_TIMEOUT_S="1",
                       MASSGEN_MCP_BODY_TIMEOUT_S="1"), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:  # until the port accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.05)
    yield port
    proc.terminate()
    proc.wait(10)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's own
    timeout, far above the server's, fails the test if it never does)."""
    sock.settimeout(60)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


@pytest.mark.parametrize("half", [
    b"POST /v1/chat/completions HTTP/1.1\r\n",  # the request line, then nothing
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty",
    b"",  # connected, silent
])
def test_half_sent_headers_are_closed(impatient: int, half: bytes) -> None:
    with socket.create_connection(("127.0.0.1", impatient)) as sock:
        sock.sendall(half)
        assert until_closed(sock) == b""


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/mcp"])
def test_a_half_sent_body_gets_408_and_is_closed(impatient: int, path: str) -> None:
    with socket.create_connection(("127.0.0.1", impatient)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{impatient}\r\n"
                     f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "Content-Length: 1000\r\n\r\n{\"model\": ".encode())
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/mcp"])
def test_a_body_dripped_a_byte_at_a_time_gets_408_and_is_closed(impatient: int,
                                                                 path: str) -> None:
    """Each byte well within the 1 s allowed between pieces, but far below 1 KiB/s: the body
    as a whole is cut once its first second is past."""
    with socket.create_connection(("127.0.0.1", impatient)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{impatient}\r\n"
                     f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "Content-Length: 100000\r\n\r\n".encode())
        # A byte every 0.2 s (select's wait is the pace) until the server answers or closes;
        # at most 2 minutes: the test fails by then.
        for _ in range(600):
            if select.select([sock], [], [], 0.2)[0]:
                break
            sock.sendall(b" ")
        try:
            reply = until_closed(sock)
        except ConnectionResetError:
            # The server closed with the body unread, so its kernel reset the connection,
            # which may discard the 408 before it is read: cut all the same.
            reply = b""
    assert reply == b"" or reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert reply == b"" or b"the request body came too slowly" in reply, reply


def test_the_second_request_on_a_connection_has_the_same_deadline(impatient: int) -> None:
    with socket.create_connection(("127.0.0.1", impatient)) as sock:
        sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{impatient}\r\n"
                     f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
        sock.settimeout(60)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first[:200]
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHo")
        assert b"HTTP/1.1" not in until_closed(sock)  # closed, with no second response


def test_a_busy_port_is_one_line_and_exit_6(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
            capture_output=True, text=True, timeout=120, env=server_env(home))
    assert done.returncode == EXIT_LISTEN == 6, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"port {port}" in lines[0] and "--port" in lines[0]
    assert "serving" not in done.stderr


def test_a_wrong_command_line_is_exit_5(home: Path) -> None:
    for argv in (["--bogus"], ["run"], ["serve", "--port", "x"]):
        done = subprocess.run([sys.executable, "-m", "massgen_mcp", *argv],
                              capture_output=True, text=True, timeout=120,
                              env=server_env(home))
        assert done.returncode == EXIT_USAGE == 5, (argv, done.stderr)
        assert "usage:" in done.stderr and "Traceback" not in done.stderr


# -- a tool that answers with far more than is kept ------------------------------------------

HUGE_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "huge_reply_server.py"


async def test_a_huge_mcp_tool_result_is_not_held_whole() -> None:
    """20 MB from a real stdio MCP server: what this process allocates while it arrives stays
    far below the reply's size (Python's own allocation tracking, not a clock)."""
    from massgen_mcp.core.agent import McpServerSpec
    from massgen_mcp.tools.mcp_servers import McpToolbox

    size = 20 * 1024 * 1024
    toolbox = McpToolbox([McpServerSpec(name="huge", command=sys.executable,
                                        args=[str(HUGE_SERVER)],
                                        env={"HUGE_BYTES": str(size)})])
    await toolbox.start()
    try:
        tracemalloc.start()
        text = await toolbox.call("mcp__huge__huge", {})
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < size / 4, f"{peak} bytes held for a {size}-byte reply"
        assert "reads at most" in text and text.startswith("error:"), text[:300]
        again = await toolbox.call("mcp__huge__huge", {})  # the session is still in step
        assert "reads at most" in again, again[:300]
    finally:
        await toolbox.aclose()
