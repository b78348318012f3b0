"""Gemini CLI as a panel member: plan mode plus a policy that denies every tool that writes,
runs or fetches, no MCP server or extension of the user's, and a private home per call
(it always reads its settings there); its JSON result parsed."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

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


def _gemini_command(agent: AgentSpec, system: str, folder: Path, found: CliVersion
                    ) -> list[str]:
    policy = folder / ".massgen-policy.toml"
    policy.write_text(_GEMINI_POLICY)
    argv = [
        "gemini", "--output-format", "json",
        "--approval-mode", "plan",  # its read-only mode
        "--policy", str(policy),
        "--allowed-mcp-server-names", "massgen-none",  # no MCP server of the user's starts
        "--extensions", "none",
    ]
    if found.supports("--skip-trust"):  # older versions ask no trust of a folder in headless mode
        argv.append("--skip-trust")  # the working folder is our empty temporary one
    if agent.cli_model:
        argv.append(f"--model={agent.cli_model}")
    return [*argv, "--prompt", ""]  # the prompt comes on stdin ("appended to stdin")


def _gemini_parse(stdout: bytes) -> Completion:
    data = json_object(stdout, "gemini")
    if data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ProviderError(f"gemini reported an error: {str(message)[:300]}",
                            retryable=False, kind="cli_error")
    prompt = completion = 0
    for model in mapping(mapping(data.get("stats")).get("models")).values():
        tokens = mapping(mapping(model).get("tokens"))
        prompt += count(tokens.get("prompt"))
        completion += count(tokens.get("candidates")) + count(tokens.get("thoughts"))
    return Completion(content=str(data.get("response") or ""), prompt_tokens=prompt,
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
          command=_gemini_command, parse=_gemini_parse, login_state=_gemini_logged_in,
          api_env=_gemini_api_env, system_flag=False, private_home=_gemini_home)
