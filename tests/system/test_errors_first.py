"""Errors before a run, all at once: a mistyped model string, a server that takes no
connection, and every problem of a config file are each one clear message, from the CLI and
from the MCP tools alike, before a session folder exists."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp.client.transports import FastMCPTransport

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ConfigError, ProviderError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.records import RequestRecord, RunStatus
from massgen_mcp.core.spec import RunSpec, build_team
from massgen_mcp.executors.local import LocalExecutor, local_executor
from massgen_mcp.pool.executor import PoolExecutor
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm, map_error
from massgen_mcp.providers.model_names import LITELLM_PROVIDERS
from massgen_mcp.providers.preflight import model_strings
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.server.app import create_server
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import agree
from tests.helpers import FAST, Scripted, text_of, unused_port
from tests.pool_harness import REDIS, Pool, follow, record
from tests.servers import server_env

McpClient = Client[FastMCPTransport]
HI = [{"role": "user", "content": "hi"}]


def cli(home: Path, *args: str, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "massgen_mcp", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120, env=server_env(home, **(env or {})))


def refused(done: subprocess.CompletedProcess[str], home: Path) -> str:
    """Exit 1, no traceback, no litellm text, and nothing written under the home folder."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "litellm" not in done.stderr, done.stderr
    assert not home.exists() or list(home.rglob("*")) == [], list(home.rglob("*"))
    return done.stderr


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[McpClient]:
    async with Client(create_server(root=tmp_path)) as c:
        yield c


async def tool_error(client: McpClient, home: Path, **args: object) -> str:
    """run_consensus's error text; fails if the call started a run or wrote anything."""
    result = await client.call_tool("run_consensus", {"question": "q", **args},
                                    raise_on_error=False)
    assert result.is_error, result
    assert not home.exists() or list(home.rglob("*")) == [], list(home.rglob("*"))
    return text_of(result.content[0])


# -- model strings ----------------------------------------------------------------------------

MISTYPED = [
    ("opnai/gpt-4o-mini", "models[0]: unknown provider 'opnai' in 'opnai/gpt-4o-mini'; "
                          "did you mean 'openai/gpt-4o-mini'?"),
    ("gpt4o", "models[0]: cannot tell which provider serves 'gpt4o'; "
              "did you mean 'gpt-4o'?"),
    ("claude/claude-sonnet-4-5", "did you mean 'anthropic/claude-sonnet-4-5'?"),
    ("grok-3", "did you mean 'xai/grok-3'?"),
]


@pytest.mark.parametrize(("model", "message"), MISTYPED)
def test_a_mistyped_model_is_named_with_a_suggestion_by_the_cli(home: Path, model: str,
                                                                message: str) -> None:
    started = time.monotonic()
    err = refused(cli(home, "run", "q", "--models", model), home)
    assert message in err
    assert time.monotonic() - started < 20  # no litellm import, no call: only the check


async def test_a_mistyped_model_is_named_by_the_mcp_tool(client: McpClient, home: Path) -> None:
    for model, message in MISTYPED:
        assert message in await tool_error(client, home, models=[model])


def test_the_model_check_knows_what_litellm_knows() -> None:
    """The provider names are a copy (litellm is not imported to check a string): the copy
    must be litellm's list, and strings litellm routes must pass while ones it cannot fail."""
    litellm = load_litellm()
    known = {str(getattr(p, "value", p)) for p in litellm.provider_list}
    assert known <= LITELLM_PROVIDERS, (
        f"litellm routes providers the copy in providers/model_names.py lacks: "
        f"{sorted(known - LITELLM_PROVIDERS)}")
    for model in ("gpt-4o-mini", "o3-mini", "claude-haiku-4-5", "openai/anything",
                  "hosted_vllm/qwen", "ollama_chat/llama3", "ft:gpt-4o-mini:org::x",
                  "opnai/gpt-4o-mini", "gpt4o", "llama3"):
        try:
            litellm.get_llm_provider(model=model)
            routed = True
        except litellm.exceptions.BadRequestError:
            routed = False
        accepted = not model_strings(build_team({"agents": [{"id": "a", "model": model}]}))
        assert accepted == routed, model


