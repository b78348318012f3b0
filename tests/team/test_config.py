"""Config loading: MassGen's YAML format, presets, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.spec import RunSpec, TeamConfig, build_team
from massgen_mcp.providers.kinds import api_key
from massgen_mcp.team.choose import choose_team
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.team.massgen_yaml import load_config_file, team_from_mapping
from massgen_mcp.team.presets import presets_dir
from tests.helpers import Scripted

MASSGEN_SAMPLE = """
agents:
  - id: gemini2.5flash
    backend:
      type: gemini
      model: gemini-2.5-flash
      enable_web_search: true
  - id: gpt5nano
    backend:
      type: openai
      model: gpt-5-nano
      reasoning: {effort: low}
  - id: grok3mini
    backend:
      type: grok
      model: grok-4-fast
ui:
  display_type: rich_terminal
  logging_enabled: true
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_massgen_sample_loads_with_warnings(tmp_path: Path) -> None:
    team, warnings = load_config_file(write(tmp_path, MASSGEN_SAMPLE))
    assert [a.model for a in team.agents] == [
        "gemini/gemini-2.5-flash", "openai/gpt-5-nano", "xai/grok-4-fast"]
    assert [a.id for a in team.agents] == ["gemini2.5flash", "gpt5nano", "grok3mini"]
    assert [a.web_search for a in team.agents] == [True, False, False]
    assert any("reasoning" in w for w in warnings)
    assert any(w.startswith("ui:") for w in warnings)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"agentz": []}, "agentz: unknown key; did you mean 'agent"),
        ({"agents": [{"backend": {"type": "openai"}}]}, "agents[0].backend.model: required"),
        ({"agents": [{"backend": {"type": "opneai", "model": "x"}}]},
         "did you mean 'openai'?"),
        ({"agents": [{"backend": {"type": "copilot", "model": "x"}}]},
         "is not supported by massgen-mcp"),
        ({"agents": [{"backend": {"type": "claude_code", "api_kye": "x"}}]},
         "api_kye: unknown key; did you mean 'api_key'?"),
        ({"agents": [{"backend": {"type": "openai", "model": "m", "mcp_servers": [
            {"name": "x", "type": "stdio", "command": "c", "bogus": 1}]}}]},
         "agents[0].backend.mcp_servers[0].bogus: unknown key; remove it"),
        ({"agents": [{"backend": {"type": "openai", "model": "m", "temprature": 0.3}}]},
         "temprature: unknown key; did you mean 'temperature'?"),
        ({"agents": [{"backend": {"type": "openai", "model": "m"}}],
          "orchestrator": {"max_new_answer_per_agent": 2}},
         "max_new_answer_per_agent: unknown key; did you mean 'max_new_answers_per_agent'?"),
        ({"agents": [{"backend": {"type": "chatcompletion", "model": "x"}}]},
         "base_url: required for type chatcompletion"),
        ({"agents": [{"backend": {"model": "mystery"}}]}, "cannot tell the provider"),
        ({"agents": [{"backend": {"type": "openai", "model": "m", "temperature": 5}}]},
         "agents[0].backend.temperature: Input should be less than or equal to 2"),
        ({"agents": [{"backend": {"type": "openai", "model": "m", "api_key": "${NOPE_X}"}}]},
         "environment variable NOPE_X is not set"),
        ({"agents": [{"id": "x", "backend": {"type": "openai", "model": "m"}}] * 2},
         "agent id 'x' is used twice"),
        ({"agents": [{"backend": {"type": "openai", "model": "m"}}] * 9},
         "agents: 9 agents; massgen-mcp runs at most 8"),
        ({"agents": [{"backend": {"type": "openai", "model": "m"}}],
          "orchestrator": {"coordination_mode": "decomposition"}}, "'decomposition' is not"),
        ({"agents": [{"backend": {"type": "openai", "model": "m"}}],
          "orchestrator": {"max_new_answers_per_agent": 0}},
         "orchestrator.max_new_answers_per_agent: Input should be greater than or equal to 1"),
    ],
)
def test_errors_name_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        team_from_mapping(data)
    assert message in str(info.value)


def test_env_expansion_and_secret_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_KEY", "sk-local-abcdef-123456")
    team, _ = team_from_mapping({"agents": [{"backend": {
        "type": "vllm", "model": "qwen", "api_key": "${LOCAL_KEY}"}}]})
    agent = team.agents[0]
    assert agent.model == "hosted_vllm/qwen" and agent.base_url == "http://127.0.0.1:8000/v1"
    assert api_key(agent) == "sk-local-abcdef-123456"
    assert "sk-local" not in str(team.redacted())


def test_every_preset_validates() -> None:
    presets = sorted(presets_dir().glob("*.yaml"))
    assert presets
    for path in presets:
        team, _ = load_config_file(path)
        assert team.agents


def spec(**fields: Any) -> RunSpec:
    return RunSpec(question="q", **fields)


async def choose(tmp_path: Path, **fields: Any) -> TeamConfig:
    return (await choose_team(spec(**fields), Workspace(tmp_path))).team


