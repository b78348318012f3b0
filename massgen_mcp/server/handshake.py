"""Answer a stdio host's ``initialize`` before fastmcp has been imported.

A host spawns ``massgen-mcp`` and waits for the reply to ``initialize``; importing fastmcp and
the mcp SDK alone takes ~0.8 s here, most of the handshake. Yet the reply is fixed: our name,
version, instructions and capabilities, and the protocol version the SDK would choose. So the
launcher (``massgen_mcp.__main__``) reads the first line of stdin with nothing but the standard
library loaded and, if it is an ``initialize`` the SDK would accept, answers it at once
(:func:`answer_early`). Everything read is then handed to the real server as unread input
(:mod:`massgen_mcp.server.stdio`), so the SDK reads and handles that line exactly as usual; its
own reply to that request is dropped, after a check that it says what we said (a difference is
logged, and a test holds the two equal for every protocol version).

Anything else falls back to the SDK alone, unanswered here: a line that is not UTF-8 JSON text,
an ``initialize`` the SDK would refuse (its error must be the only reply), and a first line
longer than :data:`MAX_EARLY_BYTES` (the SDK reads it at full speed).

``MASSGEN_EARLY_INITIALIZE=0`` turns this off.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import IO, Any

from massgen_mcp._version import __version__
from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.settings import SETTINGS

ENV = SETTINGS.early_initialize.env

INSTRUCTIONS = """\
massgen runs a team of AI models on one question: they answer independently, read each \
other's anonymised answers, vote, and agree on a final answer. Use it when a question is worth \
several models' opinions (hard, ambiguous or high-stakes); it costs several model calls and \
usually 10 s to a few minutes. Start with run_consensus (returns a session_id at once), then \
call get_status with wait_s=50 until done (each call returns when the run ends), then \
get_result. If the user adds a requirement while it runs, pass it on with steer_session. Cite \
the winner and vote tally when you use the answer. check_setup shows which providers have \
keys."""

# The versions negotiated with ``initialize`` (later ones use the modern handshake); the SDK
# answers any other with the latest of them.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
CAPABILITIES: dict[str, Any] = {
    "logging": {},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": False, "listChanged": True},
    "tools": {"listChanged": True},
}


# An initialize is well under 1 KiB; past this the first line is left to the SDK.
MAX_EARLY_BYTES = 64 * 1024


@dataclass
class Early:
    """What the launcher read from stdin (the server must read it first), and our reply if
    we answered the host's first line."""

    data: bytes
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


def _read_first_line(fd: int) -> bytes:
    """Stdin up to the end of its first line (and whatever came with it), at most a little
    over :data:`MAX_EARLY_BYTES`, or to its end."""
    data = bytearray()
    while b"\n" not in data and len(data) <= MAX_EARLY_BYTES:
        chunk = os.read(fd, 65536)  # a pipe returns what is there; nothing is waited for
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _sdk_accepts(params: dict[str, Any]) -> bool:
    """Whether the SDK's InitializeRequestParams surely accept ``params``; when unsure, no
    (the SDK then answers alone, a little later)."""
    info = params.get("clientInfo")
    capabilities = params.get("capabilities")
    if not (isinstance(params.get("protocolVersion"), str) and isinstance(info, dict)
            and isinstance(capabilities, dict) and isinstance(params.get("_meta", {}), dict)):
        return False
    if not (isinstance(info.get("name"), str) and isinstance(info.get("version"), str)
            and "icons" not in info
            and all(isinstance(info.get(key), str | None)
                    for key in ("title", "description", "websiteUrl"))):
        return False
    roots = capabilities.get("roots", {})
    if not isinstance(roots, dict) or not isinstance(roots.get("listChanged", False), bool):
        return False
    # Every other capability is an object of objects (experimental and extensions: of any
    # objects); the SDK's models ignore keys they do not know.
    return all(isinstance(value, dict) and (
        name == "roots" or all(isinstance(inner, dict) and (
            name in ("experimental", "extensions") or _only_objects(inner))
            for inner in value.values()))
        for name, value in capabilities.items())


def _only_objects(value: dict[str, Any]) -> bool:
    return all(isinstance(inner, dict) and _only_objects(inner) for inner in value.values())


def answer_early(stdin: IO[bytes], stdout: IO[bytes]) -> Early | None:
    """Read the host's first line; answer it if it is an ``initialize`` the SDK accepts.
    Returns what was read (None at end of input), which the server must then read first."""
    if not SETTINGS.early_initialize.read():
        return None
    data = _read_first_line(stdin.fileno())
    if not data:
        return None
    early = Early(data)
    line, newline, _ = data.partition(b"\n")
    if not newline and len(data) > MAX_EARLY_BYTES:
        return early
    try:
        message = load_json(line)
    except UnsafeJson:
        return early  # the server answers it (a parse error, with its id if it has one)
    if (not isinstance(message, dict) or message.get("jsonrpc") != "2.0"
            or message.get("method") != "initialize"):
        return early
    early.request_id = request_id(message.get("id"))
    params = message.get("params")
    if early.request_id is None or not isinstance(params, dict) or not _sdk_accepts(params):
        return early  # the server answers it with the SDK's own error
    early.result = initialize_result(params["protocolVersion"])
    reply = {"jsonrpc": "2.0", "id": early.request_id, "result": early.result}
    stdout.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
    stdout.flush()
    return early