def test_litellm_s_links_survive_its_prefix_being_cut() -> None:
    litellm = load_litellm()
    exc = litellm.exceptions.BadRequestError(
        "Learn more: https://docs.litellm.ai/docs/providers", model="x", llm_provider="y")
    message = str(map_error(exc, litellm))
    assert "https://docs.litellm.ai/docs/providers" in message and "docs.ai" not in message
    assert "litellm.BadRequestError" not in message


# -- servers that take no connection -----------------------------------------------------------


def unreachable_cases(plain_http_port: int) -> list[tuple[list[str], dict[str, str], str]]:
    """(models, environment, the message) for each way a server can be out of reach."""
    port = unused_port()
    return [
        ([f"openai/a@http://127.0.0.1:{port}/v1"], {},
         f"cannot reach http://127.0.0.1:{port}/v1 (connection refused: nothing is listening "
         "there); start the server there, or fix base_url (agent agent_a, openai/a)"),
        (["openai/a@http://nothing.invalid:8000/v1"], {},
         "cannot reach http://nothing.invalid:8000/v1 (the host name does not resolve); start "
         "the server there, or fix base_url (agent agent_a, openai/a)"),
        ([f"openai/a@https://127.0.0.1:{plain_http_port}/v1"], {},
         f"cannot reach https://127.0.0.1:{plain_http_port}/v1 (the TLS handshake failed: it "
         "speaks plain HTTP; use http://); fix base_url (agent agent_a, openai/a)"),
        (["ollama/llama3"], {"OLLAMA_API_BASE": f"http://127.0.0.1:{port}"},
         f"cannot reach Ollama at http://127.0.0.1:{port} (connection refused: nothing is "
         "listening there); start it (ollama serve) and pull the model (ollama pull llama3), "
         "or set OLLAMA_API_BASE to where it runs"),
        ([f"openai/a@http://user:pw-in-url-123@127.0.0.1:{port}/v1?api_key=sk-in-query-456"],
         {}, f"cannot reach http://***@127.0.0.1:{port}/v1?api_key=*** (connection refused"),
    ]


def test_an_unreachable_server_is_named_by_the_cli_before_the_run(home: Path,
                                                                   scripted: Scripted) -> None:
    for models, env, message in unreachable_cases(scripted(agree).port):
        err = refused(cli(home, "run", "q", "--models", ",".join(models), env=env), home)
        assert message in err, err
        assert "pw-in-url-123" not in err and "sk-in-query-456" not in err


async def test_an_unreachable_server_is_named_by_the_mcp_tool(
        client: McpClient, home: Path, scripted: Scripted,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's call names no server the run probes ahead (that would map which hosts and
    ports are open: tests/providers/test_endpoints.py); Ollama's address is the user's own
    setting."""
    for models, env, message in unreachable_cases(scripted(agree).port):
        if not models[0].startswith("ollama/"):
            continue
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        text = await tool_error(client, home, models=models)
        assert message in text and "pw-in-url-123" not in text, text


def test_validate_warns_about_servers_that_take_no_connection(home: Path,
                                                               tmp_path: Path) -> None:
    port = unused_port()
    (tmp_path / "team.yaml").write_text(
        "agents:\n"
        f"  - {{id: local, backend: {{type: chatcompletion, model: qwen, "
        f"base_url: 'http://127.0.0.1:{port}/v1'}}}}\n"
        f"  - {{id: llama, backend: {{type: ollama, model: llama3.2, "
        f"base_url: 'http://127.0.0.1:{port}'}}}}\n")
    done = cli(home, "validate", "team.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if "warning" in line] == [
        f"  warning: cannot reach http://127.0.0.1:{port}/v1 (connection refused: nothing is "
        "listening there); start the server there, or fix base_url (agent local, openai/qwen)",
        f"  warning: cannot reach Ollama at http://127.0.0.1:{port} (connection refused: "
        "nothing is listening there); start it (ollama serve) and pull the model (ollama pull "
        "llama3.2), or fix base_url (agent llama)"]


async def test_a_refused_connection_is_refused_at_once(home: Path, scripted: Scripted) -> None:
    """The check costs a healthy run one local connect, and a refused one well under a
    second; a run to a healthy server goes on as before."""
    server = scripted(agree)
    router = ProviderRouter()
    dead = AgentSpec(id="a", model="openai/a", base_url=f"http://127.0.0.1:{unused_port()}/v1")
    started = time.monotonic()
    [problem] = await router.unreachable(build_team({"agents": [dead.model_dump()]}))
    assert time.monotonic() - started < 0.5 and "connection refused" in problem
    healthy = build_team({"agents": [{"id": "b", "model": "openai/b",
                                      "base_url": server.base_url}]})
    assert await router.unreachable(healthy) == []


async def test_every_reason_a_run_may_not_start_is_named_at_once(
        home: Path, tmp_path: Path, nothing_available: None) -> None:
    """One preflight, one error, before any record: a key that is not set, a folder outside
    the workspace and a server that takes no connection (each used to hide the ones checked
    after it). A ConfigError, as the first failing check's was, not EndpointUnreachableError."""
    port = unused_port()
    service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
    with pytest.raises(ConfigError) as info:
        await service.start(RunSpec(
            question="q", models=["anthropic/claude-haiku-4-5",
                                  f"openai/a@http://127.0.0.1:{port}/v1"],
            options=RunOptions(workspace_tools=True, context_paths=["../elsewhere"])))
    assert type(info.value) is ConfigError
    said = str(info.value)
    assert "context_paths: '../elsewhere' is not a file or folder inside the workspace" in said
    assert ("missing API keys:\nagent 'agent_a' (anthropic/claude-haiku-4-5): set "
            "ANTHROPIC_API_KEY") in said
    assert (f"cannot reach http://127.0.0.1:{port}/v1 (connection refused: nothing is "
            "listening there)") in said
    assert not home.exists() or list(home.rglob("*")) == [], list(home.rglob("*"))


