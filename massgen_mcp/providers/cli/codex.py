"""Codex as a panel member: ``codex exec`` in its read-only sandbox with its shell and every
other tool feature off, the user's config and rules not read; its JSON event lines read as
they come (``exec --json``, which every version from 0.134.0 has). Those carry each message
whole, once it is complete (``item.completed``): no version prints deltas of a message's text,
so a live draft of a Codex agent grows a message at a time. A self-hosted or test endpoint
(``base_url``) becomes a provider entry of our own."""

from __future__ import annotations

import json
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
    text_of,
)

# The key variable our self-hosted provider entry points Codex at (see _codex_command).
_CODEX_KEY_VAR = "MASSGEN_CLI_API_KEY"

# Every feature of codex exec that could act beyond answering, switched off by name. Each is
# required (CLI.needs): a version whose `features list` does not list one (a format we cannot
# read, a cache entry that says otherwise) is refused rather than run with it on. All are
# listed from the tested oldest (0.134.0) to the newest (0.169.0), but view_image, a feature
# from 0.169.0 only: before, the tool is always offered and nothing turns it off (it reads an
# image file, as read_file reads text), so there it is required only where it exists.
_CODEX_OFF = ("shell_tool", "unified_exec", "apps", "plugins", "hooks", "browser_use",
              "computer_use", "view_image", "multi_agent", "goals", "memories")
_CODEX_OFF_FROM = {"view_image": "0.169.0"}


def _codex_command(agent: AgentSpec, system: str, folder: Path, found: CliVersion,
                   reading: bool) -> list[str]:
    # In a review too its shell stays off: its read-only sandbox keeps writes and the network
    # out but lets a command read the whole disk, far more than the run's snapshot; and no
    # other tool of this version reads a file, so a Codex member reviews from the diff.
    argv = [
        "codex", "exec", "--json", "--ephemeral", "--skip-git-repo-check",
        "--sandbox", "read-only",  # what its shell could do, were it on
        "--ignore-user-config", "--ignore-rules",  # no MCP servers, rules or hooks of the user's
        "-c", "mcp_servers={}", "-c", 'web_search="disabled"',
        "-c", 'approval_policy="never"',
    ]
    for feature in _CODEX_OFF:
        if found.supports(feature):  # refused before this when a required one is not listed
            argv += ["--disable", feature]
    if agent.base_url:  # a self-hosted or test endpoint speaking the Responses API
        argv += ["-c", "model_provider=massgen",
                 "-c", "model_providers.massgen.name=massgen",
                 "-c", f"model_providers.massgen.base_url={json.dumps(agent.base_url)}",
                 "-c", f"model_providers.massgen.env_key={_CODEX_KEY_VAR}",
                 "-c", 'model_providers.massgen.wire_api="responses"']
    if agent.cli_model:
        argv.append(f"--model={agent.cli_model}")
    return [*argv, "-"]  # the prompt comes on stdin


class _CodexReader(EventReader):
    """The reply is the last agent message (an earlier one is commentary before a tool call);
    usage from ``turn.completed``; a failed turn or an error event names the failure."""

    name = "codex"

    def __init__(self, on_text: TextListener | None) -> None:
        super().__init__(on_text)
        self._text: str | None = None
        self._usage: dict[str, Any] = {}
        self._failure = ""

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        item = mapping(event.get("item"))
        if kind == "item.completed" and item.get("type") == "agent_message":
            self._text = text_of(item.get("text"))
            self.message(self._text)
        elif kind == "turn.completed":
            self._usage = mapping(event.get("usage"))
        elif kind == "turn.failed":
            self._failure = str(mapping(event.get("error")).get("message") or "turn failed")
        elif kind == "error":
            self._failure = str(event.get("message") or "error")

    def finish(self) -> Completion:
        if self._text is None:
            raise ProviderError(
                f"codex gave no answer: {self._failure or 'no agent message'}"[:400],
                kind=ErrorKind.CLI_ERROR)
        usage = self._usage
        return Completion(content=self._text, prompt_tokens=count(usage.get("input_tokens")),
                          completion_tokens=count(usage.get("output_tokens"))
                          + count(usage.get("reasoning_output_tokens")))


def _codex_logged_in() -> bool:
    return (Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "auth.json").is_file()


def _codex_api_env(key: str, base_url: str | None) -> dict[str, str]:
    return {_CODEX_KEY_VAR if base_url else "CODEX_API_KEY": key}


CLI = Cli("codex", "codex", "codex", "OpenAI", "Codex", "@openai/codex", oldest="0.134.0",
          needs=("--json", "--ephemeral", "--skip-git-repo-check", "--sandbox",
                 "--ignore-user-config", "--ignore-rules", "--disable", "--config",
                 *(f for f in _CODEX_OFF if f not in _CODEX_OFF_FROM)),
          needs_from=tuple(_CODEX_OFF_FROM.items()),
          help_args=("exec", "--help"), features_args=("features", "list"),
          own_login_vars=("OPENAI_API_KEY", "CODEX_API_KEY"),
          command=_codex_command, reader=_CodexReader, login_state=_codex_logged_in,
          api_env=_codex_api_env, system_flag=False, provider="openai")
