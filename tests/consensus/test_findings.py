"""The rules of a review run (massgen_mcp.consensus.findings): what a review must hold, and
which findings a strict majority of the live members backs, from their answers and votes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from massgen_mcp.consensus.findings import ReviewProblem, outcome, parse_review, review_problem
from massgen_mcp.core.outcomes import ReviewOutcome, Severity, Tier, Verdict
from massgen_mcp.core.records import AgentPhase
from massgen_mcp.core.run_state import AgentResult, AnswerRecord, VoteRecord


def finding(file: str = "a.py", line: int = 3, severity: str = "major", **more: Any
            ) -> dict[str, Any]:
    return {"file": file, "line": line, "severity": severity, "category": "correctness",
            "claim": f"bug at {file}:{line}", **more}


def review(*found: dict[str, Any], rejects: list[dict[str, str]] | None = None,
           summary: str = "s") -> str:
    return json.dumps({"summary": summary, "findings": list(found), "rejects": rejects or []})


def team(*ids: str, dropped: tuple[str, ...] = ()) -> dict[str, AgentResult]:
    return {aid: AgentResult(model=f"m/{aid}", status=AgentPhase.VOTED, answers=1,
                             dropped_reason="timed out" if aid in dropped else None)
            for aid in ids}


def answers(**by_label: str) -> list[AnswerRecord]:
    agent = {"A": "a", "B": "b", "C": "c", "D": "d"}
    return [AnswerRecord(label=label, agent_id=agent[label[0]], model="m", revision=1,
                         content=content) for label, content in by_label.items()]


def votes(**by_voter: str) -> list[VoteRecord]:
    return [VoteRecord(voter=voter, answer=label, reason=f"{voter} likes {label}")
            for voter, label in by_voter.items()]


def test_a_review_is_one_json_object_in_the_format_asked() -> None:
    parsed = parse_review("Here is my review:\n```json\n" + review(
        finding("./src/x.py", 4, end_line=2, same_as="B1.2"),
        rejects=[{"finding": "C1.1", "reason": "  it is\nfine "}]) + "\n```")
    (claimed,) = parsed.findings
    assert (claimed.file, claimed.line, claimed.end_line) == ("src/x.py", 4, 4)
    assert claimed.same_as == "B1.2" and parsed.rejects == (("C1.1", "it is fine"),)
    assert parse_review(review()).findings == ()  # an empty list: the change is fine


@pytest.mark.parametrize(("content", "problem"), [
    ("LGTM", "one JSON object"),
    (review(finding(severity="critical")), "'severity' must be one of"),
    (review(finding(line=0)), "'line' must be a line number"),
    (review(finding(file="../../etc/passwd")), "must be a path inside the repository"),
    (review(finding(file="/etc/passwd")), "must be a path inside the repository"),
    (review(finding(file="C:\\x.py")), "must be a path inside the repository"),
    (review(finding(same_as="the other one")), "'same_as' must name a peer finding"),
    (review(rejects=[{"finding": "x", "reason": "r"}]), "name a peer finding such as B1.2"),
    (review(*[finding(line=i) for i in range(1, 52)]), "at most 50 findings"),
    (json.dumps({"findings": [{"file": "a.py", "line": 1, "severity": "nit"}]}),
     "non-empty 'claim'"),
])
def test_a_bad_review_is_sent_back_with_what_to_fix(content: str, problem: str) -> None:
    with pytest.raises(ReviewProblem, match=problem):
        parse_review(content)
    assert (review_problem(content) or "").endswith("as one JSON object.")


def test_model_text_loses_its_control_characters() -> None:
    (claimed,) = parse_review(review(finding(claim="bad\x1b]0;pwned\x07 thing",
                                             evidence="x = 1\x1b[2J\n"))).findings
    assert claimed.claim == "bad]0;pwned thing" and claimed.evidence == "x = 1[2J"


def test_a_finding_the_majority_backs_is_kept_with_who_raised_and_confirmed_it() -> None:
    """a raises the bug; b repeats it (same_as); c votes for a's review: 3 of 3. b's extra
    finding is backed by b alone: rejected, with c's reason for rejecting it."""
    result = outcome(
        answers(A1=review(finding()),
                B1=review(finding(same_as="A1.1"), finding("b.py", 9, "minor")),
                C1=review(rejects=[{"finding": "B1.2", "reason": "b.py is generated"}])),
        votes(a="A1", c="A1"), team("a", "b", "c"), threshold=Severity.MAJOR,
        winner_label="A1")
    (agreed,) = result.findings
    assert (agreed.id, agreed.raised_by, agreed.confirmed_by) == ("F1", "a", ["b", "c"])
    assert agreed.sources == ["A1.1", "B1.1"]
    (rejected,) = result.unconfirmed  # c alone disputes it: 1 of 3 is no majority
    assert rejected.raised_by == "b" and rejected.backers == ["b"] and rejected.reason is None
    assert rejected.disputed_by[0].reason == "b.py is generated"
    assert result.verdict is Verdict.CHANGES_REQUESTED and result.agreement == 2
    assert [(d.agent_id, d.voted_for) for d in result.dissent] == [("b", None)]


