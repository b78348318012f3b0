"""Calls to an ``openai/`` model at a ``base_url`` go over plain HTTP, without litellm
(providers.openai_direct; issue 29's secondary goal). test_streaming holds the replies and
failures against litellm's own; here: the price, and that such a run never imports litellm."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap

import pytest

from massgen_mcp.core.model_names import model_map
from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.providers.openai_direct import cost_of
from massgen_mcp.testing.scripted import ScriptedServer, agree


def _tiered_models() -> list[str]:
    """A few models whose price rises past a prompt size, and a plain one."""
    table = model_map() or {}
    tiered = sorted(name for name, entry in table.items() if isinstance(entry, dict)
                    and entry.get("litellm_provider") in ("openai", "gemini", "anthropic")
                    and any(key.startswith("input_cost_per_token_above_") for key in entry))
    assert tiered, "litellm's table has no tiered model: the test lost its subject"
    return ["gpt-4o-mini", *tiered[:2], *tiered[-2:]]


@pytest.mark.usefixtures("_litellm_loaded")
@pytest.mark.parametrize("prompt", [1_000, 150_000, 250_000, 300_000])
def test_the_price_is_litellms_without_litellm(prompt: int) -> None:
    litellm = load_litellm()
    for model in _tiered_models():
        prompt_usd, completion_usd = litellm.cost_per_token(
            model=model, prompt_tokens=prompt, completion_tokens=700)
        assert cost_of(model, prompt, 700) == pytest.approx(prompt_usd + completion_usd), model
    assert cost_of("openai/gpt-4o-mini", 10, 10) == cost_of("gpt-4o-mini", 10, 10)
    assert cost_of("openai/my-own-model", 10, 10) is None


def test_a_run_on_servers_of_ones_own_never_imports_litellm() -> None:
    """The CLI's headless run: three openai/ agents at a base_url, start to finish, and
    litellm (~3 s, ~180 MB) is never imported; the price table is read from its file."""
    with ScriptedServer(agree) as server:
        script = textwrap.dedent(f"""
            import sys
            from massgen_mcp.cli.main import main
            code = main(["--home", sys.argv[1], "run", "What is 6*7?", "--quiet",
                         "--models", "openai/gpt-4o-mini,openai/b,openai/c",
                         "--base-url", {server.base_url!r}])
            assert code == 0, code
            assert "litellm" not in sys.modules, "litellm was imported"
            print("ok")
        """)
        with tempfile.TemporaryDirectory() as home:
            done = subprocess.run([sys.executable, "-c", script, home], capture_output=True,
                                  text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().endswith("ok")
        assert len(server.requests) == 7