async def test_choose_team_merges_options_over_a_preset(tmp_path: Path) -> None:
    team = await choose(tmp_path, config="@three_agents_default",
                        options=RunOptions(timeout_s=5))
    assert team.options.timeout_s == 5 and len(team.agents) == 3
    assert team.options.max_answers_per_agent == RunOptions().max_answers_per_agent
    with pytest.raises(ConfigError,
                       match="no such preset; presets: @cli_team, @debate, @fast_cheap"):
        await choose(tmp_path, config="@nope")
    with pytest.raises(ConfigError, match="either models or config"):
        await choose(tmp_path, models=["openai/x"], config="@three_agents_default")


async def test_base_url_fills_only_agents_without_an_endpoint(tmp_path: Path) -> None:
    team = await choose(tmp_path, models=["openai/a", "openai/b@http://127.0.0.1:9/v1"],
                        base_url="http://127.0.0.1:8/v1")
    assert [a.base_url for a in team.agents] == ["http://127.0.0.1:8/v1",
                                                 "http://127.0.0.1:9/v1"]


async def test_config_paths_follow_the_workspace_rule(tmp_path: Path) -> None:
    inside = tmp_path / "team.yaml"
    inside.write_text("agents:\n  - id: x\n    backend: {type: openai, model: gpt-4o}\n")
    assert len((await choose(tmp_path, config="team.yaml")).agents) == 1
    with pytest.raises(ConfigError, match="absolute"):
        await choose(tmp_path, config=str(inside))
    outside = Workspace(tmp_path.parent, confined=False)
    team = (await choose_team(spec(config=str(inside)), outside)).team
    assert team.agents[0].model == "openai/gpt-4o"


async def test_models_list_limits(tmp_path: Path) -> None:
    assert len((await choose(tmp_path, models=["openai/a", " openai/b "])).agents) == 2
    with pytest.raises(ConfigError, match="at most 8 agents"):
        await choose(tmp_path, models=[f"openai/m{i}" for i in range(9)])
    with pytest.raises(ConfigError, match="model string"):
        await choose(tmp_path, models=["not a model"])


def test_massgen_features_we_lack_load_with_a_warning_each() -> None:
    """Mirrors MassGen's own example configs (basic/, providers/) that used to be refused."""
    team, warnings = team_from_mapping({
        "display": {"type": "rich_terminal"},
        "agents": [
            {"id": "a", "backend": {"type": "openai", "model": "gpt-4o",
                                    "enable_audio_generation": True,
                                    "enable_image_generation": True,
                                    "upload_files": [{"image_path": "x.png"}]}},
            {"id": "b", "backend": {"type": "chatcompletion", "model": "qwen",
                                    "base_url": "http://127.0.0.1:8000/v1",
                                    "chat_template_kwargs": {"enable_thinking": False},
                                    "extra_body": {"x": 1}, "brand_new_option": 1}},
        ],
        "orchestrator": {"dspy": {"enabled": True}, "answer_novelty_requirement": "strict",
                         "max_orchestration_restarts": 2},
        "some_other_tool": {"x": 1},
    })
    assert len(team.agents) == 2 and team.options.answer_novelty == "strict"
    assert team.options.max_orchestration_restarts == 2
    text = "\n".join(warnings)
    for key, upstream in [("display", "terminal display settings"),
                          ("agents[0].backend.enable_audio_generation", "audio generation"),
                          ("agents[0].backend.upload_files", "files uploaded"),
                          ("agents[1].backend.chat_template_kwargs", "chat template"),
                          ("orchestrator.dspy", "DSPy")]:
        assert f"{key}: ignored (MassGen: {upstream}" in text, key
    assert "agents[1].backend.brand_new_option: not a key massgen-mcp knows" in text
    assert "some_other_tool: not a key massgen-mcp knows; ignored" in text


async def test_the_ignored_keys_are_in_the_runs_record(scripted: Scripted, tmp_path: Path,
                                                      home: Path) -> None:
    from massgen_mcp.api.python import follow
    from massgen_mcp.core.spec import RunSpec
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace
    from massgen_mcp.testing.scripted import agree

    server = scripted(agree)
    config = tmp_path / "team.yaml"
    config.write_text(
        "display: {type: rich_terminal}\nagents:\n"
        + "".join(f"  - {{id: {m}, backend: {{type: chatcompletion, model: {m}, "
                  f"base_url: '{server.base_url}', upload_files: []}}}}\n" for m in "ab"))
    service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
    started = await service.start(RunSpec(question="6*7?", config=str(config)))
    await follow(service, started.session_id)
    await service.aclose()
    notes = service.store.read_request(started.session_id).notes
    assert notes == started.notes and any(n.startswith("display: ignored") for n in notes)
    assert any("agents[1].backend.upload_files: ignored" in n for n in notes)



async def test_cli_agents_from_models_take_run_options(tmp_path: Path) -> None:
    """A team of coding CLIs named with --models and given a run option is rebuilt from its own
    dump; its unset temperature must not count as "given" (it refused every such run)."""
    team = await choose(tmp_path, models=["cli/claude", "cli/codex"],
                        options=RunOptions(timeout_s=5))
    assert [a.model for a in team.agents] == ["cli/claude", "cli/codex"]
    assert team.options.timeout_s == 5
    with pytest.raises(ConfigError, match=r"temperature: not available for a coding-agent CLI"):
        build_team({"agents": [{"id": "a", "model": "cli/claude", "temperature": 0.5}]})