async def test_only_a_run_in_this_process_probes_its_servers_first(home: Path,
                                                                   tmp_path: Path) -> None:
    """The local executor probes a server the person named (not one a model's call chose);
    a pool's front end does not (its workers' network is the one that counts). Both name a
    model string no provider serves, by its field, before a record exists."""
    store = SessionStore(home)
    here = local_executor(store)
    pool = PoolExecutor(store, PoolConfig("redis://127.0.0.1:6379/0"))  # never opened
    dead = build_team({"agents": [{"id": "a", "model": "openai/a",
                                   "base_url": f"http://127.0.0.1:{unused_port()}/v1"}]})
    [refusal] = await here.preflight(dead, workspace=tmp_path, probe_base_urls=True)
    assert refusal.unreachable and "(connection refused: nothing is listening there)" in (
        refusal.text)
    assert await here.preflight(dead, workspace=tmp_path, probe_base_urls=False) == []
    assert await pool.preflight(dead, workspace=tmp_path, probe_base_urls=True) == []
    typo = build_team({"agents": [{"id": "a", "model": "opnai/gpt-4o-mini"}]})
    for executor in (here, pool):
        [refusal] = await executor.preflight(typo, workspace=tmp_path, probe_base_urls=True)
        assert not refusal.unreachable and refusal.text == (
            "agents[0].model: unknown provider 'opnai' in 'opnai/gpt-4o-mini'; did you mean "
            "'openai/gpt-4o-mini'?")
    assert not store.sessions_dir.exists() or list(store.sessions_dir.iterdir()) == []


