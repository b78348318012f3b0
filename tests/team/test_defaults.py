"""Zero-config teams: keys, .env, local servers on loopback, config files, doctor."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.core.env import getenv
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import RunSpec, TeamConfig
from massgen_mcp.team import discover as discovery
from massgen_mcp.team.choose import choose_team
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.team.discover import discover, find_local_servers, providers_with_keys
from massgen_mcp.testing.scripted import ScriptedServer, agree
from tests.helpers import unused_port


async def default_team(tmp_path: Path, **options: Any) -> TeamConfig:
    spec = RunSpec(question="q", options=RunOptions(**options) if options else None)
    return (await choose_team(spec, Workspace(tmp_path))).team


@pytest.fixture(autouse=True)
def clean_env(nothing_available: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real keys, no real local servers, no user config, no embedded model."""
    monkeypatch.chdir(tmp_path)


async def test_keys_give_a_team_that_mixes_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-1234567890")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-1234567890")
    found = await discover()
    assert found.source == "keys" and found.providers_with_keys == ["openai", "anthropic"]
    assert found.team is not None
    models = [a.model for a in found.team.agents]
    assert models[0].startswith("openai/") and models[1].startswith("anthropic/")
    assert len(models) == 3 and len({a.system_message for a in found.team.agents}) == 3
    assert "sk-fake" not in found.reason


async def test_one_key_still_gives_three_diverse_agents(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "g-fake-1234567890")
    team = await default_team(tmp_path, timeout_s=30)
    assert [a.model.split("/")[0] for a in team.agents] == ["gemini"] * 3
    assert len({a.model for a in team.agents}) == 3
    assert team.options.timeout_s == 30
    assert len({a.temperature for a in team.agents}) == 3


async def test_dotenv_is_read_without_overriding(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("XAI_API_KEY", "real-value-123456")
    (tmp_path / ".env").write_text('# keys\nexport MISTRAL_API_KEY="m-fake-123456"\n'
                                   "XAI_API_KEY=from-dotenv\nnot a line\n")
    assert providers_with_keys() == ["xai", "mistral"]
    assert getenv("XAI_API_KEY") == "real-value-123456", "the real environment wins"
    assert getenv("MISTRAL_API_KEY") == "m-fake-123456"
    assert "MISTRAL_API_KEY" not in os.environ, ".env is read, never copied into os.environ"
    assert redact("key m-fake-123456 here") == "key *** here", ".env keys are redacted"
    (tmp_path / ".env").write_text("MISTRAL_API_KEY=m-changed-123456\n")
    os.utime(tmp_path / ".env", ns=(1, 1))  # a different mtime: the change is seen
    assert getenv("MISTRAL_API_KEY") == "m-changed-123456"


async def test_local_servers_are_found_and_used(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer(agree) as server:
        monkeypatch.setenv("MASSGEN_LOCAL_PORTS", f"{unused_port()},{server.port}")
        discovery._probe_cache.clear()
        servers = await find_local_servers()
        assert [s.url for s in servers] == [server.base_url]
        assert servers[0].models == ("scripted",)
        found = await discover()
    assert found.source == "local servers"
    assert found.team is not None
    assert {a.base_url for a in found.team.agents} == {server.base_url}
    assert all(a.tool_calling is False for a in found.team.agents)
    assert server.base_url in found.reason


async def test_probe_is_cached() -> None:
    first = await find_local_servers((unused_port(),))
    assert first == [] and await find_local_servers() is not first


async def test_project_config_wins(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-1234567890")
    home.mkdir(parents=True)
    (home / "config.yaml").write_text(
        "agents:\n  - id: only\n    backend: {type: openai, model: gpt-4o}\n")
    found = await discover()
    assert found.source == "config" and found.team is not None
    assert [a.model for a in found.team.agents] == ["openai/gpt-4o"]


async def test_nothing_found_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        await default_team(tmp_path)
    message = str(info.value)
    assert "OPENAI_API_KEY" in message and "massgen-mcp[local]" in message


def test_doctor_reports_names_never_values(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-doctor-123456")
    assert main(["doctor", "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data["providers_with_keys"] == ["openai"]
    assert data["default_team"][0].startswith("openai/")
    assert "sk-canary" not in out
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "default team:" in text and "why:" in text and "sk-canary" not in text


def test_run_without_models_uses_the_default_team(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(agree) as server:
        monkeypatch.setenv("MASSGEN_LOCAL_PORTS", str(server.port))
        discovery._probe_cache.clear()
        assert main(["run", "What is 6*7?"]) == 0
    out, err = capsys.readouterr()
    assert "default team (local servers)" in err
    assert out.strip().startswith("Final:")


async def test_embedded_team_returns_the_winner_verbatim(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setattr("massgen_mcp.providers.llamacpp_provider.embedded_model_name",
                        lambda: "smollm2")
    found = await discover()
    assert found.source == "embedded"
    assert found.team is not None
    assert [a.model for a in found.team.agents] == ["local/smollm2"] * 3
    assert found.team.options.skip_final_presentation is True
    override = await default_team(tmp_path, skip_final_presentation=False)
    assert override.options.skip_final_presentation is False


# -- whether a server warms litellm up --------------------------------------------------------


def test_litellm_is_warmed_for_a_key_and_not_for_nothing(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    assert not discovery.litellm_soon()  # the default team is CLIs, local servers or embedded
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-fake-1234567890")
    assert discovery.litellm_soon()


@pytest.mark.parametrize("backends, soon", [
    ([("ollama", "llama3")], True),  # no key, but litellm serves it
    ([("sglang", "qwen3"), ("claude_code", "sonnet")], False),  # called directly; a CLI
    ([("local", "smollm2")], False),  # the embedded model
])
def test_litellm_is_warmed_when_the_configured_team_needs_it(
        home: Path, backends: list[tuple[str, str]], soon: bool) -> None:
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("agents:\n" + "".join(
        f"  - id: a{i}\n    backend: {{type: {kind}, model: {model}}}\n"
        for i, (kind, model) in enumerate(backends)))
    assert discovery.configured_team() is not None
    assert discovery.litellm_soon() is soon


def test_a_broken_config_warms_nothing(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("agents: [\n")
    assert not discovery.litellm_soon()
