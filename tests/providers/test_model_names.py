"""Bare model names (``gpt-4o``) are checked and called as their ``provider/model`` spelling."""

from __future__ import annotations

import pytest

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.kinds import VERTEX_ENV, api_key, provider_of, routed_model
from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.providers.model_map import bare_models
from massgen_mcp.providers.preflight import missing_credentials


@pytest.fixture
def no_vertex(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VERTEX_ENV:
        monkeypatch.delenv(name, raising=False)


def test_every_bare_name_goes_where_litellm_routes_it_and_gemini_to_its_api_key(
        _litellm_loaded: None, no_vertex: None) -> None:
    """The provider a key is checked for is the one the call reaches: litellm's own router,
    given the string a call sends, agrees for every bare name of its map. Where litellm
    alone routes the bare name, it is to the same provider, but a gemini-* that it would
    send to Vertex AI (needing a Google Cloud project and the google package) goes to
    Gemini's API."""
    litellm = load_litellm()
    names = bare_models()
    assert names and {"gpt-4o", "claude-haiku-4-5", "gemini-2.5-flash", "o3-mini"} <= set(names)
    wrong = {}
    for name in names:
        agent = AgentSpec(id="a", model=name)
        reached = litellm.get_llm_provider(routed_model(agent))[1]
        try:
            alone = litellm.get_llm_provider(name)[1]
        except Exception:  # litellm cannot route it bare (deepseek-chat): the prefix can
            alone = provider_of(agent)
        if alone == "vertex_ai" and name.startswith("gemini"):
            alone = "gemini"
        if not provider_of(agent) or reached != provider_of(agent) or alone != provider_of(agent):
            wrong[name] = (provider_of(agent), reached, alone)
    assert not wrong
    assert routed_model(AgentSpec(id="a", model="gemini-2.5-flash")) == "gemini/gemini-2.5-flash"


def test_bare_gemini_goes_to_vertex_only_when_vertex_is_configured(
        monkeypatch: pytest.MonkeyPatch, no_vertex: None) -> None:
    team = TeamConfig(agents=[AgentSpec(id="a", model="gemini-2.5-flash")])
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    assert "set GEMINI_API_KEY or GOOGLE_API_KEY" in missing_credentials(team)[0]
    monkeypatch.setenv("VERTEXAI_PROJECT", "my-project")
    assert provider_of(team.agents[0]) == "vertex_ai"
    assert routed_model(team.agents[0]) == "vertex_ai/gemini-2.5-flash"
    assert missing_credentials(team) == []  # Vertex signs in with Google Cloud credentials


def test_a_bare_name_sends_its_providers_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key found for a bare name is the one its prefixed spelling finds, so it is sent
    (and registered for redaction) the same way."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-" + "k" * 30)
    bare = AgentSpec(id="a", model="claude-haiku-4-5")
    prefixed = AgentSpec(id="a", model="anthropic/claude-haiku-4-5")
    assert provider_of(bare) == "anthropic"
    assert api_key(bare) == api_key(prefixed) == "sk-ant-api03-" + "k" * 30


def test_every_kind_is_one_row_whose_prefix_a_model_string_can_start_with() -> None:
    """A row for a prefix litellm does not route, or a second row for one prefix, would
    leave a kind that no model string reaches or that one row hides: each row's prefix is
    litellm's (then the router's remote provider serves it) or a route of our own."""
    from massgen_mcp.providers.kinds import KINDS, LITELLM, OWN_PREFIXES, kind_of
    from massgen_mcp.providers.model_names import LITELLM_PROVIDERS, model_problem

    prefixes = [kind.prefix for kind in KINDS if kind is not LITELLM]
    assert len(prefixes) == len(set(prefixes))
    for kind in KINDS:
        if kind is LITELLM:
            continue
        assert (kind.prefix in LITELLM_PROVIDERS) == (kind.route == "remote"), kind.prefix
        assert (kind.prefix in OWN_PREFIXES) == (kind.route != "remote"), kind.prefix
        assert kind_of(AgentSpec(id="a", model=f"{kind.prefix}/m")) is kind
    assert kind_of(AgentSpec(id="a", model="ollama_chat/qwen")) is LITELLM
    assert model_problem("cli/claude/opus") is None
    assert model_problem("cli/cursor") == (
        "model 'cli/cursor': a coding-agent CLI is cli/<name> or cli/<name>/<model>, with "
        "<name> one of claude, codex, gemini")
