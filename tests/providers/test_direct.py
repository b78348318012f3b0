"""Calls to an ``openai/`` model at a ``base_url`` go over plain HTTP, without litellm
(providers.openai_direct; issue 29's secondary goal). test_streaming holds the replies and
failures against litellm's own; here: the price, and that such a run never imports litellm."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable

import httpx
import pytest

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.providers.base import MAX_CALL_TOKENS, CallContext
from massgen_mcp.providers.litellm_provider import LiteLLMProvider, load_litellm
from massgen_mcp.providers.model_map import cost_of
from massgen_mcp.providers.model_names import model_map
from massgen_mcp.providers.openai_direct import (
    MAX_REPLY_CHARS,
    MAX_TOOL_CALLS,
    http_error,
)
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, raw
from massgen_mcp.testing.wire import completion_body
from tests.helpers import Scripted, by_model, run_team, team_for

HI = [{"role": "user", "content": "What is 6*7?"}]


def _agent(server: ScriptedServer) -> AgentSpec:
    return AgentSpec(id="a", model="openai/m", base_url=server.base_url)


def _quiet(piece: str, tokens: int) -> None:
    """A live-draft listener that keeps nothing (the call then streams)."""


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


def test_the_price_table_is_read_once_however_many_first_replies_ask_at_once() -> None:
    """A team's first replies each price their call on a thread of their own, at the same
    moment: one read of the ~3 MB table serves them all (each used to parse it again, ~30 ms
    of the interpreter lock apiece, just as the next turns were due)."""
    from massgen_mcp.providers import model_map as prices

    prices._read_model_map.cache_clear()
    start = threading.Barrier(4)
    got: list[object] = []

    def price() -> None:
        start.wait()
        got.append(prices.model_map())

    threads = [threading.Thread(target=price) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got[0] is not None and all(table is got[0] for table in got)
    assert prices.model_map_read()


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


# -- a hostile server (red-team findings on the direct path) ----------------------------------

def _always(reply: Reply) -> Callable[[ChatRequest], Reply]:
    return lambda req: reply


def _calls(n: int) -> str:
    one = {"id": "c", "type": "function", "function": {"name": "vote", "arguments": "{}"}}
    return json.dumps({"choices": [{"message": {"tool_calls": [one] * n}}]})


def _streamed_calls(n: int) -> str:
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": i, "id": f"c{i}", "function": {"name": "vote", "arguments": "{}"}}]}}]}
        for i in range(n)]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events)


@pytest.mark.usefixtures("_litellm_loaded")
async def test_a_reply_with_too_many_tool_calls_is_refused(scripted: Scripted) -> None:
    """A 32 MiB reply held ~460,000 tool calls: seconds of the shared loop to build them, and
    minutes to mask them one by one. At most 128 a reply, whole or streamed."""
    for body, context in ((_calls(MAX_TOOL_CALLS + 1), None),
                          (_streamed_calls(MAX_TOOL_CALLS + 1), CallContext("s", on_text=_quiet))):
        server = scripted(_always(raw(body)))
        with pytest.raises(ProviderError, match=f"{MAX_TOOL_CALLS}") as info:
            await LiteLLMProvider().complete(_agent(server), HI, tools=None, timeout_s=10,
                                             context=context)
        assert info.value.kind == "server_error"
    fine = scripted(lambda req: raw(_calls(MAX_TOOL_CALLS)))
    reply = await LiteLLMProvider().complete(_agent(fine), HI, tools=None, timeout_s=10)
    assert len(reply.tool_calls) == MAX_TOOL_CALLS


@pytest.mark.usefixtures("_litellm_loaded")
async def test_a_streamed_tool_call_s_name_counts_toward_the_reply_cap(
        scripted: Scripted) -> None:
    piece = "n" * (MAX_REPLY_CHARS // 2 + 1)
    events = "".join(
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"name": piece}}]}}]}) + "\n\n" for _ in range(2))
    server = scripted(lambda req: raw(events))
    with pytest.raises(ProviderError, match="the reply passed"):
        await LiteLLMProvider().complete(_agent(server), HI, tools=None, timeout_s=10,
                                         context=CallContext("s", on_text=_quiet))


@pytest.mark.usefixtures("_litellm_loaded")
async def test_a_redirect_is_refused_not_read_as_the_reply(scripted: Scripted) -> None:
    """Not followed (the key would go to another host), and its body is not a reply."""
    server = scripted(lambda req: raw(_calls(1), status=307))
    with pytest.raises(ProviderError, match=r"a redirect to .*\(not followed") as info:
        await LiteLLMProvider().complete(_agent(server), HI, tools=None, timeout_s=10)
    assert info.value.kind == "bad_request" and not info.value.retryable
    assert len(server.requests) == 1


def _lying(prompt_tokens: int) -> Callable[[ChatRequest], Reply]:
    """agree's replies, with the usage a hostile server reports."""
    def policy(req: ChatRequest) -> Reply:
        body = completion_body(req, agree(req))
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": 1}
        return raw(json.dumps(body))
    return policy