async def test_on_a_worker_the_first_call_fails_at_once_with_the_url(
        home: Path, scripted: Scripted) -> None:
    """A pool's front end does not probe (its worker may see another network): the worker's
    first call reports the URL and is not retried; a server that answered before and then
    went away is retried as a blip."""
    provider = LiteLLMProvider()
    server = scripted(agree)
    warm = AgentSpec(id="w", model="openai/w", base_url=server.base_url)
    await provider.complete(warm, HI, tools=None, timeout_s=10)  # litellm's first-call setup
    port = unused_port()
    dead = AgentSpec(id="a", model="openai/a", base_url=f"http://127.0.0.1:{port}/v1")
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        await provider.complete(dead, HI, tools=None, timeout_s=10)
    assert time.monotonic() - started < 1
    assert not info.value.retryable and info.value.kind == "unreachable"
    # At run time nobody knows who chose the URL: one line without the why (no port-scan
    # oracle for a model's call; tests/providers/test_endpoints.py).
    assert str(info.value) == (f"cannot reach http://127.0.0.1:{port}/v1; start the server "
                               "there, or fix base_url (agent a, openai/a)")

    once = await asyncio.start_server(answer_once, "127.0.0.1", 0)
    alive = AgentSpec(id="b", model="openai/b",
                      base_url=f"http://127.0.0.1:{once.sockets[0].getsockname()[1]}/v1")
    await provider.complete(alive, HI, tools=None, timeout_s=10)
    once.close()
    await once.wait_closed()
    with pytest.raises(ProviderError) as info:
        await provider.complete(alive, HI, tools=None, timeout_s=10)
    assert info.value.retryable and "cannot reach" in str(info.value)

    # The whole run, as a worker runs it (LocalExecutor, not the service): failed in well
    # under the 7 s of backoff it used to spend, with the URL in its errors.
    store = SessionStore(home)
    team = build_team({"agents": [dead.model_dump()], "options": {**FAST,
                                                                  "retry_backoff_s": 1.0}})
    started = time.monotonic()
    live = await LocalExecutor(store, ProviderRouter()).start(RequestRecord(question="q"), team)
    result = await live.task
    assert time.monotonic() - started < 3
    assert result.status is RunStatus.FAILED
    assert any(f"cannot reach http://127.0.0.1:{port}/v1" in e for e in result.errors)
    assert not any("InternalServerError" in e for e in result.errors), result.errors


@pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                    reason="redis-server is not installed")
async def test_in_a_pool_the_worker_names_the_unreachable_server(tmp_path: Path,
                                                                 home: Path) -> None:
    """The front end checks model strings (no network needed) but does not probe servers: the
    worker's network is the one that counts. Its first call fails at once, with the URL."""
    pool = Pool(tmp_path, home)
    try:
        front = pool.front_end()
        pool.worker()
        pool.wait_workers(1)
        port = unused_port()
        async with Client(f"{front}/mcp") as client:
            refused = await client.call_tool("run_consensus", {
                "question": "q", "models": ["opnai/gpt-4o-mini"]}, raise_on_error=False)
            assert refused.is_error and "did you mean 'openai/gpt-4o-mini'?" in text_of(
                refused.content[0])
            assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())
            started = time.monotonic()
            handle = (await client.call_tool("run_consensus", {
                "question": "q", "models": [f"openai/a@http://127.0.0.1:{port}/v1"],
                "options": {"retry_backoff_s": 1.0}})).structured_content
        status = await follow(front, handle["session_id"])
        assert time.monotonic() - started < 10  # the backoff alone was 1 + 2 + 4 s
        assert status["status"] == "failed"
        result, events = record(home, handle["session_id"])
        assert any(f"cannot reach http://127.0.0.1:{port}/v1; start the server there" in e
                   for e in result["errors"]), result["errors"]
        assert not [e for e in events if e["type"] == "retry"], "it is not retried"
    finally:
        pool.close()


async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One chat completion, then the connection closes (a server that stops after it)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "b",
                       "choices": [{"index": 0, "finish_reason": "stop", "message": {
                           "role": "assistant", "content": "hi"}}]}).encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


# -- config files -------------------------------------------------------------------------------

BAD = """\
agents:
  - id: a
    backend: {type: openai, model: gpt-4o-mini, temprature: 0.3}
  - id: b
    backend: {model: opnai/gpt-4o-mini, temperature: 5}
  - id: c
    backend: {model: gpt4o}
orchestrator:
  max_new_answers_per_agent: 0
  coordination_mode: decomposition
timeout_settings: {orchestrator_timeout_seconds: -1}
"""
BAD_LINES = [
    "bad.yaml: agents[0].backend.temprature: unknown key; did you mean 'temperature'?",
    "bad.yaml: agents[1].backend.model: unknown provider 'opnai' in 'opnai/gpt-4o-mini'; did "
    "you mean 'openai/gpt-4o-mini'?",
    "bad.yaml: agents[1].backend.temperature: Input should be less than or equal to 2",
    "bad.yaml: agents[2].backend.model: cannot tell the provider of model 'gpt4o'; did you "
    "mean 'gpt-4o'? Or set backend.type (e.g. type: openai) or write the model as "
    "provider/model",
    "bad.yaml: orchestrator.coordination_mode: 'decomposition' is not supported; massgen-mcp "
    "implements 'voting'",
    "bad.yaml: orchestrator.max_new_answers_per_agent: Input should be greater than or equal "
    "to 1",
    "bad.yaml: timeout_settings.orchestrator_timeout_seconds: Input should be greater than 0",
]
BROKEN = "agents:\n  - id: a\n    backend: {type: openai, model: gpt-4o\n  - id: b\n"
BROKEN_LINE = ("broken.yaml, line 4, column 7: not valid YAML: expected ',' or '}', but got "
               "':' (while parsing a flow mapping that starts at line 3, column 14)")


