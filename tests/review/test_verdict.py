"""What a review's outputs say, from the members' recorded actions: the model texts in them
carry no control character and link nothing, and every output says what the votes say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.core.edges import has_control_characters
from massgen_mcp.testing.scripted import ChatRequest, Reply, vote
from tests.helpers import Scripted
from tests.review.reviewers import C_SAYS, label_of_model, reviewers

# What a terminal or a viewer obeys: OSC 52 (writes the clipboard), OSC 8 (a hidden link),
# CSI as the one C1 byte, a right-to-left override that reorders what is shown.
HOSTILE = ("fine\x1b]52;c;ZWNobyBwd25lZA==\x07 see \x1b]8;;https://evil.example\x1b\\here"
           "\x1b]8;;\x1b\\ \x9b2J \u202eevil\u202c")


def review_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["review", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def strings(value: object) -> list[str]:
    """Every string within a parsed JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def test_a_vote_reason_reaches_no_output_with_its_control_characters(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """c dissents with a vote reason full of terminal sequences: the dissent in ``--json``
    (as ``jq -r`` would print it), SARIF ``properties.dissent`` and the Markdown hold none
    of them (red team, round 5, R3). A team of two: the decision waits for both votes,
    so c's stands whatever the timing."""
    def hostile(req: ChatRequest) -> Reply:
        if req.model == "c" and req.vote_labels and not (req.is_final or req.is_check):
            label = label_of_model(req, "c") or sorted(req.answers)[0]
            return vote(label, C_SAYS + " " + HOSTILE)
        return reviewers(req)

    server = scripted(hostile)
    monkeypatch.chdir(repo)
    team = ["--models", "openai/a,openai/c", "--base-url", server.base_url, "--quiet"]
    code, out, err = review_cli(capsys, *team, "--json")
    assert code == 0, err
    result = json.loads(out)
    (dissent,) = result["review"]["dissent"]
    assert "here" in dissent["reason"] and "evil" in dissent["reason"]
    assert [s for s in strings(result) if has_control_characters(s)] == []
    assert "\\u001b" not in out and "\\u202e" not in out and "\\u009b" not in out

    code, sarif, err = review_cli(capsys, *team, "--format", "sarif")
    assert code == 0, err
    log = json.loads(sarif)
    (said,) = log["runs"][0]["properties"]["dissent"]
    assert "here" in said["reason"]
    assert [s for s in strings(log) if has_control_characters(s)] == []

    for shape in ("markdown", "text"):
        code, shown, err = review_cli(capsys, *team, "--format", shape)
        assert code == 0, err
        assert "validated names" in shown and not has_control_characters(shown), shape
        assert "\\x1b" not in shown and "\\u202e" not in shown, shape  # not even escaped


def test_issue_references_in_a_models_text_link_nothing_in_the_pull_request_comment() -> None:
    """GitHub links ``#1``, ``GH-12`` and ``owner/repo#2`` in a comment's rendered text, and
    ``\\#1`` renders as ``#1``: a finding's text, a model's, must not cross-reference another
    issue or repository, as it may not mention anyone (red team, round 5, R6)."""
    from massgen_mcp.core.outcomes import Finding, ReviewOutcome, Severity, Stance, Verdict
    from massgen_mcp.render.review import as_markdown

    said = "breaks #1, see GH-12 and owner/repo#2 (gh-7, cc @alice)"
    finding = Finding(id="F1", file="a.py", line=3, end_line=3, severity=Severity.MAJOR,
                      category="correctness", claim=said, fix=said, raised_by="a",
                      disputed_by=[Stance(agent_id="b", reason=said)])
    md = as_markdown(ReviewOutcome(verdict=Verdict.CHANGES_REQUESTED, threshold=Severity.MAJOR,
                                   agreement=1, members=2, summary=said, findings=[finding]),
                     {})
    assert md.count("breaks") == 4
    unescaped = md.replace("\\", "")
    for linked in ("#1", "GH-12", "#2", "gh-7", "@alice"):
        assert linked not in unescaped, linked
    assert unescaped.replace("\u200b", "").count(said) == 4  # it reads as the model wrote it
