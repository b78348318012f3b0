"""Claude Code as a panel member: ``claude --print`` with no tools at all (in a review, its
three read-only tools, confined to the run's read-only snapshot), the user's settings files
not read, an empty MCP configuration, no session kept; its events read as they come
(``--output-format stream-json --verbose``, with ``--include-partial-messages`` the text a few
tokens at a time: every version from 2.1.183 lists both), the reply and its usage and price
taken from the final ``result`` event, the same object ``--output-format json`` prints alone
(the whole-reply format, for a binary whose help lists no ``--verbose``).

Versions before ``--restricted`` and ``--permission-prompts`` (2.1.183 among them, June 2026)
get the same guarantees from the options they have: ``--tools ""`` leaves nothing that could
ask for a permission, and ``--setting-sources ""`` loads none of the user's, project's or
local settings files (their hooks and permission rules)."""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.providers.base import Completion, TextListener
from massgen_mcp.providers.cli.base import (
    Cli,
    CliVersion,
    EventReader,
    count,
    mapping,
    strip_v1,
    text_of,
)

# The API statuses behind a failed Claude Code turn (its ``api_error_status``) that another
# turn may get past: a rate limit, an overload (529 is Anthropic's), a server's failure.
RETRYABLE_API_STATUS = frozenset({429, 500, 502, 503, 529})
# Claude Code's tools that read and nothing else, given in a review only.
READ_TOOLS = "Read,Grep,Glob"


def _claude_command(agent: AgentSpec, system: str, folder: Path, found: CliVersion,
                    reading: bool) -> list[str]:
    # The system prompt goes in a file: a command line is readable by every local user.
    (folder / "system.md").write_text(system, encoding="utf-8")
    argv = ["claude", "--print"]
    if found.supports("--verbose"):  # stream-json refuses to run without it
        argv += ["--output-format", "stream-json", "--verbose"]
        if found.supports("--include-partial-messages"):
            argv.append("--include-partial-messages")
    else:
        argv += ["--output-format", "json"]
    # No built-in tool at all (nothing to read, write or run); in a review, its three that
    # only read, where --restricted confines them to the working folder (the run's read-only
    # snapshot: "<path> is outside <folder>; --restricted confines the file tools to the
    # working directory"). An older version, without it, reads nothing in a review either.
    reads = reading and found.supports("--restricted")
    argv += [
        "--tools", READ_TOOLS if reads else "",
        "--permission-mode", "dontAsk",
    ]
    if found.supports("--permission-prompts"):
        argv += ["--permission-prompts", "none"]
    if found.supports("--restricted"):
        argv.append("--restricted")  # ignores user/project settings files (hooks, permissions)
    else:
        argv += ["--setting-sources", ""]  # the same files, before --restricted existed
    argv += [
        "--strict-mcp-config", "--mcp-config", '{"mcpServers": {}}',
        "--no-session-persistence", "--disable-slash-commands",
        "--append-system-prompt-file", str(folder / "system.md"),
    ]
    if agent.cli_model:
        argv.append(f"--model={agent.cli_model}")
    return argv


class _ClaudeReader(EventReader):
    """Text from the top-level message's text deltas (``stream_event``), or from its whole
    ``assistant`` messages when the version sends no deltas; the reply from the last
    ``result``. A subagent's events (a ``parent_tool_use_id``) are not the reply: none run,
    with every tool off, but they are skipped by that field anyway."""

    name = "claude"

    def __init__(self, on_text: TextListener | None) -> None:
        super().__init__(on_text)
        self._result: dict[str, Any] | None = None
        self._partial = False  # deltas came: the whole messages repeat them

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "result":
            self._result = event
        elif event.get("parent_tool_use_id") is not None:
            return
        elif kind == "stream_event":
            inner = mapping(event.get("event"))
            delta = mapping(inner.get("delta"))
            if inner.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
                self._partial = True
                self.delta(text_of(delta.get("text")))
        elif kind == "assistant" and not self._partial:
            content = mapping(event.get("message")).get("content")
            for block in content if isinstance(content, list) else []:
                if mapping(block).get("type") == "text":
                    self.message(text_of(block.get("text")))

    def finish(self) -> Completion:
        if self._result is None:
            raise self.no_result()
        return _claude_completion(self._result)


def _claude_completion(data: dict[str, Any]) -> Completion:
    if data.get("is_error") or data.get("subtype") != "success":
        status = count(data.get("api_error_status")) or None  # untrusted: an int or nothing
        raise ProviderError(
            f"claude: {str(data.get('result') or data.get('subtype'))[:300]}"
            f"{f' (HTTP {status})' if status else ''}",
            retryable=status in RETRYABLE_API_STATUS, status_code=status,
            kind=ErrorKind.CLI_ERROR)
    usage = mapping(data.get("usage"))
    prompt = sum(count(usage.get(k)) for k in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    cost = data.get("total_cost_usd")
    # A price from untrusted output counts only if it is a real one: a negative or infinite
    # figure would defeat max_cost_usd.
    if (not isinstance(cost, int | float) or isinstance(cost, bool)
            or not math.isfinite(cost) or cost < 0):
        cost = None
    return Completion(content=str(data.get("result") or ""), prompt_tokens=prompt,
                      completion_tokens=count(usage.get("output_tokens")),
                      cost_usd=None if cost is None else float(cost))


def _claude_logged_in() -> bool:
    """Linux keeps the login in ~/.claude/.credentials.json; macOS in the Keychain, with the
    account (no secret) named in ~/.claude.json."""
    folder = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    if (folder / ".credentials.json").is_file():
        return True
    state = Path.home() / ".claude.json"
    with contextlib.suppress(OSError, ValueError):
        if state.is_file() and state.stat().st_size < 20_000_000:
            return "oauthAccount" in json.loads(state.read_text(encoding="utf-8"))
    return False


def _claude_api_env(key: str, base_url: str | None) -> dict[str, str]:
    env = {"ANTHROPIC_API_KEY": key}
    if base_url:
        env["ANTHROPIC_BASE_URL"] = strip_v1(base_url)
    return env


CLI = Cli("claude", "claude_code", "claude", "Anthropic", "Claude Code",
          "@anthropic-ai/claude-code", oldest="2.1.183",
          needs=("--print", "--output-format", "--tools", "--permission-mode",
                 "--restricted|--setting-sources", "--strict-mcp-config", "--mcp-config",
                 "--no-session-persistence", "--disable-slash-commands"),
          help_args=("--help",),
          own_login_vars=("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY"),
          command=_claude_command, reader=_ClaudeReader, login_state=_claude_logged_in,
          api_env=_claude_api_env, system_flag=True, provider="anthropic")