def config_files(folder: Path) -> None:
    (folder / "bad.yaml").write_text(BAD)
    (folder / "broken.yaml").write_text(BROKEN)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_every_problem_of_a_config_is_named_at_once(home: Path, tmp_path: Path,
                                                    command: str) -> None:
    config_files(tmp_path)
    args = ["bad.yaml"] if command == "validate" else ["q", "--config", "bad.yaml"]
    err = refused(cli(home, command, *args, cwd=tmp_path), home)
    assert err.removeprefix("massgen-mcp: ").splitlines() == BAD_LINES
    args = ["broken.yaml"] if command == "validate" else ["q", "--config", "broken.yaml"]
    err = refused(cli(home, command, *args, cwd=tmp_path), home)
    assert err == f"massgen-mcp: {BROKEN_LINE}\n" and "<unicode string>" not in err


async def test_every_problem_of_a_config_is_named_by_the_mcp_tool(
        client: McpClient, home: Path, tmp_path: Path) -> None:
    config_files(tmp_path)
    assert (await tool_error(client, home, config="bad.yaml")).splitlines() == BAD_LINES
    assert BROKEN_LINE in await tool_error(client, home, config="broken.yaml")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_preset_named_without_its_at_is_suggested(home: Path, tmp_path: Path,
                                                    command: str) -> None:
    args = ["fast_cheap"] if command == "validate" else ["q", "--config", "fast_cheap"]
    err = refused(cli(home, command, *args, cwd=tmp_path), home)
    assert err.rstrip().endswith("; did you mean '@fast_cheap' (a preset)?"), err
    assert "did you mean '@fast_cheap'" in refused(
        cli(home, command, *args[:-1], "fast-cheap.yaml", cwd=tmp_path), home)


async def test_a_preset_named_without_its_at_is_suggested_by_the_mcp_tool(
        client: McpClient, home: Path) -> None:
    text = await tool_error(client, home, config="fast_cheap")
    assert text.endswith("does not exist or is not a file; did you mean '@fast_cheap' "
                         "(a preset)?"), text


# -- values a config reads from the environment ---------------------------------------------------

