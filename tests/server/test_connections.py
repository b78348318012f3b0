"""`serve --http`'s connections against clients that hold them and against a process out of
file descriptors: a body nobody reads still has its deadline, and running out of descriptors
is a line or two, not a traceback per connection (a real server process and raw sockets)."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.servers import TOKEN, free_port, server_env


def start_server(home: Path, port: int, preexec_fn: Callable[[], None] | None = None,
                 **env: str) -> subprocess.Popen[bytes]:
    """`serve --http` on ``port``, returned once the port accepts connections."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
        env=server_env(home, MASSGEN_MCP_TOKEN=TOKEN, **env), stderr=subprocess.PIPE,
        preexec_fn=preexec_fn)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One server for the module with 2 s for a whole body (1 s for headers and between body
    pieces): each test holds connections of its own and the server keeps nothing between
    them."""
    port = free_port()
    proc = start_server(tmp_path_factory.mktemp("impatient") / "massgen-home", port,
                        MASSGEN_MCP_HEADER_TIMEOUT_S="1", MASSGEN_MCP_BODY_TIMEOUT_S="1",
                        MASSGEN_MCP_BODY_DEADLINE_S="2")
    yield port
    proc.terminate()
    proc.communicate(timeout=30)


def read_response(sock: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body), the connection left open."""
    sock.settimeout(60)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head


def dripped_until_closed(sock: socket.socket, limit: int = 300) -> int:
    """Send a byte each time 0.1 s pass with nothing from the server (select's wait is the
    pace, far below uvicorn's 5 s keep-alive, which each byte restarts) until the server
    closes the connection; how many were sent. ``limit`` bytes (30 s or more) fail the test:
    the deadline is 2 s."""
    for sent in range(limit):
        if select.select([sock], [], [], 0.1)[0]:
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(65536) == b"", "no second response was asked for"
            return sent
        try:
            sock.sendall(b"x")
        except (BrokenPipeError, ConnectionResetError):
            return sent
    pytest.fail(f"still open after {limit} bytes dripped past the response")


@pytest.mark.parametrize(("path", "length", "status"), [
    ("/healthz", 1_000_000, b"200"),  # no token needed
    ("/no/such/page", 1_000_000, b"404"),
    ("/v1/models", 1_000_000, b"401"),  # no token sent
    ("/healthz", 10**12, b"413"),  # over the body limit
    ("/no/such/page", None, b"404"),  # chunked: no length announced
])
def test_a_body_nobody_reads_still_has_its_deadline(impatient: int, path: str,
                                                    length: int | None, status: bytes) -> None:
    """A large announced body that the handler never reads, dripped after the response: the
    connection is closed once the body's deadline is past, as a read body's would be."""
    with socket.create_connection(("127.0.0.1", impatient)) as sock:
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{impatient}\r\n"
                      + (f"Content-Length: {length}\r\n\r\n" if length is not None else
                         "Transfer-Encoding: chunked\r\n\r\nfffff\r\n")).encode())
        head = read_response(sock)
        assert head.split(b" ")[1] == status, head
        dripped_until_closed(sock)


def test_a_body_that_arrives_after_its_response_leaves_the_connection_usable(
        impatient: int) -> None:
    """The deadline is for a body that does not come: one that comes whole after the
    response is discarded, and the connection serves its next request."""
    with socket.create_connection(("127.0.0.1", impatient)) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{impatient}\r\n"
                     "Content-Length: 5\r\n\r\n".encode())
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(f"helloGET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{impatient}\r\n\r\n"
                     .encode())
        assert read_response(sock).startswith(b"HTTP/1.1 200")


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_NOFILE is POSIX")
def test_running_out_of_file_descriptors_is_a_line_not_a_traceback_per_connection(
        tmp_path: Path) -> None:
    """The server may open 96 files; 300 connections are held open. It says so in a line (at
    most one a minute), answers again once they close, and logs no traceback (asyncio alone
    logs one per failed accept: thousands, and more at shutdown)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 1024:
        pytest.skip(f"this process may open only {soft} files: it needs 400 to test with")
    port = free_port()

    def lower_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, hard))

    proc = start_server(tmp_path / "home", port, preexec_fn=lower_limit)
    assert proc.stderr is not None
    lines: list[bytes] = []
    try:
        started = time.monotonic()
        held = [socket.create_connection(("127.0.0.1", port), timeout=60)
                for _ in range(300)]
        while not lines or b"cannot accept connections" not in lines[-1]:  # its own word
            line = proc.stderr.readline()
            assert line and b"Traceback" not in line, b"".join(lines[-30:])
            lines.append(line)
        for sock in held:
            sock.close()
        # It answers again: a real request (the server retries accepts itself).
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)[1]
    minutes = int((time.monotonic() - started) // 60)
    log = (b"".join(lines) + rest).decode(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    said = log.count("cannot accept connections") + log.count("accepting connections again")
    assert 1 <= said <= 2 + 2 * minutes, log[-3000:]
    assert "Too many open files" in log and "ulimit -n" in log
