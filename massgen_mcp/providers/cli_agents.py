"""Coding-agent CLIs as team members: Claude Code, Codex and Gemini CLI, no API keys needed.

Many users have a coding CLI logged in to a subscription and no API key. An agent whose model is
``cli/claude``, ``cli/codex`` or ``cli/gemini`` (optionally ``cli/<name>/<model>``) runs that CLI
once per call: non-interactively, read-only, with our protocol's prompt on stdin, and its final
message parsed with the JSON decision format of models without tool calling (a garbled reply gets
the engine's corrective retry like any other).

Every call is one child process with:

* **read-only flags** (:data:`COMMANDS`): no built-in tool that edits, writes or runs commands,
  each CLI's own read-only/plan/sandbox mode on top, no session files;
* **no MCP servers of the user's** (it would start massgen-mcp inside massgen-mcp): an explicit
  empty MCP configuration, and the user's settings files are not read where the CLI allows it
  (Gemini CLI, which always reads them, gets a private home with a copy of its login);
* **a sanitised environment** (:func:`child_env`): the variables that tell a CLI it runs inside
  another agent session are removed, and so is every credential-named variable, except the CLI's
  own login token; an API key reaches the child only when the agent's config names one
  (``api_key``/``api_key_env``, with ``base_url`` for a self-hosted or test endpoint);
* **an owner and a clean kill** (:mod:`massgen_mcp.core.children`): cancellation, the per-call
  timeout (``cli_call_timeout_s``), or too much output kill everything the CLI started with
  SIGKILL, and the child is reaped; what it started is killed after a normal exit too, so no
  grandchild outlives the call: on Linux every descendant, even one that called ``setsid``
  or daemonized; on other platforms the CLI's process group;
* **captured stderr**: kept to its last 64 KiB, redacted, appended to the session's
  ``cli.log`` and quoted in the error when the CLI fails.

The working directory is an empty folder in the call's private temporary folder: the agents
answer from the question, the context and each other's answers. (The CLIs' own file tools
cannot be confined to a workspace or kept away from secret files: Codex's read-only sandbox
reads the whole disk.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from massgen_mcp.core import children
from massgen_mcp.core.edges import UnsafeJson, decode_json, load_json
from massgen_mcp.core.env import POOL_URL_ENV
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.secrets import carries_credential, looks_secret, redact
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import CallContext, Completion

MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # a JSON result with a long answer is far below this
MAX_STDERR_BYTES = 64 * 1024
ERROR_TAIL_CHARS = 600
EXIT_POLL_S = 0.2  # how often a call checks whether its CLI exited with its pipes still held
PIPE_GRACE_S = 2.0  # after the CLI exits, how long its output may keep coming

# Variables a CLI reads as "you are running inside another agent's session" (found in the
# binaries; Claude Code itself checks the same list to detect a parent agent). A child that sees
# them changes its behaviour or refuses to start.
# The way to the network the user set for every program, password or not: the CLI needs it
# to reach its provider.
PROXY_VARS = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                        "https_proxy", "all_proxy"})
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

# The key variable our self-hosted provider entry points Codex at (see _codex_command).
_CODEX_KEY_VAR = "MASSGEN_CLI_API_KEY"
PLACEHOLDER_KEY = "no-key-needed"


@dataclass(frozen=True)
class Cli:
    """One supported CLI: how to find it, run it read-only, and read its answer."""

    name: str  # as in the model string cli/<name>
    backend: str  # MassGen's backend type
    executable: str
    vendor: str
    own_login_vars: tuple[str, ...]  # the CLI's own credentials, passed through untouched
    # (agent, system prompt, the call's private folder) -> argv; may write files in the folder
    command: Callable[[AgentSpec, str, Path], list[str]]
    parse: Callable[[bytes], Completion]
    # Whether the CLI looks logged in, from where it keeps its login: files that exist, or a
    # non-secret account entry (never a token, never a network call).
    login_state: Callable[[], bool]
    system_flag: bool  # True: the system prompt goes in a flag, else at the top of the prompt
    # Prepares a private home in the call's folder where the CLI would otherwise run the user's
    # hooks or keep transcripts; returns the variables that point the CLI at it.
    private_home: Callable[[Path], dict[str, str]] | None = None


def _count(value: Any) -> int:
    """A token count from untrusted output: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strip_v1(url: str) -> str:
    """The API root of ``url``: Claude Code and Gemini CLI append their own /v1... paths."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


# -- Claude Code -----------------------------------------------------------------------------------

def _claude_command(agent: AgentSpec, system: str, folder: Path) -> list[str]:
    # The system prompt goes in a file: a command line is readable by every local user.
    (folder / "system.md").write_text(system, encoding="utf-8")
    argv = [
        "claude", "--print", "--output-format", "json",
        "--tools", "",  # no built-in tool at all: nothing to read, write or run
        "--permission-mode", "dontAsk", "--permission-prompts", "none",
        "--restricted",  # ignores user/project settings files (hooks, permissions)
        "--strict-mcp-config", "--mcp-config", '{"mcpServers": {}}',
        "--no-session-persistence", "--disable-slash-commands",
        "--append-system-prompt-file", str(folder / "system.md"),
    ]
    if agent.cli_model:
        argv.append(f"--model={agent.cli_model}")
    return argv


def _claude_parse(stdout: bytes) -> Completion:
    data = _json_object(stdout, "claude")
    if data.get("is_error") or data.get("subtype") != "success":
        status = data.get("api_error_status")
        raise ProviderError(
            f"claude: {str(data.get('result') or data.get('subtype'))[:300]}"
            f"{f' (HTTP {status})' if status else ''}",
            retryable=status in (429, 500, 502, 503, 529), status_code=status,
            kind="cli_error")
    usage = _mapping(data.get("usage"))
    prompt = sum(_count(usage.get(k)) for k in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    cost = data.get("total_cost_usd")
    # A price from untrusted output counts only if it is a real one: a negative or infinite
    # figure would defeat max_cost_usd.
    if (not isinstance(cost, int | float) or isinstance(cost, bool)
            or not math.isfinite(cost) or cost < 0):
        cost = None
    return Completion(content=str(data.get("result") or ""), prompt_tokens=prompt,
                      completion_tokens=_count(usage.get("output_tokens")),
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


# -- Codex -----------------------------------------------------------------------------------------

_CODEX_OFF = ("shell_tool", "unified_exec", "apps", "plugins", "hooks", "browser_use",
              "computer_use", "view_image", "multi_agent", "goals", "memories")


def _codex_command(agent: AgentSpec, system: str, folder: Path) -> list[str]:
    argv = [
        "codex", "exec", "--json", "--ephemeral", "--skip-git-repo-check",
        "--sandbox", "read-only",  # what its shell could do, were it on
        "--ignore-user-config", "--ignore-rules",  # no MCP servers, rules or hooks of the user's
        "-c", "mcp_servers={}", "-c", 'web_search="disabled"',
        "-c", 'approval_policy="never"',
    ]
    for feature in _CODEX_OFF:
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


def _codex_parse(stdout: bytes) -> Completion:
    text: str | None = None
    usage: dict[str, Any] = {}
    failure = ""
    for line in stdout.decode(errors="replace").splitlines():
        try:
            event = load_json(line)
        except UnsafeJson:
            continue
        if not isinstance(event, dict):
            continue
        item = _mapping(event.get("item"))
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            text = str(item.get("text") or "")
        elif event.get("type") == "turn.completed":
            usage = _mapping(event.get("usage"))
        elif event.get("type") == "turn.failed":
            failure = str(_mapping(event.get("error")).get("message") or "turn failed")
        elif event.get("type") == "error":
            failure = str(event.get("message") or "error")
    if text is None:
        raise ProviderError(f"codex gave no answer: {failure or 'no agent message'}"[:400],
                            retryable=False, kind="cli_error")
    return Completion(content=text, prompt_tokens=_count(usage.get("input_tokens")),
                      completion_tokens=_count(usage.get("output_tokens"))
                      + _count(usage.get("reasoning_output_tokens")))


def _codex_logged_in() -> bool:
    return (Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "auth.json").is_file()


# -- Gemini CLI ------------------------------------------------------------------------------------

# Gemini CLI's plan mode still lets the model write plan files and search the web; this policy
# (user tier, above plan mode's own rules) denies every tool that writes, runs or fetches.
_GEMINI_POLICY = """\
[[rule]]
toolName = ["write_file", "replace", "run_shell_command", "web_fetch", "google_web_search",
            "invoke_agent", "save_memory", "write_todos", "activate_skill", "exit_plan_mode",
            "enter_plan_mode", "update_topic", "ask_user"]
