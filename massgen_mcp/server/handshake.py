"""Which of a host's opening requests the launcher may answer before fastmcp has loaded.

A host spawns ``massgen-mcp`` and waits for its opening requests to be answered: Claude Code's
``server/discover`` (protocol 2026-07-28), the others' ``initialize``, then ``tools/list``,
``prompts/list`` and ``resources/list``. Importing fastmcp and the mcp SDK alone takes ~0.8 s
here, yet those replies are fixed. So the launcher answers them from a snapshot of what the SDK
itself answers (``early_replies.json``, written by :mod:`massgen_mcp.server.early_snapshot`),
while the server loads (:mod:`massgen_mcp.server.early`), then hands every byte it read to the
SDK, which handles them as usual; its own replies to the requests answered early are dropped.

:class:`Opening` follows the connection line by line, as the SDK would see it, and answers
only while it is sure of the SDK's answer: an ``initialize`` the SDK accepts, then list
requests on that connection; or ``server/discover`` and list requests with a 2026-07-28
envelope the SDK accepts. At the first line it is not sure of (not UTF-8 JSON, a batch, an
unknown method, a request before the handshake, params it does not know, a cursor) it stops
for good: that line and all later ones get the SDK's answer alone, so a request never gets two
replies, and one the SDK would refuse gets no early reply.

``MASSGEN_EARLY_INITIALIZE=0`` turns this off.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.settings import SETTINGS

ENV = SETTINGS.early_initialize.env

INSTRUCTIONS = """\
massgen runs a team of AI models on one question: they answer independently, read each \
other's anonymised answers, vote, and agree on a final answer. Use it when a question is worth \
several models' opinions (hard, ambiguous or high-stakes); it costs several model calls and \
usually 10 s to a few minutes. One call does it: run_consensus(question, wait_s=50) returns \
the final answer, the winner and the vote tally when the run ends within the wait (most do). \
Only if it comes back still running, call get_status(session_id, wait_s=50) until done, then \
get_result. If the user adds a requirement while it runs, pass it on with \
steer_session. Cite the winner and vote tally when you use the answer. For a second opinion \
on a code change before it merges (the working tree, a branch, a commit, a pull request's \
diff), call review_changes(wait_s=50) instead: the team agrees on findings and a verdict. \
check_setup shows which providers have keys."""

SNAPSHOT = Path(__file__).with_name("early_replies.json")
# The versions negotiated with ``initialize``; the SDK answers any other with the latest.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
INFO_KEY = "io.modelcontextprotocol/clientInfo"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
LIST_METHODS = frozenset({"tools/list", "prompts/list", "resources/list",
                          "resources/templates/list"})

# An opening request is well under 1 KiB; a line longer than this is left to the SDK.
MAX_EARLY_BYTES = 64 * 1024


def request_id(value: object) -> str | int | None:
    """``value`` if it can be a JSON-RPC request id (a string or an integer), else None."""
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


# The sources of what the snapshot holds (besides INSTRUCTIONS): tool, resource and prompt
# names, descriptions and argument schemas. An edit to one of them without a fresh snapshot
# (a checkout being worked on) turns the early replies off instead of sending stale ones.
SURFACE_SOURCES = ("server/app.py", "server/tools.py", "server/views.py",
                   "server/session_view.py", "core/spec.py", "core/options.py",
                   "core/agent.py", "core/records.py", "core/run_state.py", "core/outcomes.py",
                   "service/__init__.py", "service/setup.py", "_version.py")


def fingerprint() -> str:
    """A hash of the instructions and the surface's sources."""
    digest = hashlib.sha256(INSTRUCTIONS.encode())
    package = Path(__file__).resolve().parent.parent
    for name in SURFACE_SOURCES:
        try:
            digest.update(name.encode() + b"\0" + (package / name).read_bytes())
        except OSError:
            digest.update(name.encode() + b"\0missing")
    return digest.hexdigest()


def load_snapshot(path: Path = SNAPSHOT) -> dict[str, dict[str, str]] | None:
    """``{version: {method: raw result JSON}}``; None if it is missing, unreadable or made
    from other sources (then nothing is answered early)."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(loaded, dict) or loaded.pop("fingerprint", None) != fingerprint():
        return None
    return loaded


class Opening:
    """The connection as the SDK sees it, from the lines read so far; :meth:`answer` gives the
    reply to a line when it is sure what the SDK answers."""

    def __init__(self, snapshot: dict[str, dict[str, str]]) -> None:
        self._snapshot = snapshot
        self.era: str | None = None  # "handshake" or "modern", from the first request
        self.version: str | None = None  # negotiated by initialize
        self.stopped = False
        self._ids: set[str | int] = set()  # of the requests answered
        # The tools' schema states MASSGEN_MCP_MAX_WAIT_S; the snapshot holds the default.
        self._fixed = LIST_METHODS - ({"tools/list"} if os.environ.get(
            SETTINGS.mcp_max_wait_s.env) else set())

    def answer(self, line: bytes) -> tuple[str | int, bytes] | None:
        """The request id and the reply line to send for ``line``, or None; the first line
        it is unsure of stops it for good."""
        if self.stopped:
            return None
        reply = self._answer(line)
        if reply is None and not self._harmless(line):
            self.stopped = True
        return reply

    def _harmless(self, line: bytes) -> bool:
        """A line that gets no reply from anyone and changes nothing we rely on: a blank line
        or a notification (``notifications/initialized`` included: the SDK accepts list
        requests right after ``initialize``)."""
        if not line.strip():
            return True
        try:
            message = load_json(line)
        except UnsafeJson:
            return False
        return (isinstance(message, dict) and message.get("jsonrpc") == "2.0"
                and isinstance(message.get("method"), str) and "id" not in message)

    def _answer(self, line: bytes) -> tuple[str | int, bytes] | None:
        try:
            message = load_json(line)
        except UnsafeJson:
            return None  # the SDK answers it (a parse error, with its id if it has one)
        if not (isinstance(message, dict) and message.get("jsonrpc") == "2.0"
                and set(message) <= {"jsonrpc", "id", "method", "params"}):
            return None
        id_, method, params = request_id(message.get("id")), message.get("method"), \
            message.get("params")
        if id_ is None or id_ in self._ids or not isinstance(method, str) or (
                isinstance(id_, int) and abs(id_) >= 2**53):  # a number every reader keeps
            return None
        result = self._result(method, params)
        if result is None:
            return None
        self._ids.add(id_)
        return id_, (b'{"jsonrpc":"2.0","id":' + json.dumps(id_, ensure_ascii=False).encode()
                     + b',"result":' + result.encode() + b"}\n")

    def _result(self, method: str, params: object) -> str | None:
        if self.era is None:
            if method == "initialize":
                self.era = "handshake"
                if not (isinstance(params, dict) and initialize_accepted(params)):
                    return None
                requested = params["protocolVersion"]
                self.version = requested if requested in HANDSHAKE_VERSIONS \
                    else HANDSHAKE_VERSIONS[-1]
                return self._snapshot.get(self.version, {}).get("initialize")
            if not is_enveloped(params):
                return None  # a request before the handshake: the SDK's error alone
            self.era = "modern"
        if self.era == "modern":
            if method in self._fixed | {"server/discover"} and _modern_params_accepted(params):
                return self._snapshot.get(MODERN_VERSION, {}).get(method)
            return None
        if self.version is not None and method in self._fixed \
                and _handshake_params_accepted(params):
            return self._snapshot.get(self.version, {}).get(method)
        return None


def is_enveloped(params: object) -> bool:
    """Whether the SDK reads a request as 2026-07-28 (its ``_meta`` names a version)."""
    return (isinstance(params, dict) and isinstance(params.get("_meta"), dict)
            and VERSION_KEY in params["_meta"])


def _progress_token_ok(meta: dict[str, Any]) -> bool:
    return "progressToken" not in meta or request_id(meta["progressToken"]) is not None


def _handshake_params_accepted(params: object) -> bool:
    """No params, or only a ``_meta`` with at most a progress token (no cursor: a page the
    snapshot does not hold)."""
    if params is None:
        return True
    if not isinstance(params, dict) or not set(params) <= {"_meta"}:
        return False
    meta = params.get("_meta", {})
    return isinstance(meta, dict) and set(meta) <= {"progressToken"} \
        and _progress_token_ok(meta)


def _modern_params_accepted(params: object) -> bool:
    """Only a ``_meta`` envelope the SDK surely accepts: version 2026-07-28, capabilities it
    can read, client info absent or well formed."""
    if not (isinstance(params, dict) and set(params) == {"_meta"}):
        return False
    meta = params["_meta"]
    if not (isinstance(meta, dict)
            and set(meta) <= {VERSION_KEY, INFO_KEY, CAPABILITIES_KEY, "progressToken"}
            and meta.get(VERSION_KEY) == MODERN_VERSION and _progress_token_ok(meta)):
        return False
    info = meta.get(INFO_KEY)
    return _capabilities_accepted(meta.get(CAPABILITIES_KEY)) \
        and (INFO_KEY not in meta or _implementation_accepted(info))


def initialize_accepted(params: dict[str, Any]) -> bool:
    """Whether the SDK's InitializeRequestParams surely accept ``params``; when unsure, no
    (the SDK then answers alone, a little later)."""
    return (isinstance(params.get("protocolVersion"), str)
            and set(params) <= {"protocolVersion", "capabilities", "clientInfo", "_meta"}
            and _implementation_accepted(params.get("clientInfo"))
            and _capabilities_accepted(params.get("capabilities"))
            and isinstance(params.get("_meta", {}), dict)
            and set(params.get("_meta", {})) <= {"progressToken"}
            and _progress_token_ok(params.get("_meta", {})))


def _implementation_accepted(info: object) -> bool:
    return (isinstance(info, dict) and isinstance(info.get("name"), str)
            and isinstance(info.get("version"), str) and "icons" not in info
            and all(isinstance(info.get(key), str | None)
                    for key in ("title", "description", "websiteUrl")))


def _capabilities_accepted(capabilities: object) -> bool:
    if not isinstance(capabilities, dict):
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
