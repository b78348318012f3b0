"""A bound on what one line from an agent's stdio MCP server may cost us.

mcp's stdio client collects a server's stdout line by line with no limit, then parses each line
whole: a tool that answers with 100 MB held all of it (and its parsed copy) before
:data:`~massgen_mcp.tools.mcp_servers.MAX_RESULT_CHARS` cut it to 50,000 characters. So the
servers' stdout is read through :class:`CappedLines`: a line is held only up to
:data:`MAX_LINE_BYTES`; the rest of a longer one is read and dropped as it arrives, and the
request it answered gets a JSON-RPC error that says so (the agent reads it as the tool's error).

mcp spawns the process itself; :func:`install` wraps its spawning function (a module attribute,
looked up at each spawn) so every stdio server's stdout comes through the cap.
"""

from __future__ import annotations

import json
import re
from signal import Signals
from typing import Any

from anyio.abc import ByteReceiveStream, ByteSendStream, Process

# A 50,000-character result is at most ~300 KB of JSON (every character escaped); tool lists
# with large schemas fit too. Past this nothing of the line is kept.
MAX_LINE_BYTES = 2 * 1024 * 1024
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def _refusal(head: bytes, size: int) -> bytes:
    """The error reply that stands in for an over-long line (nothing if its id is unknown)."""
    found = _ID.search(head)
    if found is None:
        return b""
    return json.dumps({"jsonrpc": "2.0", "id": json.loads(found.group(1)), "error": {
        "code": -32603, "message": f"the MCP server's reply was over {size} bytes; "
                                   f"massgen-mcp reads at most {MAX_LINE_BYTES} bytes of one "
                                   "reply (ask the tool for less)"}}).encode() + b"\n"


class CappedLines(ByteReceiveStream):
    """``inner`` with every line over ``cap`` bytes replaced by :func:`_refusal`. Complete
    lines pass through; at most ``cap`` bytes of an unfinished line are held."""

    def __init__(self, inner: ByteReceiveStream, cap: int = MAX_LINE_BYTES) -> None:
        self._inner, self._cap = inner, cap
        self._line = bytearray()  # the current line while it is within the cap
        self._dropped = 0  # bytes of the current line dropped past the cap (0: within it)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            chunk = await self._inner.receive(max_bytes)  # EndOfStream ends us too
            out = bytearray()
            *complete, rest = chunk.split(b"\n")
            for piece in complete:
                self._take(piece)
                if self._dropped:
                    out += _refusal(bytes(self._line), len(self._line) + self._dropped)
                else:
                    out += self._line + b"\n"
                self._line.clear()
                self._dropped = 0
            self._take(rest)
            if out:
                return bytes(out)

    def _take(self, piece: bytes) -> None:
        room = self._cap - len(self._line) if not self._dropped else 0
        self._line += piece[:room]
        self._dropped += len(piece) - min(len(piece), room)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedProcess(Process):
    """mcp's server process, with its stdout read through :class:`CappedLines`; everything
    else is the process itself (mcp checks that it is an anyio Process, and closes its
    asyncio transport through ``_process``)."""

    def __init__(self, process: Process) -> None:
        self._inner = process
        self._stdout = CappedLines(process.stdout) if process.stdout is not None else None

    @property
    def _process(self) -> Any:
        return getattr(self._inner, "_process", None)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def wait(self) -> int:
        return await self._inner.wait()

    def terminate(self) -> None:
        self._inner.terminate()

    def kill(self) -> None:
        self._inner.kill()

    def send_signal(self, signal: Signals) -> None:
        self._inner.send_signal(signal)

    @property
    def pid(self) -> int:
        return self._inner.pid

    @property
    def returncode(self) -> int | None:
        return self._inner.returncode

    @property
    def stdin(self) -> ByteSendStream | None:
        return self._inner.stdin

    @property
    def stdout(self) -> ByteReceiveStream | None:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream | None:
        return self._inner.stderr


def install() -> None:
    """Make mcp's stdio client read every server's stdout through the cap (once)."""
    from mcp.client import stdio

    spawn = stdio._create_platform_compatible_process
    if getattr(spawn, "capped", False):
        return

    async def capped_spawn(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        return _CappedProcess(process) if isinstance(process, Process) else process

    capped_spawn.capped = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = capped_spawn