decision = "deny"
priority = 999
denyMessage = "Read-only panel member: this tool is not available."
"""


def _gemini_command(agent: AgentSpec, system: str, folder: Path) -> list[str]:
    policy = folder / ".massgen-policy.toml"
    policy.write_text(_GEMINI_POLICY)
    argv = [
        "gemini", "--output-format", "json",
        "--approval-mode", "plan",  # its read-only mode
        "--policy", str(policy),
        "--skip-trust",  # the working folder is our empty temporary one
        "--allowed-mcp-server-names", "massgen-none",  # no MCP server of the user's starts
        "--extensions", "none",
    ]
    if agent.cli_model:
        argv.append(f"--model={agent.cli_model}")
    return [*argv, "--prompt", ""]  # the prompt comes on stdin ("appended to stdin")


def _gemini_parse(stdout: bytes) -> Completion:
    data = _json_object(stdout, "gemini")
    if data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ProviderError(f"gemini reported an error: {str(message)[:300]}",
                            retryable=False, kind="cli_error")
    prompt = completion = 0
    for model in _mapping(_mapping(data.get("stats")).get("models")).values():
        tokens = _mapping(_mapping(model).get("tokens"))
        prompt += _count(tokens.get("prompt"))
        completion += _count(tokens.get("candidates")) + _count(tokens.get("thoughts"))
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
        auth = _mapping(_mapping(_mapping(settings).get("security")).get("auth"))
    keep = {k: v for k, v in auth.items() if k in ("selectedType", "enforcedType")}
    (private / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": keep}, "hooksConfig": {"enabled": False}}))
    return {"GEMINI_CLI_HOME": str(private)}


def _json_object(stdout: bytes, name: str) -> dict[str, Any]:
    """The JSON object a CLI printed last, on one line or many (some print warnings first):
    from the first line starting with '{' whose object runs to the end of the output."""
    text = stdout.decode(errors="replace")
    start = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("{"):
            with contextlib.suppress(UnsafeJson):
                value, end = decode_json(text, start)
                if isinstance(value, dict) and not text[end:].strip():
                    return value
        start += len(line)
    raise ProviderError(f"{name} printed no JSON result: {tail(text, 300)!r}",
                        retryable=False, kind="cli_error")


def tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text``, redacted before it is cut (a cut through a
    key would leave a piece that no longer matches it)."""
    return redact(text[-(chars + 4096):])[-chars:]


