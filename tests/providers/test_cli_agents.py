"""Coding-agent CLIs as agents: the real Claude Code, Codex and Gemini CLI binaries (pinned in
tests/clients/package-lock.json), pointed at the scripted server, which speaks their wire APIs
(Anthropic Messages, OpenAI Responses, Gemini SSE). Nothing reaches the network.

The user's home is a temporary folder holding MCP configs for all three CLIs whose server would
touch a marker file: a CLI that loaded them would leave the marker behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.records import EventType, RequestRecord, RunStatus
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.base import Completion
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, text
from tests.coding_clis import (
    BIN,
    CANARY,
    _offered_tools,
    alive,
    cli_team,
    marked_processes,
    needs_clis,
    run,
    stand_in,
    tree_digest,
)
from tests.helpers import Scripted, by_model


@needs_clis
@pytest.mark.slow
async def test_claude_code_codex_gemini_and_an_api_model_reach_consensus(
        scripted: Scripted, user: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    server = scripted(agree)
    before = tree_digest(user["project"])
    scratch = user["home"].parent / "tmp"  # where the calls' temporary folders go
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    node_log = user["home"].parent / "node-starts.jsonl"  # every node process, as it starts
    counter = user["home"].parent / "count-node.js"
    counter.write_text("require('fs').appendFileSync(" + json.dumps(str(node_log)) + ", "
                       "JSON.stringify({pid: process.pid, ppid: process.ppid, "
                       "script: process.argv[1]}) + '\\n');\n")
    monkeypatch.setenv("NODE_OPTIONS", f"--require={counter}")
    result, folder, _store = await run(cli_team(server, ("claude", "codex", "gemini"), ("a",)))

    assert result.status is RunStatus.COMPLETED, result.errors
    assert result.agents["gemini"].status == "voted", result.agents["gemini"].dropped_reason
    assert {v.voter for v in result.votes} == {"claude", "codex", "gemini", "api_a"}
    assert {"claude", "codex"} <= {a.agent_id for a in result.answers}
    assert result.final_answer and result.final_answer.startswith("Final:")
    calls = server.calls_by_model()
    assert calls["scripted-claude"] >= 2 and calls["scripted-codex"] >= 2
    # Usage as each CLI reports it: Claude Code prices its calls, Codex and Gemini do not.
    usage = result.agents
    assert usage["claude"].usage.prompt_tokens > 0 and usage["claude"].usage.cost_usd is not None
    assert usage["codex"].usage.completion_tokens > 0 and usage["codex"].usage.cost_usd is None
    assert usage["gemini"].usage.prompt_tokens > 0
    # Read-only and nothing of the user's: no MCP server started, no file changed, no tool
    # that writes or runs commands offered, our key never sent, no temporary folder left.
    assert not user["marker"].exists()  # no MCP server, hook or discovery command ran
    assert not (user["home"] / ".gemini" / "tmp").exists()  # no transcript of our prompts
    assert tree_digest(user["project"]) == before
    assert list(scratch.iterdir()) == []
    for req in server.requests:
        if req.model.startswith("scripted-"):
            assert CANARY not in json.dumps(req.headers) + json.dumps(req.body)
            names = _offered_tools(req.body)
            # Only tools that read what the CLI may see (its empty temporary folder).
            assert names <= {"glob", "grep_search", "list_directory", "read_file",
                             "request_user_input"}, (req.model, names)
            assert "main.py" not in json.dumps(req.body)  # it never saw the project
    assert marked_processes(user["mark"]) == []
    assert (folder / "cli.log").exists()  # their stderr, redacted
    assert CANARY not in (folder / "cli.log").read_text()
    # Each Gemini CLI call is one node process: it does not relaunch itself (~1-3 s of CPU).
    starts = [json.loads(line) for line in node_log.read_text().splitlines()]
    gemini = [s for s in starts if "gemini" in (s["script"] or "")]
    assert gemini, starts
    pids = {s["pid"]: s["script"] for s in starts}
    assert not [s for s in gemini if pids.get(s["ppid"]) == s["script"]], gemini


@needs_clis
async def test_a_cli_that_hangs_is_timed_out_dropped_and_killed(
        scripted: Scripted, user: dict[str, Any]) -> None:
    seen = threading.Event()

    def hang(req: ChatRequest) -> Reply:
        seen.set()
        return Reply("text", content="never", delay_s=30)

    server = scripted(by_model(agree, **{"scripted-claude": hang}))
    team = cli_team(server, ("claude",), ("a", "b"), cli_call_timeout_s=4)
    store = SessionStore()
    runner = LocalExecutor(store, ProviderRouter())
    live = await runner.start(RequestRecord(question="What is 6*7?"), team)
    assert await asyncio.to_thread(seen.wait, 30)
    environ = _environ_of_claude(user["mark"])
    result = await live.task

    assert result.status is RunStatus.COMPLETED
    assert result.agents["claude"].status == "dropped"
    assert "no response within 4 s (cli_call_timeout_s)" in (
        result.agents["claude"].dropped_reason or "")
    assert server.calls_by_model()["scripted-claude"] == 1  # a timed-out CLI is not retried
    assert marked_processes(user["mark"]) == []
    # What the child was given: no nesting markers, none of our keys, a placeholder key for
    # the keyless endpoint.
    assert "CLAUDECODE" not in environ and "CLAUDE_CODE_ENTRYPOINT" not in environ
    assert CANARY not in environ.values()
    assert environ["ANTHROPIC_API_KEY"] == "no-key-needed"


def _environ_of_claude(mark: str) -> dict[str, str]:
    for pid, _ in marked_processes(mark):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"claude" in cmdline:
            pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
            return {k.decode(): v.decode(errors="replace") for k, v in pairs}
    raise AssertionError("the claude process was not found")


@needs_clis
async def test_cancel_kills_every_cli_at_once(scripted: Scripted, user: dict[str, Any]) -> None:
    waiting: set[str] = set()
    both = threading.Event()

    def hang(req: ChatRequest) -> Reply:
        waiting.add(req.model)
        if len(waiting) == 2:
            both.set()
        return Reply("text", content="never", delay_s=30)

    server = scripted(hang)
    store = SessionStore()
    runner = LocalExecutor(store, ProviderRouter())
    live = await runner.start(RequestRecord(question="What is 6*7?"),
                              cli_team(server, ("claude", "codex")))
    assert await asyncio.to_thread(both.wait, 30)
    assert len(alive(user["mark"])) >= 2  # codex is a node launcher and its native binary

    assert await runner.cancel(live.session_id)
    assert store.read_status(live.session_id).status is RunStatus.CANCELLED
    assert marked_processes(user["mark"]) == []  # none alive, no zombie


@needs_clis
async def test_a_cli_that_prints_garbage_gets_the_corrective_retry(
        scripted: Scripted, user: dict[str, Any]) -> None:
    def garbled_first(req: ChatRequest) -> Reply:
        if req.call_index == 0:
            return text("Sure! I would love to help with that question.")
        return agree(req)

    server = scripted(by_model(agree, **{"scripted-codex": garbled_first}))
    result, _folder, store = await run(cli_team(server, ("codex",), ("a",)))

    assert result.status is RunStatus.COMPLETED, result.errors
    assert "codex" in {a.agent_id for a in result.answers}
    invalid = [e for e in store.read_events(result.session_id)
               if e.type is EventType.INVALID_ACTION]
    assert [e.agent_id for e in invalid] == ["codex"]
    retry = [r for r in server.requests if r.model == "scripted-codex"][1]
    assert "<your_previous_reply>" in retry.user and "Sure! I would love" in retry.user


# -- discovery and the default team ------------------------------------------------------------

def log_in(user: dict[str, Any], *clis: str) -> None:
    """Leave the files a logged-in CLI keeps (a Claude Code OAuth login the real binary
    accepts, a Codex API-key login, a Gemini OAuth login), and no key in the project's .env."""
    (user["project"] / ".env").unlink()
    home = user["home"]
    if "claude" in clis:
        (home / ".claude").mkdir(exist_ok=True)
        (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {
            "accessToken": "sk-ant-oat01-" + "x" * 24, "refreshToken": "sk-ant-ort01-x",
            "expiresAt": 4_102_444_800_000, "scopes": ["user:inference"],
            "subscriptionType": "pro"}}))
    if "codex" in clis:
        (home / ".codex" / "auth.json").write_text('{"auth_mode": "apikey"}')
    if "gemini" in clis:
        (home / ".gemini" / "oauth_creds.json").write_text("{}")


