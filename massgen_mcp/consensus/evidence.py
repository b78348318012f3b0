"""Evidence rounds: the workspace and MCP tool calls an agent makes within one turn.

An agent may look before it decides: read the workspace (:mod:`massgen_mcp.tools.workspace`)
or call its MCP servers' tools (:mod:`massgen_mcp.tools.mcp_servers`). This module knows what
each agent is offered, serves its calls within the per-turn and per-run caps, records each as
a ``tool_call`` event and hands the results back for the next call of the turn; the engine's
loop only asks whether a reply is evidence or a decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from massgen_mcp.consensus.run import Progress, RunRequest
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.records import EventType, clip
from massgen_mcp.core.secrets import redact
from massgen_mcp.providers.base import Completion, ToolCall
from massgen_mcp.tools.mcp_servers import PREFIX as MCP_PREFIX
from massgen_mcp.tools.mcp_servers import McpToolbox
from massgen_mcp.tools.workspace import WorkspaceTools

TOOL_TIMEOUT_S = 10.0  # one workspace tool call (they only read capped local files)


def is_evidence(name: str) -> bool:
    """Whether a tool gathers evidence (workspace or MCP) rather than deciding."""
    return name in WorkspaceTools.NAMES or name.startswith(MCP_PREFIX)


class Emit(Protocol):
    def __call__(self, event_type: EventType, /, **data: Any) -> None: ...


class Evidence:
    """The evidence tools of one run, and the calls made on them. ``emit`` records an event,
    ``publish`` the run's status (an agent's current tool shows in it)."""

    def __init__(self, request: RunRequest, progress: Progress, emit: Emit,
                 publish: Callable[[], None]) -> None:
        self.options = options = request.team.options
        self.tools = (WorkspaceTools(request.workspace, tuple(options.context_paths),
                                     tuple(options.allow_secret_files))
                      if options.workspace_tools and request.workspace else None)
        servers = request.team.mcp_servers()
        self.mcp = McpToolbox(servers) if servers else None
        self.progress = progress
        self._emit = emit
        self._publish = publish
        self.calls = 0  # evidence tool calls in the whole run
        self.activity: dict[str, str] = {}  # agent -> the tool it is using now

    def specs(self, agent: AgentSpec) -> list[dict[str, Any]]:
        """The evidence tools ``agent`` is offered: the workspace's and its MCP servers'."""
        specs = self.tools.specs() if self.tools else []
        if self.mcp is not None:
            specs += self.mcp.specs_for([s.name for s in agent.mcp_servers],
                                        agent.allowed_tools, agent.exclude_tools)
            self.report_cut(agent.id)
        return specs

    def report_cut(self, agent_id: str | None = None) -> None:
        """A ``tools_cut`` event for each thing the MCP caps left out, once each."""
        assert self.mcp is not None
        for line in self.mcp.take_cut():
            self._emit(EventType.TOOLS_CUT, agent_id=agent_id, detail=line)

    def left(self, used_this_turn: int) -> bool:
        """Whether another call fits in the caps."""
        return (used_this_turn < self.options.max_tool_calls_per_turn
                and self.calls < self.options.max_tool_calls_per_run)

    async def use(self, agent: AgentSpec, messages: list[dict[str, Any]],
                  completion: Completion, used: int, offered: set[str]
                  ) -> tuple[list[dict[str, Any]], int]:
        """Run the evidence calls of one reply (within the caps) and return the conversation
        with their results appended, and the calls used this turn."""
        limit = (f"tool limit reached (max_tool_calls_per_turn "
                 f"{self.options.max_tool_calls_per_turn}, max_tool_calls_per_run "
                 f"{self.options.max_tool_calls_per_run}); decide now with what you have: "
                 "call new_answer or vote")
        results = []
        for call in completion.tool_calls:
            if not self.left(used):
                text = f"error: {limit}"
            else:
                used += 1
                self.calls += 1
                self.progress.usage[agent.id].tool_calls += 1
                self.progress.total.tool_calls += 1
                text = await self._run(agent, call, offered)
            results.append({"role": "tool", "tool_call_id": call.id, "content": text})
        if not self.left(used) and not results[-1]["content"].startswith("error: tool"):
            results[-1]["content"] += f"\n[{limit}]"
        return [*messages, completion.assistant_message(), *results], used

    async def _run(self, agent: AgentSpec, call: ToolCall, offered: set[str]) -> str:
        """One evidence call's result (redacted: a file may hold a key the run knows), recorded
        as a ``tool_call`` event."""
        t0 = time.monotonic()
        text = redact(await self._result(agent, call, offered))
        self._emit(EventType.TOOL_CALL, agent_id=agent.id, tool=call.name,
                   arguments=clip(call.arguments, 300)[0], chars=len(text),
                   latency_s=round(time.monotonic() - t0, 3),
                   error=text[7:] if text.startswith("error: ") else None)
        return text

    async def _result(self, agent: AgentSpec, call: ToolCall, offered: set[str]) -> str:
        if call.name not in offered:
            return f"error: there is no tool named {call.name!r} for you"
        try:
            arguments = load_json(call.arguments or "{}")
        except UnsafeJson:
            arguments = None
        if not isinstance(arguments, dict):
            return f"error: the arguments of {call.name} are not a JSON object"
        target = arguments.get("path") or arguments.get("pattern") or ""
        self.activity[agent.id] = clip(f"{call.name} {target}".strip(), 120)[0]
        self._publish()
        try:
            if call.name.startswith(MCP_PREFIX):
                assert self.mcp is not None
                return await self.mcp.call(call.name, arguments)  # the client's timeout
            assert self.tools is not None
            return await asyncio.wait_for(
                asyncio.to_thread(self.tools.run, call.name, arguments), TOOL_TIMEOUT_S)
        except TimeoutError:
            return f"error: {call.name} took longer than {TOOL_TIMEOUT_S:g} s"
        finally:
            self.activity.pop(agent.id, None)
