"""Answer a stdio host's ``initialize`` before fastmcp has been imported.

A host spawns ``massgen-mcp`` and waits for the reply to ``initialize``; importing fastmcp and
the mcp SDK alone takes ~0.8 s here, most of the handshake. Yet the reply is fixed: our name,
version, instructions and capabilities, and the protocol version the SDK would choose. So the
launcher (``massgen_mcp.__main__``) reads the first line of stdin with nothing but the standard
library loaded and, if it is an ``initialize`` of the handshake era, answers it at once
(:func:`answer_early`). The line is then handed to the real server as if it had just arrived
(:mod:`massgen_mcp.server.stdio`), so the SDK's session is initialised exactly as usual; its own
reply to that request is dropped, after a check that it says what we said (a difference is
logged, and a test holds the two equal for every protocol version).

``MASSGEN_EARLY_INITIALIZE=0`` turns this off.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import IO, Any

from massgen_mcp import __version__

ENV = "MASSGEN_EARLY_INITIALIZE"

INSTRUCTIONS = """\
massgen runs a team of AI models on one question: they answer independently, read each \
other's anonymised answers, vote, and agree on a final answer. Use it when a question is worth \
several models' opinions (hard, ambiguous or high-stakes); it costs several model calls and \
usually 10 s to a few minutes. Start with run_consensus (returns a session_id at once), then \
call get_status with wait_s=30 until done, then get_result. Cite the winner and vote tally \
when you use the answer. check_setup shows which providers have keys."""

# The versions negotiated with ``initialize`` (later ones use the modern handshake); the SDK
# answers any other with the latest of them.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
CAPABILITIES: dict[str, Any] = {
    "logging": {},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": False, "listChanged": True},
    "tools": {"listChanged": True},
}


@dataclass
class Early:
    """The first line a stdio host sent, and our reply if we answered it."""

    line: bytes
    request_id: str | int | None = None
    result: dict[str, Any] | None = None


taken: Early | None = None  # what the launcher read, for the stdio transport to hand on


def request_id(value: object) -> str | int | None:
    """``value`` if it can be a JSON-RPC request id (a string or an integer), else None."""
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def initialize_result(requested: object) -> dict[str, Any]:
    version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    return {"protocolVersion": version, "capabilities": CAPABILITIES,
            "serverInfo": {"name": "massgen", "version": __version__},
            "instructions": INSTRUCTIONS}


def _read_line(stdin: IO[bytes]) -> bytes:
    """One line, read a byte at a time from the file descriptor: the server then reads the
    same descriptor afresh, so nothing past this line may sit in a buffer here."""
    fd = stdin.fileno()
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def answer_early(stdin: IO[bytes], stdout: IO[bytes]) -> Early | None:
    """Read the host's first line; answer it if it is a plain ``initialize``. Returns what
    was read (None at end of input), which the server must then process as its first."""
    if os.environ.get(ENV, "1") == "0":
        return None
    line = _read_line(stdin)
    if not line:
        return None
    early = Early(line)
    try:
        message = json.loads(line)
    except ValueError:
        return early  # the server answers it with a parse error
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return early
    early.request_id = request_id(message.get("id"))
    params = message.get("params")
    if early.request_id is None or not isinstance(params, dict):
        return early  # the server answers it with the SDK's own error
    early.result = initialize_result(params.get("protocolVersion"))
    reply = {"jsonrpc": "2.0", "id": early.request_id, "result": early.result}
    stdout.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
    stdout.flush()
    return early
