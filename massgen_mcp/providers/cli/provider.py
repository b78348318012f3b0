"""The provider whose agents are CLI processes: one child per call, with the CLI's read-only
command, a sanitised environment (:func:`child_env`) and the chat rendered as one prompt
(:func:`render_prompt`); stderr goes to the session's ``cli.log``."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from massgen_mcp.core.env import POOL_URL_ENV
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.secrets import carries_credential, looks_secret
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import CallContext, Completion
from massgen_mcp.providers.cli.base import Cli, tail
from massgen_mcp.providers.cli.catalog import CLIS, find_executable
from massgen_mcp.providers.cli.supervisor import MAX_STDERR_BYTES, run_child

ERROR_TAIL_CHARS = 600

# The way to the network the user set for every program, password or not: the CLI needs it
# to reach its provider.
PROXY_VARS = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                        "https_proxy", "all_proxy"})
# Variables a CLI reads as "you are running inside another agent's session" (found in the
# binaries; Claude Code itself checks the same list to detect a parent agent). A child that sees
# them changes its behaviour or refuses to start.
NESTING_VARS = frozenset({
    "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_CHILD_SESSION",
    "CLAUDE_CODE_SESSION_ID", "CLAUDE_CODE_SSE_PORT", "CLAUDE_CODE_EXECPATH",
    "CLAUDE_CODE_TASK_LIST_ID", "CLAUDE_CODE_CHILD_NOTES_DIR", "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDE_AGENT_SDK_CLIENT_APP", "REPL_ID",
    "CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED", "CODEX_THREAD_ID", "CODEX_CI",
    "GEMINI_CLI", "GEMINI_CLI_IDE_SERVER_PORT", "GEMINI_CLI_IDE_WORKSPACE_PATH",
    "GEMINI_CLI_IDE_SERVER_STDIO_ARGS", "COPILOT_CLI", "CURSOR_AGENT", "JUNIE_DATA",
    "JUNIE_SHIM_PATH",
})

PLACEHOLDER_KEY = "no-key-needed"


def child_env(cli: Cli, agent: AgentSpec) -> dict[str, str]:
    """The environment a CLI child gets: ours without nesting markers and credentials (but the
    CLI's own login token), plus the agent's own key and endpoint when its config gives them."""
    key = agent.resolved_api_key()  # only an explicit api_key/api_key_env for cli/ models
    own_login = () if key or agent.base_url else cli.own_login_vars
    # By name and by value: another agent's api_key_env may be called anything, and a URL
    # with a password (the pool's Redis among them) is a credential whatever it is called.
    env = {name: value for name, value in os.environ.items()
           if name not in NESTING_VARS and name != POOL_URL_ENV
           and (name in PROXY_VARS or not carries_credential(value))
           and (not looks_secret(name) or name in own_login)}
    if not key and not agent.base_url:
        return env  # the CLI's own login
    # A self-hosted endpoint that needs no key still gets one, as with litellm: the CLIs
    # refuse to start without (and must not fall back to a key of the user's).
    key = key or PLACEHOLDER_KEY
    return env | cli.api_env(key, agent.base_url)


def render_prompt(messages: list[dict[str, Any]], *, with_system: bool) -> tuple[str, str]:
    """(system, prompt) for a CLI from our chat messages: one prompt per process, so a
    corrective retry is the first prompt, the reply it corrects, and the correction."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
    parts: list[str] = []
    for message in messages:
        content = str(message.get("content") or "")
        if message["role"] == "user":
            parts.append(content)
        elif message["role"] == "assistant":
            parts.append(f"<your_previous_reply>\n{content}\n</your_previous_reply>")
    prompt = "\n\n".join(parts)
    if with_system and system:
        prompt = f"<instructions>\n{system}\n</instructions>\n\n{prompt}"
    return system, prompt


class CliProvider:
    """A Provider whose agents are CLI processes; one process per call."""

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion:
        cli = CLIS[agent.cli or ""]
        executable = find_executable(cli)
        if executable is None:
            raise ProviderError(
                f"{agent.model}: the {cli.executable!r} command is not on PATH; install it "
                f"and log in, or set MASSGEN_{cli.name.upper()}_PATH", retryable=False,
                kind="unavailable")
        system, prompt = render_prompt(messages, with_system=not cli.system_flag)
        started = time.perf_counter()
        # The call's private folder: the CLI works in an empty ``work`` inside it; its
        # policy files and private home sit beside, out of its reach.
        with tempfile.TemporaryDirectory(prefix="massgen-cli-") as name:
            folder = Path(name)
            (folder / "work").mkdir()
            env = child_env(cli, agent)
            if cli.private_home is not None:
                env.update(cli.private_home(folder))
            argv = [executable, *cli.command(agent, system, folder)[1:]]
            code, stdout, stderr = await run_child(argv, prompt.encode(), folder / "work", env)
        stderr_text = tail(stderr.decode(errors="replace"), MAX_STDERR_BYTES)
        if context is not None and context.log_path is not None and stderr_text.strip():
            _append_log(context.log_path, agent.id, code, stderr_text)
        try:
            completion = cli.parse(stdout)
        except ProviderError as exc:
            if code == 0:
                raise
            raise ProviderError(f"{exc} (exit status {code}; stderr: "
                                f"{tail(stderr_text.strip(), ERROR_TAIL_CHARS)!r})",
                                retryable=exc.retryable, status_code=exc.status_code,
                                kind=exc.kind) from None
        return replace(completion, latency_s=time.perf_counter() - started)


def _append_log(path: Path, agent_id: str, code: int, text: str) -> None:
    # A log line must never fail a call.
    with contextlib.suppress(OSError), path.open("a", encoding="utf-8") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {agent_id} exit {code}\n")
        log.write(text if text.endswith("\n") else text + "\n")
