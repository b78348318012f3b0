"""Claude Code as a panel member: ``claude --print`` with no tools at all, the user's settings
files not read, an empty MCP configuration, no session kept; its JSON result parsed.

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

from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import Completion
from massgen_mcp.providers.cli.base import (
    Cli,
    CliVersion,
    count,
    json_object,
    mapping,
    strip_v1,
)


def _claude_command(agent: AgentSpec, system: str, folder: Path, found: CliVersion
                    ) -> list[str]:
    # The system prompt goes in a file: a command line is readable by every local user.
    (folder / "system.md").write_text(system, encoding="utf-8")
    argv = [
        "claude", "--print", "--output-format", "json",
        "--tools", "",  # no built-in tool at all: nothing to read, write or run
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


def _claude_parse(stdout: bytes) -> Completion:
    data = json_object(stdout, "claude")
    if data.get("is_error") or data.get("subtype") != "success":
        status = data.get("api_error_status")
        raise ProviderError(
            f"claude: {str(data.get('result') or data.get('subtype'))[:300]}"
            f"{f' (HTTP {status})' if status else ''}",
            retryable=status in (429, 500, 502, 503, 529), status_code=status,
            kind="cli_error")
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
          command=_claude_command, parse=_claude_parse, login_state=_claude_logged_in,
          api_env=_claude_api_env, system_flag=True)
