"""The records of what a team agreed: the agreement and the dissent every result carries
(:class:`Agreement`), and a review's findings and verdict (:class:`ReviewOutcome`), with the
one rule both use to name the dissent (:func:`dissent_of`).

They live apart from :mod:`massgen_mcp.core.records` so that the run's own records stay
one idea (what a run did); :class:`~massgen_mcp.core.run_state.ResultRecord` holds these.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Base of these records, as :class:`massgen_mcp.core.records.Record` is of the run's:
    tolerant of keys a newer release added (this module sits below that one)."""

    model_config = ConfigDict(extra="ignore")


class Severity(StrEnum):
    """How bad a review finding is, worst first (:attr:`rank` orders them)."""

    BLOCKER = "blocker"  # must not merge: data loss, a security hole, a crash on the main path
    MAJOR = "major"  # a real bug or risk that should be fixed before merging
    MINOR = "minor"  # worth fixing, not worth holding the change for
    NIT = "nit"  # taste; never changes a verdict

    @property
    def rank(self) -> int:
        return {"blocker": 3, "major": 2, "minor": 1, "nit": 0}[self.value]


class Verdict(StrEnum):
    """A review's outcome, from its agreed findings (:class:`ReviewOutcome`)."""

    APPROVE = "approve"
    CHANGES_REQUESTED = "changes_requested"
    BLOCKED = "blocked"  # an agreed blocker


class ReviewTarget(Record):
    """What a review run reviews, set by the review faces (never by ``run_consensus``):
    its answers must be reviews (:mod:`massgen_mcp.consensus.findings`) and its result
    carries a :class:`ReviewOutcome`."""

    root: str  # the repository's top folder
    commit: str | None = None  # the reviewed side is this commit's tree; None: the work tree
    described: str = ""  # e.g. "the changes since the merge base with main"
    files: list[str] = []  # the changed files, in diff order
    # The least severity of an agreed finding that requests changes (a blocker blocks).
    threshold: Severity = Severity.MAJOR
    # What the run was sent, for the outcome's coverage: the changed lines of ``files``,
    # and each file left out of the diff with why ("path: why").
    lines: int = 0
    left_out: list[str] = []
    part: int = 0  # a diff reviewed in parts: this run's part (1, 2, ...); 0: the whole diff
    parts: int = 0


class Stance(Record):
    """A member's stand on a finding, with its reason in one line."""

    agent_id: str
    reason: str


class Finding(Record):
    """One finding of a review, as the team's recorded actions settled it: raised in a
    member's review, confirmed by members whose own review holds it (``same_as``, or the same
    lines and category) or who voted for a review that holds it, disputed by members whose
    review rejects it."""

    id: str  # F1, F2, ... in the outcome's order (rejected ones: R1, R2, ...)
    file: str  # relative to the repository, '/'-separated
    line: int  # on the new side, 1-based
    end_line: int
    severity: Severity
    category: str
    claim: str
    evidence: str = ""  # the lines that show it, quoted
    fix: str = ""
    raised_by: str  # agent id
    confirmed_by: list[str] = []  # agent ids, raiser excluded
    disputed_by: list[Stance] = []
    sources: list[str] = []  # the findings in members' reviews it gathers, e.g. ["B1.2"]
    reason: str | None = None  # a rejected finding: why the majority did not back it
    # Set when the finding is not on the reviewed change: its file is not in it, or its
    # lines are not in the diff's hunks (a member read the file with its tools).
    outside: str | None = None


class Dissent(Record):
    """A live member that did not back the winning review, and why, in one line."""

    agent_id: str
    model: str
    voted_for: str | None = None  # the answer label it voted for; None: no standing vote
    reason: str


class RunnerUp(Record):
    """The strongest answer that lost: the most votes after the winner's (ties: the agent
    listed first), with a short excerpt and each of its voters' reasons."""

    label: str
    agent_id: str
    model: str
    excerpt: str
    votes: int
    voters: list[Stance] = []