@needs_clis
async def test_logged_in_clis_make_the_default_team_when_there_are_no_keys(
        user: dict[str, Any], nothing_available: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.team.discover import discover

    monkeypatch.setenv("MASSGEN_CLIS", "claude,codex,gemini")
    log_in(user, "claude", "codex")
    found = await discover()
    assert found.source == "coding-agent CLIs"
    assert found.team is not None
    assert [a.model for a in found.team.agents] == ["cli/claude", "cli/codex", "cli/claude"]
    assert found.team.options.timeout_s == 1800
    assert [(c.name, c.logged_in) for c in found.clis] == [
        ("claude", True), ("codex", True), ("gemini", False)]

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-" + "k" * 30)  # keys win; CLIs listed
    found = await discover()
    assert found.source == "keys" and len(found.clis) == 3


@needs_clis
def test_doctor_lists_the_clis_and_whether_each_is_logged_in(
        user: dict[str, Any], nothing_available: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.cli.main import main

    monkeypatch.setenv("MASSGEN_CLIS", "claude,gemini")
    log_in(user, "claude")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"cli/claude 2.1.330 (logged in, {BIN['claude']})" in out
    assert f"cli/gemini 0.61.0 (not logged in, {BIN['gemini']})" in out
    assert "default team:  cli/claude, cli/claude, cli/claude" in out
    assert "sk-ant-oat01" not in out


@needs_clis
@pytest.mark.slow
def test_massgen_mcp_run_with_no_keys_uses_the_logged_in_cli(
        scripted: Scripted, user: dict[str, Any], nothing_available: None, home: Path) -> None:
    """The whole path as a user meets it: no API key, Claude Code logged in (its API root is
    the scripted server, as a proxy setting would make it), `massgen-mcp run` answers."""
    server = scripted(agree)
    log_in(user, "claude")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(MASSGEN_CLIS="claude", ANTHROPIC_BASE_URL=server.base_url.removesuffix("/v1"))
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "run", "What is 6*7?"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Final: The answer from" in done.stdout
    assert "default team (coding-agent CLIs)" in done.stderr
    assert server.calls_by_model()  # every call went to the CLI's API root
    assert all(r.headers.get("authorization", "").startswith("Bearer sk-ant-oat01")
               for r in server.requests)  # its own login, not a key of ours


# -- without the binaries: config, output parsing, the child's environment ----------------------

@pytest.mark.parametrize(("model", "message"), [
    ("cli/cursor", "with <name> one of claude, codex, gemini"),
    ("cli/codex/--dangerously-bypass-approvals-and-sandbox", "cli/<name>/<model>"),
    ("cli/claude/opus/x", "cli/<name>/<model>"),
    ("cli/claude/", "cli/<name>/<model>"),
])
def test_a_bad_cli_model_string_names_the_fix(model: str, message: str) -> None:
    """As a config file loads (the shape is AgentSpec's, the names the cli/ row's)."""
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.team.massgen_yaml import team_from_mapping

    with pytest.raises(ConfigError, match=re.escape(message)):
        team_from_mapping({"agents": [{"id": "a", "backend": {"model": model}}]})


async def test_a_cli_name_none_runs_is_refused_by_preflight_on_any_path() -> None:
    """A team that reached the door without a loader (a record read back) is refused before
    its run, by name, not by a KeyError of the CLI catalog: the ground floor checks only the
    shape of cli/<name>."""
    from massgen_mcp.providers import preflight

    team = build_team({"agents": [{"id": "a", "model": "cli/cursor"}]})
    for refusals in (await preflight.here(team), await preflight.anywhere(team)):
        assert [r.text for r in refusals] == [
            "agents[0].model: model 'cli/cursor': a coding-agent CLI is cli/<name> or "
            "cli/<name>/<model>, with <name> one of claude, codex, gemini"]
    # And a run that never asked (a worker reading the record) loses the agent, by name.
    from massgen_mcp.core.errors import ErrorKind, ProviderError
    from massgen_mcp.providers.cli.provider import CliProvider

    with pytest.raises(ProviderError, match="cli/cursor: no such coding-agent CLI") as info:
        await CliProvider().complete(team.agents[0], [{"role": "user", "content": "hi"}],
                                     tools=None, timeout_s=5)
    assert info.value.kind is ErrorKind.UNAVAILABLE


def test_sampling_settings_on_a_cli_agent_are_refused_by_name() -> None:
    from massgen_mcp.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"agents\[0\]: temperature: not available for a "
                                          r"coding-agent CLI agent"):
        build_team({"agents": [{"id": "a", "model": "cli/codex", "temperature": 0.5}]})


def test_massgen_cli_backend_configs_load_with_warnings(tmp_path: Path) -> None:
    from massgen_mcp.team.massgen_yaml import team_from_mapping

    team, warnings = team_from_mapping({"agents": [
        {"id": "cc", "backend": {"type": "claude_code", "model": "sonnet", "cwd": "ws",
                                 "permission_mode": "bypassPermissions",
                                 "append_system_prompt": "Be brief.",
                                 "allowed_tools": ["Read", "Bash"]}},
        {"id": "cx", "backend": {"type": "codex"}},
        {"id": "gm", "system_message": "Be kind.", "backend": {"type": "gemini_cli",
                                                               "model": "gemini-2.5-pro"}},
    ]})
    assert [a.model for a in team.agents] == ["cli/claude/sonnet", "cli/codex",
                                              "cli/gemini/gemini-2.5-pro"]
    assert team.agents[0].system_message == "Be brief."
    assert team.agents[2].system_message == "Be kind."
    assert any("agents[0].backend.cwd: ignored (the CLI runs in an empty temporary folder"
               in w for w in warnings)
    assert any("permission_mode: ignored (the CLI always runs in its read-only mode)" in w
               for w in warnings)
    assert any("allowed_tools: ignored" in w for w in warnings)


def test_each_cli_output_is_parsed_with_its_usage_and_errors_are_named() -> None:
    from massgen_mcp.core.errors import ProviderError
    from massgen_mcp.providers.cli.catalog import CLIS

    claude = CLIS["claude"].parse(json.dumps({
        "type": "result", "subtype": "success", "is_error": False, "result": '{"action": 1}',
        "total_cost_usd": 0.0123, "usage": {"input_tokens": 10, "cache_read_input_tokens": 90,
                                            "cache_creation_input_tokens": 5,
                                            "output_tokens": 7}}).encode())
    assert (claude.content, claude.prompt_tokens, claude.completion_tokens,
            claude.cost_usd) == ('{"action": 1}', 105, 7, 0.0123)
    with pytest.raises(ProviderError, match=r"claude: Not logged in .*\(HTTP 401\)"):
        CLIS["claude"].parse(json.dumps({"type": "result", "subtype": "success",
                                         "is_error": True, "result": "Not logged in",
                                         "api_error_status": 401}).encode())

    codex = CLIS["codex"].parse(b"\n".join(json.dumps(e).encode() for e in [
        {"type": "thread.started"},
        {"type": "item.completed", "item": {"type": "reasoning", "text": "hmm"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "draft"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "final"}},
        {"type": "turn.completed", "usage": {"input_tokens": 40, "output_tokens": 6,
                                             "reasoning_output_tokens": 4}}]))
    assert (codex.content, codex.prompt_tokens, codex.completion_tokens,
            codex.cost_usd) == ("final", 40, 10, None)
    with pytest.raises(ProviderError, match="codex gave no answer: usage limit reached"):
        CLIS["codex"].parse(json.dumps({"type": "turn.failed", "error": {
            "message": "usage limit reached"}}).encode())

    # stream-json: output_tokens leave out the thinking (2), the total keeps it
    gemini = CLIS["gemini"].parse(b"Loaded cached credentials.\n" + b"\n".join(
        json.dumps(e).encode() for e in [
            {"type": "message", "role": "assistant", "content": "o", "delta": True},
            {"type": "message", "role": "assistant", "content": "k", "delta": True},
            {"type": "result", "status": "success", "stats": {
                "input_tokens": 30, "output_tokens": 5, "total_tokens": 37}}]))
    assert (gemini.content, gemini.prompt_tokens, gemini.completion_tokens) == ("ok", 30, 7)
    with pytest.raises(ProviderError, match="gemini printed no result: 'Segmentation fault"):
        CLIS["gemini"].parse(b"Segmentation fault")


def test_the_child_environment_keeps_the_login_and_drops_keys_and_nesting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.core.secrets import register_secret
    from massgen_mcp.providers.cli.catalog import CLIS
    from massgen_mcp.providers.cli.environment import child_env

    vendor_keys = {"ANTHROPIC_API_KEY": "sk-ant-api03-" + "a" * 24, "OPENAI_API_KEY": CANARY,
                   "CODEX_API_KEY": "sk-codex-" + "c" * 24, "GEMINI_API_KEY": "AIza" + "g" * 35}
    for name, value in vendor_keys.items():
        monkeypatch.setenv(name, value)
    # An API agent of the same vendor resolved it: registered for redaction, still Claude's.
    register_secret(vendor_keys["ANTHROPIC_API_KEY"])
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-" + "s" * 20)
    monkeypatch.setenv("MASSGEN_REDIS_URL", "redis://:pool-pw-" + "p" * 12 + "@127.0.0.1:6379")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-" + "o" * 20)
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("CODEX_SANDBOX", "seatbelt")
    monkeypatch.setenv("GEMINI_CLI", "1")
    monkeypatch.setenv("LANG", "C.UTF-8")
    own = {"claude": {"CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY"},
           "codex": {"OPENAI_API_KEY", "CODEX_API_KEY"}, "gemini": {"GEMINI_API_KEY"}}
    for name, mine in own.items():
        env = child_env(CLIS[name], AgentSpec(id="a", model=f"cli/{name}"))
        # Its own login and its own vendor's key, as in the user's shell; nothing else secret.
        assert {n for n in (*vendor_keys, "CLAUDE_CODE_OAUTH_TOKEN") if n in env} == mine
        assert all(env[n] == os.environ[n] for n in mine)
        for gone in ("MY_SERVICE_TOKEN", "MASSGEN_REDIS_URL", "CLAUDECODE", "CODEX_SANDBOX",
                     "GEMINI_CLI"):
            assert gone not in env
        assert not [v for v in env.values() if "pool-pw-" in v]
        assert env["LANG"] == "C.UTF-8"

    # A key only when the agent's config asks for one, under the name the CLI reads, and then
    # none of the user's.
    monkeypatch.setenv("TEAM_CODEX_KEY", "sk-team-" + "t" * 20)
    asked = child_env(CLIS["codex"], AgentSpec(id="b", model="cli/codex",
                                               api_key_env="TEAM_CODEX_KEY"))
    assert asked["CODEX_API_KEY"] == "sk-team-" + "t" * 20 and "TEAM_CODEX_KEY" not in asked
    assert "OPENAI_API_KEY" not in asked


# Credentials a coding CLI must not inherit whatever they are called: by a name beyond *KEY*,
# *TOKEN*, *SECRET*, *PASSWORD*, or by a value shaped like a known token.
HIDDEN_CREDENTIALS = {
    "REDISCLI_AUTH": "redis-auth-" + "r" * 16,
    "DB_PASS": "hunter2-hunter2",
    "SMTP_PASSWD": "mail-pw-" + "m" * 10,
    "GPG_PASSPHRASE": "correct horse battery staple",
    "SENTRY_DSN": "https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/1",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=abc",
    "GITHUB_CLONE": "ghp_" + "G" * 36,
    "CI_GITLAB": "glpat-" + "l" * 20,
    "NOTIFY": "xoxb-" + "1234567890-" * 3,
    "AWS_ID": "AKIA" + "ABCDEFGHIJKLMNOP",
    "HUB": "hf_" + "h" * 34,
    "REGISTRY": "npm_" + "n" * 36,
    "OPENAI_ALT": "sk-proj-" + "o" * 30,
    "SESSION_JWT_VALUE": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
    "DEPLOY_KEY_PEM": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n",
    "REMOTE": "https://" + "t" * 40 + "@git.example.com/repo.git",
    "HEADER": "Bearer " + "b" * 30,
}
HARMLESS = {"PWD": "/work/project", "OLDPWD": "/work", "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
            "PASSENGER_APP_ENV": "production", "AUTHOR_NAME": "Ada", "SESSIONNAME": "Console",
            "GIT_ASKPASS": "/usr/bin/ksshaskpass", "EDITOR": "vim",
            "HOMEBREW_URL": "https://github.com/Homebrew/brew"}


def test_the_child_environment_drops_credentials_by_name_and_by_shape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.providers.cli.catalog import CLIS
    from massgen_mcp.providers.cli.environment import child_env

    for name, value in {**HIDDEN_CREDENTIALS, **HARMLESS}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-pw@proxy.example:3128")
    for cli in CLIS.values():
        env = child_env(cli, AgentSpec(id="a", model=f"cli/{cli.name}"))
        assert sorted(set(HIDDEN_CREDENTIALS) & set(env)) == []
        assert {name: env.get(name) for name in HARMLESS} == HARMLESS
        assert env["HTTPS_PROXY"].startswith("http://user:")  # the way out, as the user set it


# -- process handling, with small stand-in CLIs ---------------------------------------------------

LEAKED = "sk-leaked-" + "q" * 30


def claude_result(text: str = '{"action": "new_answer", "content": "42"}') -> str:
    return json.dumps({"type": "result", "subtype": "success", "is_error": False,
                       "result": text, "usage": {"input_tokens": 3, "output_tokens": 2}})


async def call_stand_in(log: Path | None = None) -> Completion:
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.providers.base import CallContext
    from massgen_mcp.providers.cli.provider import CliProvider

    spec = AgentSpec(id="c", model="cli/claude")
    return await CliProvider().complete(
        spec, [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        tools=None, timeout_s=60, context=CallContext("sid", log))


async def test_stderr_goes_to_cli_log_with_keys_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.core.secrets import register_secret

    register_secret(LEAKED)
    # A key at the very end of 100 KiB of stderr: cut to its last 64 KiB, it must still be
    # masked whole, not left as a fragment.
    stand_in(tmp_path, monkeypatch, f"sys.stderr.write('x' * 100_000 + ' {LEAKED}')\n"
                                    f"print({claude_result()!r})")
    log = tmp_path / "cli.log"
    completion = await call_stand_in(log)
    assert completion.content == '{"action": "new_answer", "content": "42"}'
    text = log.read_text()
    assert "exit 0" in text and text.rstrip().endswith("***") and "sk-leaked" not in text


async def test_a_grandchild_holding_the_output_open_does_not_hold_the_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "grandchild.pid"
    stand_in(tmp_path, monkeypatch,
             f"child = subprocess.Popen(['sleep', '300'])\n"  # inherits stdout
             f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
             f"print({claude_result()!r}, flush=True)")
    completion = await call_stand_in()
    assert completion.content and "42" in completion.content
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or (
        Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z")


async def test_too_much_output_stops_the_cli(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.core.errors import ProviderError

    stand_in(tmp_path, monkeypatch, "sys.stdout.write('y' * 9_000_000)")
    with pytest.raises(ProviderError, match="printed more than 8 MiB"):
        await call_stand_in()


async def test_a_cli_that_is_missing_is_an_error_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.core.errors import ProviderError

    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(tmp_path / "missing"))
    with pytest.raises(ProviderError, match="'claude' command is not on PATH"):
        await call_stand_in()


def test_hostile_cli_output_is_read_safely() -> None:
    from massgen_mcp.providers.cli.catalog import CLIS

    odd = CLIS["claude"].parse(json.dumps({
        "type": "result", "subtype": "success", "result": "ok", "total_cost_usd": -1e308,
        "usage": {"input_tokens": "lots", "output_tokens": True}}).encode())
    assert (odd.prompt_tokens, odd.completion_tokens, odd.cost_usd) == (0, 0, None)
    assert CLIS["claude"].parse(json.dumps({"type": "result", "subtype": "success",
                                            "result": "ok", "usage": [1]}).encode()
                                ).prompt_tokens == 0
    # Gemini prints warnings among its events sometimes: they are not events.
    printed = "Warning: 256-color support not detected.\n" + "\n".join(json.dumps(e) for e in [
        {"type": "message", "role": "assistant", "content": "the answer"},
        {"type": "result", "status": "success", "stats": {"models": {}}, "nested": {}}])
    assert CLIS["gemini"].parse(printed.encode()).content == "the answer"
