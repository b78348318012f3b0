"""Write the early replies' snapshot: what the SDK itself answers to the fixed requests.

The launcher answers a host's opening requests (``initialize``, ``server/discover``, the
list requests) before fastmcp is loaded (:mod:`massgen_mcp.server.early`). Those replies must
be the SDK's own, to the byte, so they are not written by hand: this module spawns the server
with early replies off, asks it each fixed request at every protocol version, and stores the
raw JSON of each result in ``early_replies.json`` next to it. A test regenerates it and
compares (tests/system/test_early_replies.py), so a tool or schema change that forgets to refresh it
fails there, and at run time a reply that differed from the SDK's is logged.

Run ``python -m massgen_mcp.server.early_snapshot`` after changing a tool, a resource, the
prompt or the instructions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.server.handshake import (
    HANDSHAKE_VERSIONS,
    LIST_METHODS,
    MODERN_VERSION,
    SNAPSHOT,
    fingerprint,
)

CLIENT = {"name": "massgen-snapshot", "version": "1"}
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": CLIENT}


class _Conversation:
    """One server process over raw stdio; :meth:`ask` returns a reply's raw result bytes."""

    def __init__(self, home: str) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.endswith("_API_KEY") and k != SETTINGS.mcp_max_wait_s.env}
        env.update(MASSGEN_HOME=home, MASSGEN_EARLY_INITIALIZE="0")
        self.proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self._id = 0

    def ask(self, method: str, params: dict[str, Any] | None = None) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._id, "method": method}
        if params is not None:
            message["params"] = params
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        head = b'{"jsonrpc":"2.0","id":%d,"result":' % self._id
        if not (line.startswith(head) and line.endswith(b"}\n")):
            raise RuntimeError(f"{method}: unexpected reply {line[:300]!r}")
        return line[len(head):-2].decode()

    def tell(self, method: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def generate() -> dict[str, dict[str, str]]:
    """``{version: {method: raw result JSON}}`` as the SDK answers them now."""
    replies: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as home:
        for version in HANDSHAKE_VERSIONS:
            talk = _Conversation(home)
            try:
                found = {"initialize": talk.ask("initialize", {
                    "protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT})}
                talk.tell("notifications/initialized")
                found |= {method: talk.ask(method) for method in sorted(LIST_METHODS)}
            finally:
                talk.close()
            replies[version] = found
        talk = _Conversation(home)
        try:
            replies[MODERN_VERSION] = {
                method: talk.ask(method, {"_meta": ENVELOPE})
                for method in ("server/discover", *sorted(LIST_METHODS))}
        finally:
            talk.close()
    return replies


def render(replies: dict[str, dict[str, str]]) -> str:
    """The snapshot file: the replies and the fingerprint of the sources they came from."""
    return json.dumps({"fingerprint": fingerprint(), **replies}, indent=1,
                      ensure_ascii=False) + "\n"


def main() -> int:
    SNAPSHOT.write_text(render(generate()), encoding="utf-8")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