def test_findings_on_the_same_lines_and_category_are_one_without_a_link() -> None:
    result = outcome(answers(A1=review(finding(line=10, end_line=12)),
                             B1=review(finding(line=13))),
                     [], team("a", "b"), threshold=Severity.MAJOR, winner_label="A1")
    (agreed,) = result.findings
    assert agreed.confirmed_by == ["b"] and result.rejected == []


def test_two_findings_of_one_review_are_never_merged() -> None:
    result = outcome(answers(A1=review(finding(line=3), finding(line=4))),
                     [], team("a"), threshold=Severity.MAJOR, winner_label="A1")
    assert len(result.findings) == 2


def test_a_vote_for_a_peer_stands_over_the_voters_own_review() -> None:
    """b's nit is in b's review, but b's last action is a vote for a's review, which does
    not hold it: nobody backs the nit."""
    result = outcome(answers(A1=review(finding()), B1=review(finding(), finding("n.py", 1,
                                                                                 "nit"))),
                     votes(a="A1", b="A1"), team("a", "b"), threshold=Severity.MAJOR,
                     winner_label="A1")
    assert [f.file for f in result.findings] == ["a.py"]
    assert [(f.file, f.backers) for f in result.unconfirmed] == [("n.py", [])]


def test_half_is_not_a_majority_and_dropped_members_do_not_count() -> None:
    two = outcome(answers(A1=review(finding()), B1=review()), votes(b="B1"), team("a", "b"),
                  threshold=Severity.MAJOR, winner_label="B1")
    assert two.findings == [] and two.verdict is Verdict.APPROVE
    assert [f.backers for f in two.unconfirmed] == [["a"]]
    live_one = outcome(answers(A1=review(finding()), B1=review()), votes(a="A1"),
                       team("a", "b", dropped=("b",)), threshold=Severity.MAJOR,
                       winner_label="A1")
    assert len(live_one.findings) == 1 and live_one.members == 1
    assert live_one.dropped == ["b"]


def test_the_verdict_follows_the_severities_and_the_threshold() -> None:
    def verdict(severity: str, threshold: Severity) -> Verdict:
        return outcome(answers(A1=review(finding(severity=severity))), votes(a="A1"),
                       team("a"), threshold=threshold, winner_label="A1").verdict

    assert verdict("blocker", Severity.MAJOR) is Verdict.BLOCKED
    assert verdict("major", Severity.MAJOR) is Verdict.CHANGES_REQUESTED
    assert verdict("minor", Severity.MAJOR) is Verdict.APPROVE
    assert verdict("minor", Severity.MINOR) is Verdict.CHANGES_REQUESTED
    assert verdict("nit", Severity.NIT) is Verdict.CHANGES_REQUESTED


def test_the_severity_is_what_most_backers_signed() -> None:
    """a says blocker, b and c (same_as) say minor: the milder median, minor."""
    result = outcome(answers(A1=review(finding(severity="blocker")),
                             B1=review(finding(severity="minor", same_as="A1.1")),
                             C1=review(finding(severity="minor", same_as="A1.1"))),
                     [], team("a", "b", "c"), threshold=Severity.MAJOR, winner_label="A1")
    assert result.findings[0].severity is Severity.MINOR


def test_a_link_to_an_earlier_revision_still_names_its_author() -> None:
    """b confirms A1.1; a has since revised to A2 without it: raised by a, backed by b
    alone of two, unconfirmed."""
    result = outcome(answers(A2=review(), B1=review(finding(same_as="A1.1"))), [],
                     team("a", "b"), threshold=Severity.MAJOR, winner_label="A2")
    (unconfirmed,) = result.unconfirmed
    assert unconfirmed.raised_by == "a" and unconfirmed.confirmed_by == ["b"]
    assert unconfirmed.backers == ["b"]


def test_an_unparsable_recorded_review_backs_nothing() -> None:
    result = outcome(answers(A1="prose", B1=review(finding())), votes(a="B1"),
                     team("a", "b"), threshold=Severity.MAJOR, winner_label="B1")
    assert len(result.findings) == 1 and result.findings[0].confirmed_by == ["a"]


# -- three tiers, positions, and reviews with no verdict (issue 68) ------------------------


def test_identical_reviews_are_one_position_and_their_backers_count_together() -> None:
    """A tie between two empty reviews and a third: a and b voted for equal reviews, so
    the winning review has 2 of 3 backers (it read "1 of 3") and nothing is tied; c's lone
    finding, disputed by nobody, is unconfirmed."""
    result = outcome(answers(A1=review(), B1=review(), C1=review(finding())),
                     votes(a="A1", b="B1", c="C1"), team("a", "b", "c"),
                     threshold=Severity.MAJOR, winner_label="A1")
    assert (result.agreement, result.members, result.winner) == (2, 3, "A1")
    assert result.equal == ["B1"] and result.tied == [] and result.tie_break is None
    assert [d.agent_id for d in result.dissent] == ["c"]
    assert result.verdict is Verdict.APPROVE and result.findings == []
    (lone,) = result.unconfirmed
    assert (lone.id, lone.backers, lone.raised_by) == ("U1", ["c"], "c")


