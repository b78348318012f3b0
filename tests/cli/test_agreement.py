"""Agreement and dissent in every result (issue 56): k of n live members back the winner,
the strongest losing answer with its voters' reasons, each dissenter's reason, and who was
late, in the record and on the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, vote
from tests.helpers import Scripted

ANSWERS = {"a": "Use a B-tree: reads dominate.", "b": "A B-tree, since reads dominate.",
           "c": "An LSM tree: the log is write-heavy."}


def split(req: ChatRequest) -> Reply:
    """a and b vote for a's answer; c keeps its own and says why."""
    if req.is_final or req.is_check:
        return agree(req)
    if req.vote_labels:
        if req.model == "c":
            return vote(req.label_of("LSM"), "writes dominate a log; B-trees amplify them")
        return vote(req.label_of("Use a B-tree"), "reads dominate")
    return answer(ANSWERS[req.model])


def test_the_dissent_is_in_the_record_and_on_the_cli(
        scripted: Scripted, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(split)
    config = tmp_path / "team.yaml"  # decide: all, so that c's vote is always cast
    config.write_text(json.dumps({
        "agents": [{"id": f"agent_{m}", "backend": {"type": "openai", "model": m,
                                                     "base_url": server.base_url}}
                   for m in "abc"], "options": {"decide": "all"}}))
    code = main(["run", "Which index for a log store?", "--config", str(config), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    printed = json.loads(out)
    session = printed["session_dir"]
    with open(f"{session}/result.json") as f:
        result = json.load(f)
    agreement = result["agreement"]
    assert printed["agreement"] == agreement  # a script reads --json, not stderr
    assert (agreement["backing"], agreement["members"]) == (2, 3)
    up = agreement["runner_up"]
    assert up["agent_id"] == "agent_c" and up["excerpt"] == ANSWERS["c"]
    assert up["voters"] == [{"agent_id": "agent_c",
                             "reason": "writes dominate a log; B-trees amplify them"}]
    assert [(d["agent_id"], d["reason"]) for d in agreement["dissent"]] == [
        ("agent_c", "writes dominate a log; B-trees amplify them")]
    assert "agreement: 2 of 3 live members back" in err
    assert "dissent: agent_c (openai/c), voted for" in err
    assert "strongest losing answer: " in err and "An LSM tree" in err
    report = (Path(session) / "report.html").read_text()  # and in the run's report
    assert "agreement: 2 of 3 live members back" in report
    assert "dissent: agent_c (openai/c), voted for" in report
