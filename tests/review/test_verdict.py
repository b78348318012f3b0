"""What a review's outputs say, from the members' recorded actions: the model texts in them
carry no control character and link nothing, and every output says what the votes say."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.core.edges import has_control_characters
from massgen_mcp.testing.scripted import (
    ChatRequest,
    Reply,
    ScriptedServer,
    answer,
    error,
    vote,
)
from tests.helpers import Scripted
from tests.review.reviewers import C_SAYS, INJECTION, OFF_BY_ONE, label_of_model, reviewers

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


# -- the verdict says what the votes say, in three tiers (issue 68) ------------------------

EMPTY_SAYS = "nothing wrong here"


def mine(req: ChatRequest) -> str | None:
    """The shown review this member wrote (each signs its summary with its model)."""
    return next((label for label, content in req.answers.items()
                 if f'"{req.model}: ' in content), None)


def signed(model: str, *found: dict[str, object],
           rejects: list[dict[str, str]] | None = None) -> str:
    return json.dumps({"summary": f"{model}: {EMPTY_SAYS}", "findings": list(found),
                       "rejects": rejects or []})


def team_of(server: ScriptedServer, members: str) -> list[str]:
    return ["--models", ",".join(f"openai/{m}" for m in members), "--base-url",
            server.base_url, "--quiet"]


def every_output(capsys: pytest.CaptureFixture[str], argv: list[str]
                 ) -> tuple[int, dict[str, str]]:
    """The same review in text, Markdown, SARIF and --json (four runs of one script)."""
    shown: dict[str, str] = {}
    codes = set()
    for shape in ("text", "markdown", "sarif", "json"):
        code, out, err = review_cli(capsys, *argv, "--format", shape)
        codes.add(code)
        shown[shape] = out
        shown[shape + ".err"] = err
    assert len(codes) == 1, codes
    return codes.pop(), shown


def test_a_tie_between_identical_reviews_is_one_position_in_every_output(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two members write empty reviews and each votes for its own: a tie by the labels, but
    one position, backed by 2 of 2, with nobody in the dissent (it read "1 of 2 members
    backed the winning review", the other member dissenting)."""
    def same(req: ChatRequest) -> Reply:
        if req.vote_labels:
            return vote(mine(req) or sorted(req.answers)[0], "mine is right")
        return answer(signed(req.model))

    server = scripted(same)
    monkeypatch.chdir(repo)
    code, shown = every_output(capsys, team_of(server, "ab"))
    assert code == 0, shown["text.err"]
    review = json.loads(shown["json"])["review"]
    assert (review["verdict"], review["agreement"], review["members"]) == ("approve", 2, 2)
    assert len(review["equal"]) == 1 and review["tied"] == [] and review["dissent"] == []
    for shape in ("text", "markdown"):  # labels are drawn anew for each run
        assert re.search(r"2 of 2 members backed the winning review [A-H]1 \(and [A-H]1, the "
                         r"same findings\)", shown[shape]), shape
        assert "Dissent" not in shown[shape], shape
    props = json.loads(shown["sarif"])["runs"][0]["properties"]
    assert (props["agreement"], len(props["equal"]), props["dissent"]) == (2, 1, [])