CLIS: dict[str, Cli] = {
    "claude": Cli("claude", "claude_code", "claude", "Anthropic", ("CLAUDE_CODE_OAUTH_TOKEN",),
                  _claude_command, _claude_parse, _claude_logged_in, system_flag=True),
    "codex": Cli("codex", "codex", "codex", "OpenAI", (), _codex_command, _codex_parse,
                 _codex_logged_in, system_flag=False),
    "gemini": Cli("gemini", "gemini_cli", "gemini", "Google", (), _gemini_command,
                  _gemini_parse, _gemini_logged_in, system_flag=False,
                  private_home=_gemini_home),
}


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
    if cli.name == "claude":
        env["ANTHROPIC_API_KEY"] = key
        if agent.base_url:
            env["ANTHROPIC_BASE_URL"] = _strip_v1(agent.base_url)
    elif cli.name == "codex":
        env[_CODEX_KEY_VAR if agent.base_url else "CODEX_API_KEY"] = key
    else:
        # Gemini CLI takes its auth method only from the user's settings
        # (security.auth.selectedType: gemini-api-key), never from a project or the call.
        env["GEMINI_API_KEY"] = key
        if agent.base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = _strip_v1(agent.base_url)
    return env


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


def find_executable(cli: Cli) -> str | None:
    """The CLI's path: ``MASSGEN_<NAME>_PATH`` if set (e.g. a pinned install), else PATH;
    None unless it is an executable file."""
    path = os.environ.get(f"MASSGEN_{cli.name.upper()}_PATH") or shutil.which(cli.executable)
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