def test_a_tie_says_how_it_was_broken_and_the_winners_author_is_no_dissenter() -> None:
    """Two members, two different reviews, one vote each: a tie, broken by the team's
    order. a wrote the winning review but voted for b's: still not in the dissent."""
    result = outcome(answers(A1=review(), B1=review(finding())), votes(a="B1", b="A1"),
                     team("a", "b"), threshold=Severity.MAJOR, winner_label="A1")
    assert result.tied == ["A1", "B1"] and result.tie_break is not None
    assert "team's order" in result.tie_break
    assert [d.agent_id for d in result.dissent] == []  # b voted for A1; a wrote it


def test_a_blocker_one_member_raised_and_nobody_disputed_is_unconfirmed_not_rejected(
        ) -> None:
    """56.5 % of confirmed defects are found by exactly one model (Zenodo 20519585): a's
    blocker stands as unconfirmed. The verdict counts agreed findings unless told to count
    unconfirmed ones too."""
    def judged(tier: Tier) -> ReviewOutcome:
        return outcome(answers(A1=review(finding(severity="blocker")), B1=review(),
                               C1=review()), votes(a="A1", b="B1", c="C1"),
                       team("a", "b", "c"), threshold=Severity.MAJOR, winner_label="B1",
                       tier=tier)

    default = judged(Tier.AGREED)
    (lone,) = default.unconfirmed
    assert lone.tier is Tier.UNCONFIRMED and lone.backers == ["a"] and lone.reason is None
    assert default.rejected == [] and default.verdict is Verdict.APPROVE
    assert judged(Tier.UNCONFIRMED).verdict is Verdict.BLOCKED


def test_a_lone_finding_two_members_dispute_is_rejected_with_their_reasons() -> None:
    result = outcome(
        answers(A1=review(finding()),
                B1=review(rejects=[{"finding": "A1.1", "reason": "the loop is guarded"}]),
                C1=review(rejects=[{"finding": "A1.1", "reason": "tested in t.py"}])),
        votes(a="A1", b="B1", c="B1"), team("a", "b", "c"), threshold=Severity.MAJOR,
        winner_label="B1")
    (rejected,) = result.rejected
    assert (rejected.id, rejected.tier, rejected.backers) == ("R1", Tier.REJECTED, ["a"])
    assert [(s.agent_id, s.reason) for s in rejected.disputed_by] == [
        ("b", "the loop is guarded"), ("c", "tested in t.py")]
    assert rejected.reason == "the loop is guarded" and result.unconfirmed == []
    assert result.verdict is Verdict.APPROVE


def test_a_review_with_nothing_to_judge_by_is_inconclusive() -> None:
    """Every member dropped; a timeout before any vote; no usable review: no verdict."""
    dropped = outcome(answers(A1=review(finding(severity="blocker"))), votes(a="A1"),
                      team("a", "b", dropped=("a", "b")), threshold=Severity.MAJOR,
                      winner_label=None)
    assert dropped.verdict is Verdict.INCONCLUSIVE
    assert dropped.inconclusive == "every member was dropped"
    unvoted = outcome(answers(A1=review(finding(severity="blocker")), B1=review()), [],
                      team("a", "b", "c"), threshold=Severity.MAJOR, winner_label="A1")
    assert unvoted.verdict is Verdict.INCONCLUSIVE
    assert unvoted.inconclusive == "the team never voted"
    assert (unvoted.winner, unvoted.agreement, unvoted.dissent) == (None, 0, [])
    prose = outcome(answers(A1="LGTM"), [], team("a"), threshold=Severity.MAJOR,
                    winner_label="A1")
    assert prose.inconclusive == "no member wrote a usable review"


def test_a_finding_whose_raiser_moved_on_counts_only_its_backers() -> None:
    """b raised a finding, then voted for a's review without it; c voted for b's: backed by
    c alone (1 of 3), never "raised by b, confirmed by c (2 of 3)"."""
    result = outcome(answers(A1=review(), B1=review(finding())),
                     votes(a="A1", b="A1", c="B1"), team("a", "b", "c"),
                     threshold=Severity.MAJOR, winner_label="A1")
    (lone,) = result.unconfirmed
    assert lone.raised_by == "b" and lone.backers == ["c"] and lone.confirmed_by == ["c"]


def test_a_typo_in_a_severity_or_tier_is_one_line_with_the_choices() -> None:
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.core.outcomes import COUNTED_TIERS, named

    with pytest.raises(ConfigError, match=r"^--fail-on: 'majr' is not one of blocker, "
                                          r"major, minor, nit$"):
        named(Severity, "majr", "--fail-on")
    with pytest.raises(ConfigError, match=r"^fail_on_tier: 'rejected' is not one of "
                                          r"agreed, unconfirmed$"):
        named(Tier, "rejected", "fail_on_tier", COUNTED_TIERS)
    assert named(Tier, "Unconfirmed", "x") is Tier.UNCONFIRMED