def test_a_blocker_one_member_raised_and_none_disputed_is_unconfirmed_everywhere(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """a alone finds the injection; b and c find nothing and vote for b's review; nobody
    disputes it. It is unconfirmed (never "rejected by the team"), shown with the same
    support in every output, a SARIF note; the verdict counts it only when told to."""
    def lone(req: ChatRequest) -> Reply:
        if req.vote_labels:
            if req.model == "a":
                return vote(mine(req) or sorted(req.answers)[0], "it is an injection")
            label = next((lbl for lbl, c in req.answers.items() if '"b: ' in c), None)
            return vote(label or mine(req) or sorted(req.answers)[0], "clean")
        return answer(signed(req.model, INJECTION) if req.model == "a" else signed(req.model))

    server = scripted(lone)
    monkeypatch.chdir(repo)
    code, shown = every_output(capsys, [*team_of(server, "abc"), "--fail-on", "major"])
    assert code == 0, shown["text.err"]
    review = json.loads(shown["json"])["review"]
    assert review["verdict"] == "approve" and review["rejected"] == []
    (lone_finding,) = review["unconfirmed"]
    assert (lone_finding["id"], lone_finding["severity"], lone_finding["backers"]) == (
        "U1", "blocker", ["agent_a"])
    support = "backed by 1 of 3: raised by agent_a (openai/a)"
    assert "Rejected" not in shown["text"] and "Rejected" not in shown["markdown"]
    assert f"    {support}\n" in shown["text"]
    assert "_" + support.replace("_", "\\_") + "_" in shown["markdown"]
    (result,) = json.loads(shown["sarif"])["runs"][0]["results"]
    assert (result["level"], result["properties"]["tier"]) == ("note", "unconfirmed")
    assert result["properties"]["support"] == support
    assert shown["text"].startswith("Verdict: approve: 0 agreed findings, 1 unconfirmed, "
                                    "0 rejected; 2 of 3 members backed the winning review ")
    assert "Dissent:\n  agent_a (openai/a) (" in shown["text"]  # its vote may be cut
    code, out, err = review_cli(capsys, *team_of(server, "abc"), "--fail-on", "major",
                                "--fail-on-tier", "unconfirmed", "--json")
    assert code == 8, err
    counted = json.loads(out)["review"]
    assert (counted["verdict"], counted["tier"]) == ("blocked", "unconfirmed")


def test_a_lone_finding_two_members_dispute_is_rejected_with_their_reasons(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """a's off-by-one; b and c each revise their review to reject it, with a reason."""
    def disputed(req: ChatRequest) -> Reply:
        if req.model == "a":
            if req.vote_labels:
                return vote(mine(req) or sorted(req.answers)[0], "it is a bug")
            return answer(signed("a", OFF_BY_ONE))
        if not req.vote_labels:
            return answer(signed(req.model))
        theirs = next((lbl for lbl, c in req.answers.items() if '"a: ' in c), None)
        own = req.answers.get(mine(req) or "", "")
        if theirs is not None and f"{theirs}.1" not in own:
            reason = f"{req.model}: the loop bound is checked by the caller"
            return answer(signed(req.model, rejects=[{"finding": f"{theirs}.1",
                                                      "reason": reason}]))
        return vote(mine(req) or sorted(req.answers)[0], "the change is fine")

    server = scripted(disputed)
    monkeypatch.chdir(repo)
    code, out, err = review_cli(capsys, *team_of(server, "abc"), "--json")
    assert code == 0, err
    review = json.loads(out)["review"]
    (rejected,) = review["rejected"]
    assert (rejected["id"], rejected["tier"], rejected["backers"]) == (
        "R1", "rejected", ["agent_a"])
    assert sorted(s["agent_id"] for s in rejected["disputed_by"]) == ["agent_b", "agent_c"]
    assert review["unconfirmed"] == [] and review["verdict"] == "approve"
    # b's and c's reviews are equal (no finding): one position, 2 of 3.
    assert review["agreement"] == 2 and [d["agent_id"] for d in review["dissent"]] == [
        "agent_a"]


def test_every_member_dropped_is_inconclusive_with_its_own_exit_code(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(lambda req: error(400, "model does not exist"))
    monkeypatch.chdir(repo)
    code, out, err = review_cli(capsys, *team_of(server, "abc"), "--json")
    assert code == 9, err
    review = json.loads(out)["review"]
    assert review["verdict"] == "inconclusive" and review["winner"] is None
    assert review["inconclusive"] == ("every member was dropped (the run ended: all agents "
                                      "failed)")
    code, text, err = review_cli(capsys, *team_of(server, "abc"))
    assert code == 9 and text.startswith("Verdict: inconclusive: every member was dropped")


def test_a_timeout_before_any_vote_is_inconclusive_not_a_verdict(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every member reviews (a finds a blocker) and none gets its vote in before the
    timeout: no verdict (it read "Verdict: blocked … 0 of 3 backed")."""
    def slow_votes(req: ChatRequest) -> Reply:
        if req.vote_labels:
            return Reply("text", delay_s=60)
        return answer(signed(req.model, INJECTION) if req.model == "a" else signed(req.model))

    server = scripted(slow_votes)
    monkeypatch.chdir(repo)
    code, out, err = review_cli(capsys, *team_of(server, "abc"), "--timeout", "8")
    assert code == 9, err
    assert out.startswith("Verdict: inconclusive: the team never voted (the run ended: "
                          "timeout); 0 agreed findings"), out
    assert "blocked" not in out and "backed the winning review" not in out


def test_a_typo_in_a_tier_or_severity_is_one_line(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    for flag, value, choices in (("--fail-on", "majr", "blocker, major, minor, nit"),
                                 ("--fail-on-tier", "unconfrimed",
                                  "agreed, unconfirmed")):
        code, out, err = review_cli(capsys, flag, value, "--models",
                                    "openai/a@http://127.0.0.1:9/v1")
        assert (code, out) == (1, ""), err
        assert err == f"massgen-mcp: {flag}: {value!r} is not one of {choices}\n"