@dataclass(frozen=True)
class FoundCli:
    name: str
    vendor: str
    path: str
    logged_in: bool


def find_clis() -> list[FoundCli]:
    """The supported CLIs on this machine, in :data:`CLIS` order (``MASSGEN_CLIS``, e.g.
    ``claude,codex`` or ``none``, limits which are looked for). A login held in the environment
    (Claude Code's ``CLAUDE_CODE_OAUTH_TOKEN``) counts; its value is not read."""
    wanted = os.environ.get("MASSGEN_CLIS", ",".join(CLIS)).replace(" ", "").split(",")
    return [found for name in CLIS if name in wanted and (found := look_for(name))]


def look_for(name: str) -> FoundCli | None:
    """The CLI ``name`` if it is installed, with whether it looks logged in."""
    cli = CLIS[name]
    path = find_executable(cli)
    if path is None:
        return None
    logged_in = cli.login_state() or any(os.environ.get(n) for n in cli.own_login_vars)
    return FoundCli(cli.name, cli.vendor, path, logged_in)


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


class OutputTooLarge(ProviderError):
    def __init__(self) -> None:
        super().__init__(f"the CLI printed more than {MAX_OUTPUT_BYTES // 1024 // 1024} MiB; "
                         "stopped", retryable=False, kind="cli_error")


async def run_child(argv: list[str], stdin: bytes, cwd: Path, env: dict[str, str]
                    ) -> tuple[int, bytes, bytes]:
    """Run ``argv`` in its own session (:func:`massgen_mcp.core.children.command`); (exit status,
    stdout, stderr tail).

    Whatever ends the call (the CLI's exit, cancellation, a timeout around this call, too much
    output) everything the CLI started is killed (:func:`massgen_mcp.core.children.stop`: on Linux
    every descendant, ``setsid`` or daemonized ones too; elsewhere its process group) and the
    CLI reaped before this returns. Output is read until the CLI exits and its pipes close; a
    pipe that something it started keeps open is given ``PIPE_GRACE_S`` after the exit, then
    abandoned."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *children.command(argv, env, cwd), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env,
            start_new_session=True)
    except (OSError, ValueError) as exc:  # not executable, or a NUL byte in an argument
        raise ProviderError(f"could not start {Path(argv[0]).name}: {exc}", retryable=False,
                            kind="unavailable") from None
    assert proc.stdin and proc.stdout and proc.stderr
    stdout, stderr = bytearray(), bytearray()
    parts = [asyncio.ensure_future(part) for part in (
        _feed(proc.stdin, stdin), _read(proc.stdout, stdout, MAX_OUTPUT_BYTES, strict=True),
        _read(proc.stderr, stderr, MAX_STDERR_BYTES + 4096, strict=False))]
    io = asyncio.gather(*parts)
    try:
        while not io.done():
            await asyncio.wait({io}, timeout=EXIT_POLL_S)
            if proc.returncode is not None and not io.done():
                await children.stop(proc)  # the CLI is gone: what it started goes too
                await asyncio.wait({io}, timeout=PIPE_GRACE_S)
                break
        if io.done():
            io.result()  # OutputTooLarge
        code = await proc.wait()  # at once: the exit status is known once the CLI is gone
    finally:
        for part in parts:  # a failed gather leaves its other parts running
            part.cancel()
        await asyncio.gather(*parts, return_exceptions=True)
        await children.stop(proc)
        # Read the pipes to their end (the tree is dead, so it comes at once) so that they
        # close now, not when the garbage collector finds them; a descendant that escaped
        # (possible only where descendants are not tracked) is given up on after the grace.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PIPE_GRACE_S):
                await asyncio.gather(_drain(proc.stdout), _drain(proc.stderr), proc.wait())
    return code, bytes(stdout), bytes(stderr)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
        stream.close()


async def _read(stream: asyncio.StreamReader, buffer: bytearray, limit: int, *,
                strict: bool) -> None:
    """Append ``stream`` to ``buffer``; past ``limit`` bytes either fail (``strict``) or keep
    the tail. The buffer keeps what came even if the read is cancelled."""
    while chunk := await stream.read(65536):
        buffer += chunk
        if len(buffer) > limit:
            if strict:
                raise OutputTooLarge()
            del buffer[:len(buffer) - limit]