class Agreement(Record):
    """How much of the team backs the result, and who did not: part of every result, so a
    host hears the dissent without asking for ``detail="full"``."""

    backing: int  # live members whose standing vote is for the winning answer
    members: int  # live members
    runner_up: RunnerUp | None = None
    dissent: list[Dissent] = []  # live members not backing the winner, each with its reason
    dropped: list[str] = []  # agent ids that failed on the way
    late: list[str] = []  # agent ids that never answered (a decision came first)


EXCERPT_CHARS = 300
DISSENT_REASON_CHARS = 300


def one_line(text: str, limit: int = DISSENT_REASON_CHARS) -> str:
    """``text`` on one line, cut at ``limit`` characters (with " …")."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " …"


class Vote(Protocol):
    """A standing vote as :func:`dissent_of` reads it (a result's ``VoteRecord``)."""

    @property
    def voter(self) -> str: ...
    @property
    def answer(self) -> str: ...
    @property
    def reason(self) -> str: ...


def dissent_of(live: list[str], votes: Sequence[Vote], winner_label: str | None,
               models: dict[str, str], fallback: dict[str, str] | None = None
               ) -> list[Dissent]:
    """Each live member whose standing vote is not for ``winner_label``, with its vote's
    reason; without a vote, ``fallback``'s reason for it (a review's summary) or "did not
    vote". One rule for every result and every review."""
    standing = {vote.voter: vote for vote in votes}
    found: list[Dissent] = []
    for aid in live:
        vote = standing.get(aid)
        if vote is not None and vote.answer == winner_label:
            continue
        reason = (vote.reason if vote is not None and vote.reason
                  else (fallback or {}).get(aid) or
                  ("gave no reason" if vote is not None else "did not vote"))
        found.append(Dissent(agent_id=aid, model=models.get(aid, ""),
                             voted_for=vote.answer if vote is not None else None,
                             reason=one_line(reason)))
    return found


class Coverage(Record):
    """What a review covered: the files and changed lines its members were sent, and what
    was left out, each with why (a secret or binary file, a hunk over a part's size, a part
    that failed). A review that covered nothing has no verdict to give."""

    files: list[str] = []  # reviewed
    lines: int = 0  # changed lines (added and removed) reviewed
    total_lines: int = 0  # changed lines in the parts sent, reviewed or not
    left_out: list[str] = []  # "path: why"
    parts: int = 1  # review runs the diff was split into
    failed_parts: list[int] = []  # those that ended without a review (1-based)

    @property
    def percent(self) -> float:
        """Changed lines reviewed, of those sent (100 for a change with none, e.g. renames)."""
        return 100.0 if self.total_lines == 0 else 100.0 * self.lines / self.total_lines

    def words(self) -> str:
        """One line: ``coverage: 60 files, 41,200 of 41,200 changed lines (100%) in 9
        parts; left out: .env (on the secret-file deny-list)``."""
        split = f" in {self.parts} parts" if self.parts > 1 else ""
        failed = (f", {len(self.failed_parts)} failed (part "
                  f"{', '.join(map(str, self.failed_parts))})" if self.failed_parts else "")
        line = (f"coverage: {len(self.files)} file{'' if len(self.files) == 1 else 's'}, "
                f"{self.lines:,} of {self.total_lines:,} changed lines ({self.percent:.0f}%)"
                f"{split}{failed}")
        if self.left_out:
            shown = "; ".join(self.left_out[:10])
            more = f"; and {len(self.left_out) - 10} more" if len(self.left_out) > 10 else ""
            line += f"; left out: {shown}{more}"
        return line


class ReviewOutcome(Record):
    """What the team agreed on a change: the findings a strict majority of the live members
    backs, the ones it did not (with its reason), the verdict they give, the agreement and
    the dissent. Computed from the members' recorded answers and votes only
    (:func:`massgen_mcp.consensus.findings.outcome`), never from a presenter's prose."""

    verdict: Verdict
    threshold: Severity
    agreement: int  # live members whose standing vote backs the winning review
    members: int  # live members
    summary: str = ""  # the winning review's summary line
    findings: list[Finding] = []
    rejected: list[Finding] = []
    dissent: list[Dissent] = []
    dropped: list[str] = []  # agent ids that did not last the run
    coverage: Coverage | None = None  # None: a record written before coverage was kept
