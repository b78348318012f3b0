"""MCP servers as agent tools, in MassGen's config shape.

An agent's backend may name MCP servers (``mcp_servers``, as a mapping ``name -> server`` or a
list of servers with a ``name``), stdio (``command``, ``args``, ``env``, ``cwd``) or streamable
HTTP (``url``, ``headers``), and filter their tools with ``allowed_tools`` / ``exclude_tools``.
Their tools reach the agent as ``mcp__<server>__<tool>``, as in MassGen. Agents' tools are
read-only: unless ``allowed_tools`` names a tool, only tools their server declares read-only
(``readOnlyHint``) are offered.

A :class:`McpToolbox` belongs to one run: it starts each server the run's agents name once (so
agents naming the same server share it), and :meth:`McpToolbox.aclose` shuts every one down when
the run ends, fails or is cancelled; a stdio server is a child process that does not outlive it,
and neither does anything it starts (:mod:`massgen_mcp.core.children`: on Linux every descendant,
also one that called ``setsid`` or daemonized, dies when the server exits, by itself or
stopped; elsewhere its process group is killed when it is stopped).
A server that fails to start, or dies mid-run, answers its tools with an error result; the run
goes on. ``${VAR}`` in ``env`` and ``headers`` is resolved when the server starts and never
recorded. A child process gets only the variables its ``env`` names (plus the basic ones such as
``PATH`` and ``HOME``): never our API keys unless the config asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from typing import IO, TYPE_CHECKING, Any, TextIO

from massgen_mcp.core import children
from massgen_mcp.core.agent import McpServerSpec
from massgen_mcp.core.edges import terminal_safe
from massgen_mcp.core.env import expand_vars
from massgen_mcp.core.secrets import redact, register_secret

if TYPE_CHECKING:
    from fastmcp import Client

log = logging.getLogger(__name__)

PREFIX = "mcp__"
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 60.0
MAX_RESULT_CHARS = 50_000
# Every offered tool's spec goes into every call of that agent, so a server cannot be allowed
# to decide how big calls are: at most this many tools per server, this much JSON per tool's
# spec (a bigger one is dropped: a cut schema would mislead), and this many tools and this
# much JSON in all per call. What is cut is a ``tools_cut`` event (and a warning in
# ``validate --servers``).
MAX_TOOLS_PER_SERVER = 100
MAX_SPEC_CHARS = 10_000
MAX_TOOLS_PER_CALL = 100
MAX_SPECS_CHARS_PER_CALL = 100_000
MAX_STDERR_LINE = 4096  # a line of a server's stderr passed on; the rest of it is dropped








class StderrRelay:
    """A stdio server's stderr, passed on to ours one line at a time, redacted and made
    terminal-safe (:func:`~massgen_mcp.core.edges.terminal_safe`). The server is a program
    the config chose, but what it prints is whatever it read (a web page, a tool's result)
    or holds (the keys its ``env`` names), and our stderr is a person's terminal or a
    host's log: an escape sequence there retitles the window or clears the screen."""

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.stream: TextIO = os.fdopen(write_fd, "w")  # the server's stderr
        reader = os.fdopen(read_fd, "rb")
        threading.Thread(target=self._relay, args=(reader,), daemon=True,
                         name=f"mcp-stderr-{server}").start()

    @staticmethod
    def _relay(reader: IO[bytes]) -> None:
        with reader:
            while line := reader.readline(MAX_STDERR_LINE):
                if not line.endswith(b"\n"):  # a longer line: the rest of it is dropped
                    while (more := reader.readline(MAX_STDERR_LINE)) and \
                            not more.endswith(b"\n"):
                        pass
                text = redact(line.decode("utf-8", "replace").rstrip("\r\n"))
                with contextlib.suppress(OSError, ValueError):  # our stderr is gone
                    sys.stderr.write(terminal_safe(text) + "\n")
                    sys.stderr.flush()

    def close(self) -> None:
        """Our copy of the pipe's end; the relay ends when the server's is closed too."""
        self.stream.close()


def _resolve(values: dict[str, str], where: str) -> dict[str, str]:
    """``${VAR}`` resolved now; every resolved value is registered as a secret."""
    return {key: expand_vars(value, where, read=lambda _, found: register_secret(found))
            for key, value in values.items()}


def tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


class McpToolbox:
    """The MCP servers of one run: started once, shared, always shut down."""

    def __init__(self, servers: list[McpServerSpec]) -> None:
        self.servers = {s.name: s for s in servers}
        self._clients: dict[str, Client[Any]] = {}
        self._tools: dict[str, list[dict[str, Any]]] = {}  # server -> function specs
        self._failed: dict[str, str] = {}
        self._read_only: set[str] = set()  # tools their server declares read-only
        self._cut: list[str] = []  # what the caps cut, not yet reported (take_cut)
        self._reported: set[str] = set()
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        """Start every server, one after the other in the calling task (their connections
        must be closed by the task that opened them); one that fails is remembered."""
        for spec in self.servers.values():
            await self._start(spec)

    async def _start(self, spec: McpServerSpec) -> None:
        from fastmcp import Client
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
        from mcp.client.stdio import get_default_environment

        from massgen_mcp.tools import reply_cap

        reply_cap.install()  # a reply is held up to a bound, never whole
        transport: Any
        try:
            if spec.type == "stdio":
                env = _resolve(spec.env, f"mcp server {spec.name}.env")
                # The SDK spawns it in its own session; under the reaper on Linux, so that
                # whatever the server starts dies with it, even when it exits by itself. Once
                # the SDK has stopped it, what still carries its marker is killed (a tree
                # that left its group, or killed its reaper: core/children.py).
                spawn = children.command([spec.command or "", *spec.args],
                                         get_default_environment() | env, spec.cwd)
                command, *args = spawn.argv
                self._stack.push_async_callback(asyncio.to_thread, children.sweep,
                                                spawn.marker)
                relay = StderrRelay(spec.name)
                self._stack.callback(relay.close)
                transport = StdioTransport(command=command, args=args,
                                           env=env | {children.MARKER_ENV: spawn.marker},
                                           cwd=spec.cwd, keep_alive=False,
                                           log_file=relay.stream)
            else:
                transport = StreamableHttpTransport(
                    spec.url or "", headers=_resolve(spec.headers,
                                                     f"mcp server {spec.name}.headers"))
            client: Client[Any] = Client(transport, timeout=CALL_TIMEOUT_S)
            async with asyncio.timeout(START_TIMEOUT_S):
                await self._stack.enter_async_context(client)
                listed = await client.list_tools()
        except Exception as exc:  # any failure: its tools answer with this error
            self._failed[spec.name] = redact(f"{type(exc).__name__}: {exc}")[:500]
            log.warning("MCP server %s did not start: %s", spec.name, self._failed[spec.name])
            return
        self._clients[spec.name] = client
        self._tools[spec.name] = self._capped(spec.name, [{
            "type": "function",
            "function": {"name": tool_name(spec.name, t.name),
                         "description": (t.description or "")[:1000],
                         "parameters": t.input_schema or {"type": "object"}}}
            for t in listed])
        self._read_only.update(tool_name(spec.name, t.name) for t in listed
                               if t.annotations is not None and t.annotations.read_only_hint)

    def specs_for(self, servers: list[str], allowed: list[str] | None,
                  excluded: list[str] | None) -> list[dict[str, Any]]:
        """The function specs one agent is offered (``allowed``/``excluded`` match the tool's
        own name or its ``mcp__`` name). Agents' tools are read-only: without ``allowed``,
        only the tools their server declares read-only (``readOnlyHint``) are offered; any
        other tool must be named in ``allowed_tools``."""
        found = []
        for server in servers:
            for spec in self._tools.get(server, []):
                full = spec["function"]["name"]
                short = full.removeprefix(f"{PREFIX}{server}__")
                if allowed is None:
                    if full not in self._read_only:
                        continue
                elif short not in allowed and full not in allowed:
                    continue
                if excluded and (short in excluded or full in excluded):
                    continue
                found.append(spec)
        return self._within_call_caps(found)

    def _capped(self, server: str, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A server's tools within :data:`MAX_SPEC_CHARS` each and
        :data:`MAX_TOOLS_PER_SERVER` in all; what is dropped is noted."""
        kept = [s for s in specs if len(json.dumps(s)) <= MAX_SPEC_CHARS]
        big = [s["function"]["name"] for s in specs if s not in kept]
        if big:
            self._note(f"MCP server {server}: {len(big)} tool(s) dropped, their spec is over "
                       f"{MAX_SPEC_CHARS} characters: {', '.join(big[:5])}"
                       + (" ..." if len(big) > 5 else ""))
        if len(kept) > MAX_TOOLS_PER_SERVER:
            self._note(f"MCP server {server}: {len(kept)} tools; only the first "
                       f"{MAX_TOOLS_PER_SERVER} are offered (name the ones you need in "
                       "allowed_tools)")
        return kept[:MAX_TOOLS_PER_SERVER]

    def _within_call_caps(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The first specs within :data:`MAX_TOOLS_PER_CALL` and
        :data:`MAX_SPECS_CHARS_PER_CALL`; what is left out is noted."""
        kept: list[dict[str, Any]] = []
        size = 0
        for spec in specs:
            size += len(json.dumps(spec))
            if len(kept) == MAX_TOOLS_PER_CALL or size > MAX_SPECS_CHARS_PER_CALL:
                break
            kept.append(spec)
        if len(kept) < len(specs):
            self._note(f"{len(specs) - len(kept)} of {len(specs)} MCP tools left out of "
                       f"each call (at most {MAX_TOOLS_PER_CALL} tools and "
                       f"{MAX_SPECS_CHARS_PER_CALL} characters of tool specs per call): "
                       + ", ".join(s["function"]["name"] for s in specs[len(kept):][:5])
                       + (" ..." if len(specs) - len(kept) > 5 else ""))
        return kept

    def _note(self, line: str) -> None:
        if line not in self._reported:
            self._reported.add(line)
            self._cut.append(line)

    def failed(self) -> dict[str, str]:
        """Server name -> why it did not start."""
        return dict(self._failed)

    def take_cut(self) -> list[str]:
        """What the caps cut since the last call, each said once per run."""
        cut, self._cut = self._cut, []
        return cut

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call ``mcp__server__tool``; the text of its result, or ``error: ...``."""
        server, _, tool = name.removeprefix(PREFIX).partition("__")
        if server in self._failed:
            return f"error: MCP server {server} is not available ({self._failed[server]})"
        client = self._clients.get(server)
        if client is None:
            return f"error: there is no MCP server named {server!r}"
        try:
            result = await client.call_tool(tool, arguments, raise_on_error=False)
        except Exception as exc:  # a dead server, a broken pipe, a timeout
            return f"error: MCP server {server} failed: {type(exc).__name__}: {exc}"[:2000]
        texts = [getattr(block, "text", None) or f"[{getattr(block, 'type', 'content')}]"
                 for block in result.content]
        text = "\n".join(texts)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[truncated at {MAX_RESULT_CHARS} characters]"
        return f"error: {text}" if result.is_error else text

    async def aclose(self) -> None:
        """Shut every server down (stdio children are terminated)."""
        try:
            await self._stack.aclose()
        except Exception:  # a server that died first must not spoil the run's end
            log.warning("closing MCP servers", exc_info=True)