# What a config copies from the environment may be anything of the user's. These look like no
# credential, so no redaction would mask them: an error may show only the file's own text.
HOOK = "https://hooks.example.invalid/services/T000/B000/quiet-orchid-4417"
NAME = "quiet-orchid-4417"  # also the tail of HOOK, as a fragment of it would be quoted
FROM_ENV_VARS = {"TEAM_HOOK": HOOK, "TEAM_NAME": NAME}
FROM_ENV = """\
agents:
  - id: a
    backend: {model: "${TEAM_HOOK}"}
  - id: b
    backend: {type: "${TEAM_HOOK}", model: gpt-4o-mini}
  - id: c
    backend: {type: claude_code, model: "${TEAM_HOOK}"}
  - id: d
    backend: {type: openai, model: gpt-4o-mini, temperature: "${TEAM_HOOK}"}
  - id: e
    backend: {model: "${TEAM_NAME}"}
orchestrator:
  coordination_mode: "${TEAM_HOOK}"
  answer_novelty_requirement: "${TEAM_HOOK}"
timeout_settings: {orchestrator_timeout_seconds: "${TEAM_HOOK}"}
"""
FROM_ENV_LINES = [
    "from_env.yaml: agents[0].backend.model: '${TEAM_HOOK}' does not start with a known "
    "provider (provider/model); use one such as openai, anthropic, gemini, xai, openrouter, "
    "ollama_chat, hosted_vllm",
    "from_env.yaml: agents[1].backend.type: unknown backend type '${TEAM_HOOK}'; known types: "
    "anthropic, azure_openai, cerebras, chatcompletion, claude, claude_code, codex, deepseek, "
    "fireworks, gemini, gemini_cli, grok, groq, lmstudio, local, mistral, moonshot, nebius, "
    "ollama, openai, openrouter, sglang, together, vllm, xai, zai",
    "from_env.yaml: agents[2]: model 'cli/claude/${TEAM_HOOK}': a coding-agent CLI is "
    "cli/<name> or cli/<name>/<model>, with <name> one of claude, codex, gemini",
    "from_env.yaml: agents[3].backend.temperature: Input should be a valid number, unable to "
    "parse string as a number",
    "from_env.yaml: agents[4].backend.model: cannot tell the provider of model '${TEAM_NAME}'; "
    "set backend.type (e.g. type: openai) or write the model as provider/model",
    "from_env.yaml: orchestrator.coordination_mode: '${TEAM_HOOK}' is not supported; "
    "massgen-mcp implements 'voting'",
    "from_env.yaml: orchestrator.answer_novelty_requirement: Input should be 'lenient', "
    "'balanced' or 'strict'",
    "from_env.yaml: timeout_settings.orchestrator_timeout_seconds: Input should be a valid "
    "number, unable to parse string as a number",
]
# A problem only the whole team shows (an id used twice) quotes the file's text too.
TWICE = """\
agents:
  - id: "${TEAM_NAME}"
    backend: {type: openai, model: gpt-4o-mini}
  - id: quiet-orchid-4417
    backend: {type: openai, model: gpt-4o}
"""
TWICE_LINES = ["twice.yaml is invalid:",
               "twice.yaml: agents: agent id '${TEAM_NAME}' is used twice; give each agent its "
               "own id"]


def no_value(text: str) -> str:
    """``text``, checked to hold no value from the environment, nor a part of one."""
    assert NAME not in text and "hooks.example" not in text, text
    return text


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_value_from_the_environment_is_named_as_the_file_writes_it(
        home: Path, tmp_path: Path, command: str) -> None:
    (tmp_path / "from_env.yaml").write_text(FROM_ENV)
    (tmp_path / "twice.yaml").write_text(TWICE)
    for name, lines in (("from_env.yaml", FROM_ENV_LINES), ("twice.yaml", TWICE_LINES)):
        args = [name] if command == "validate" else ["q", "--config", name]
        err = refused(cli(home, command, *args, cwd=tmp_path, env=FROM_ENV_VARS), home)
        assert no_value(err).removeprefix("massgen-mcp: ").splitlines() == lines


async def test_the_mcp_tools_name_a_value_from_the_environment_as_the_file_writes_it(
        client: McpClient, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FROM_ENV_VARS.items():
        monkeypatch.setenv(name, value)
    own = tmp_path / "xdg" / "massgen-mcp"  # the user's config folder (the home fixture's)
    own.mkdir(parents=True)
    (own / "from_env.yaml").write_text(FROM_ENV)
    # The user's own file: every problem is named, each value as the file writes it.
    text = await tool_error(client, home, config=str(own / "from_env.yaml"))
    assert no_value(text).splitlines() == FROM_ENV_LINES
    # The same file as the user's default team, from run_consensus and check_setup.
    (own / "from_env.yaml").rename(own / "config.yaml")
    lines = [line.replace("from_env.yaml", "config.yaml", 1) for line in FROM_ENV_LINES]
    assert no_value(await tool_error(client, home)).splitlines() == lines
    setup = await client.call_tool("check_setup", {}, raise_on_error=False)
    assert setup.is_error and no_value(text_of(setup.content[0])).splitlines() == lines
    # A file of the project asks for consent before anything in it is validated.
    (tmp_path / "team.yaml").write_text(FROM_ENV)
    text = no_value(await tool_error(client, home, config="team.yaml"))
    assert "team.yaml needs your consent" in text
    assert "agents[0].backend.model reads ${TEAM_HOOK} from your environment" in text
    assert "orchestrator.coordination_mode reads ${TEAM_HOOK} from your environment" in text
