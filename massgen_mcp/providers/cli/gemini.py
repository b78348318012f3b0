"""Gemini CLI as a panel member: plan mode plus a policy that denies every tool that writes,
runs or fetches, no MCP server or extension of the user's, and a private home per call
(it always reads its settings there); its events read as they come (``--output-format
stream-json``, which every version from 0.34.0 offers), the text a chunk of the model's
stream at a time."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.providers.base import Completion, TextListener
from massgen_mcp.providers.cli.base import (
    MAX_REPLY_CHARS,
    Cli,
    CliVersion,
    EventReader,
    count,
    mapping,
    strip_v1,
    text_of,
)

# Gemini CLI's plan mode still lets the model write plan files and search the web; this policy
# (user tier, above plan mode's own rules) denies every tool that writes, runs or fetches, and
# the subagents older versions offer as tools of their own (each a model loop of its own).
_GEMINI_POLICY = """\
[[rule]]
toolName = ["write_file", "replace", "run_shell_command", "web_fetch", "google_web_search",
            "invoke_agent", "save_memory", "write_todos", "activate_skill", "exit_plan_mode",
            "enter_plan_mode", "update_topic", "ask_user",
            "codebase_investigator", "cli_help", "generalist"]
decision = "deny"
priority = 999
denyMessage = "Read-only panel member: this tool is not available."
"""


def _gemini_command(agent: AgentSpec, system: str, folder: Path, found: CliVersion,
                    reading: bool) -> list[str]:
    policy = folder / ".massgen-policy.toml"
    policy.write_text(_GEMINI_POLICY)
    argv = [
        "gemini", "--output-format", "stream-json",
        "--approval-mode", "plan",  # its read-only mode
        "--policy", str(policy),
        "--allowed-mcp-server-names", "massgen-none",  # no MCP server of the user's starts
        "--extensions", "none",
    ]
    if found.supports("--skip-trust"):  # older versions ask no trust of a folder in headless mode
        # The working folder is our empty temporary one, or a review's read-only snapshot,
        # which holds no .gemini/ (a trusted folder's settings would be read: hooks, MCP
        # servers) nor .env (massgen_mcp.tools.snapshot leaves both out).
        argv.append("--skip-trust")
    if agent.cli_model:
        argv.append(f"--model={agent.cli_model}")
    return [*argv, "--prompt", ""]  # the prompt comes on stdin ("appended to stdin")


class _GeminiReader(EventReader):
    """The reply is the text of the model's last turn, as ``--output-format json`` gives it:
    the deltas of the assistant's messages since the last tool call (a turn that called a tool
    is followed by another). Usage from the ``result`` event, whose ``output_tokens`` leave out
    the model's thinking: the tokens past the prompt (``total_tokens - input_tokens``) count,
    as the JSON format's ``candidates`` plus ``thoughts`` did."""

    name = "gemini"

    def __init__(self, on_text: TextListener | None) -> None:
        super().__init__(on_text)
        self._text: list[str] = []
        self._chars = 0
        self._result: dict[str, Any] | None = None
        self._error = ""

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            text = text_of(event.get("content"))
            self._chars += len(text)
            if self._chars > MAX_REPLY_CHARS:
                raise ProviderError(f"gemini's reply passed {MAX_REPLY_CHARS // 1024 // 1024} "
                                    "MiB; stopped", kind=ErrorKind.CLI_ERROR)
            # A turn's first piece is set apart from the text of a turn before it.
            (self.delta if self._text else self.message)(text)
            self._text.append(text)
        elif kind in ("tool_use", "tool_result"):
            self._text, self._chars = [], 0  # that turn's text was not the answer
        elif kind == "error" and event.get("severity") == "error":
            self._error = text_of(event.get("message"))
        elif kind == "result":
            self._result = event

    def finish(self) -> Completion:
        if self._result is None:
            raise self.no_result(f" ({self._error[:300]})" if self._error else "")
        if self._result.get("status") != "success":
            error = self._result.get("error")
            message = mapping(error).get("message") or error or self._error or "no reason given"
            raise ProviderError(f"gemini reported an error: {str(message)[:300]}",
                                kind=ErrorKind.CLI_ERROR)
        stats = mapping(self._result.get("stats"))
        prompt = count(stats.get("input_tokens"))
        completion = max(count(stats.get("output_tokens")),
                         count(stats.get("total_tokens")) - prompt)
        return Completion(content="".join(self._text), prompt_tokens=prompt,
                          completion_tokens=completion)


def _gemini_logged_in() -> bool:
    return (Path.home() / ".gemini" / "oauth_creds.json").is_file()


_GEMINI_LOGIN_FILES = ("oauth_creds.json", "google_accounts.json", "installation_id")


def _gemini_home(folder: Path) -> dict[str, str]:
    """Gemini CLI runs the hooks and the tool-discovery command of the user's settings and
    writes a transcript of every chat under ~/.gemini, whatever the flags: it gets a private
    home per call holding a copy of its login and the user's choice of auth method only."""
    user = Path.home() / ".gemini"
    private = folder / "home"
    (private / ".gemini").mkdir(parents=True, mode=0o700)
    for name in _GEMINI_LOGIN_FILES:
        with contextlib.suppress(OSError):
            if (user / name).is_file():
                shutil.copyfile(user / name, private / ".gemini" / name)
    auth: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        settings = json.loads((user / "settings.json").read_text(encoding="utf-8"))
        auth = mapping(mapping(mapping(settings).get("security")).get("auth"))
    keep = {k: v for k, v in auth.items() if k in ("selectedType", "enforcedType")}
    (private / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": keep}, "hooksConfig": {"enabled": False}}))
    return {"GEMINI_CLI_HOME": str(private)}


def _gemini_api_env(key: str, base_url: str | None) -> dict[str, str]:
    # Gemini CLI takes its auth method only from the user's settings
    # (security.auth.selectedType: gemini-api-key), never from a project or the call.
    env = {"GEMINI_API_KEY": key}
    if base_url:
        env["GOOGLE_GEMINI_BASE_URL"] = strip_v1(base_url)
    return env


CLI = Cli("gemini", "gemini_cli", "gemini", "Google", "Gemini CLI", "@google/gemini-cli",
          oldest="0.34.0",
          needs=("--output-format", "--approval-mode", "--policy", "--allowed-mcp-server-names",
                 "--extensions", "--prompt"),
          help_args=("--help",), own_login_vars=("GEMINI_API_KEY",),
          command=_gemini_command, reader=_GeminiReader, login_state=_gemini_logged_in,
          api_env=_gemini_api_env, system_flag=False, provider="gemini",
          private_home=_gemini_home,
          # Otherwise each call starts node twice: Gemini CLI relaunches itself with a heap
          # limit of half the machine's memory, ~1-3 s of CPU a call that a one-shot
          # read-only turn does not need (the relaunch is all the variable turns off).
          run_env=(("GEMINI_CLI_NO_RELAUNCH", "true"),))