@pytest.mark.parametrize("direct", ["1", "0"], ids=["direct", "litellm"])
@pytest.mark.parametrize("lie", [-10**12, int("9" * 4299)], ids=["negative", "4299-digits"])
async def test_usage_a_server_lies_about_cannot_lift_a_budget_or_break_the_record(
        scripted: Scripted, monkeypatch: pytest.MonkeyPatch, direct: str, lie: int) -> None:
    """-10**12 tokens once lifted max_total_tokens for the whole team; 4,299-digit counts
    added up past what JSON can carry, and the finished run's record could not be read."""
    monkeypatch.setenv("MASSGEN_OPENAI_DIRECT", direct)
    server = scripted(by_model(agree, **{"gpt-4o-mini": _lying(lie)}))
    team = team_for(server, ("gpt-4o-mini", "b", "c"), max_total_tokens=50)
    out = await run_team(team, drafts=False)
    assert out.events("budget_exceeded"), "the budget held"
    usage = out.result["usage"]
    assert (0 <= usage["total_tokens"] <= 3 * MAX_CALL_TOKENS and usage["cost_usd"] is None) or (
        usage["cost_usd"] >= 0)
    # (the budget may trip before any answer: the run then failed, and says so readably)
    assert out.store.read_status(out.result["session_id"]).status == out.result["status"]
    assert out.store.read_result(out.result["session_id"]) is not None
    assert (out.folder / "report.html").is_file()


@pytest.mark.usefixtures("_litellm_loaded")
async def test_a_whole_reply_over_the_reply_cap_is_refused_as_a_streamed_one_is(
        scripted: Scripted) -> None:
    """Under the body's cap (4 MiB of JSON), over the reply's (1 MiB of text)."""
    body = json.dumps({"choices": [{"message": {"content": "x" * (MAX_REPLY_CHARS + 1)}}]})
    server = scripted(_always(raw(body)))
    with pytest.raises(ProviderError, match="the reply passed 1,048,576 characters") as info:
        await LiteLLMProvider().complete(_agent(server), HI, tools=None, timeout_s=10)
    assert not info.value.retryable


@pytest.mark.parametrize(("status", "said", "kind"), [
    (429, "slow down", ErrorKind.RATE_LIMIT), (401, "who?", ErrorKind.AUTH),
    (403, "context length", ErrorKind.AUTH), (400, "maximum context length is 8k",
                                              ErrorKind.CONTEXT_WINDOW),
    (400, "flagged by content_filter", ErrorKind.CONTENT_FILTER),
    (404, "no such model", ErrorKind.BAD_REQUEST),
    (502, "context length", ErrorKind.SERVER_ERROR)])
def test_a_refused_request_maps_to_one_kind_and_its_words(status: int, said: str,
                                                           kind: ErrorKind) -> None:
    """One table of statuses and one of a 4xx body's words (issue 50, step 5); each kind
    keeps its prefix, retryability, and the Retry-After hint only where it speaks."""
    failure = http_error(status, json.dumps({"error": {"message": said}}),
                         httpx.Headers({"Retry-After": "3"}))
    prefix = {ErrorKind.RATE_LIMIT: "rate limited", ErrorKind.AUTH: "authentication failed",
              ErrorKind.CONTEXT_WINDOW: "context window exceeded",
              ErrorKind.CONTENT_FILTER: "content filter",
              ErrorKind.BAD_REQUEST: "request rejected", ErrorKind.SERVER_ERROR: "provider error"}
    assert (failure.kind, str(failure)) == (kind, f"{prefix[kind]}: {said}")
    assert failure.status_code == status
    retryable = kind in (ErrorKind.RATE_LIMIT, ErrorKind.SERVER_ERROR)
    assert failure.retryable is retryable
    assert failure.retry_after == (3.0 if retryable else None)
    assert ProviderError(str(failure), kind=kind).retryable is retryable  # the table's default
