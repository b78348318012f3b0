"""The records of what a team agreed: the agreement and the dissent every result carries
(:class:`Agreement`), and a review's findings and verdict (:class:`ReviewOutcome`), with the
one rule both use to name the dissent (:func:`dissent_of`).

They live apart from :mod:`massgen_mcp.core.records` so that the run's own records stay
one idea (what a run did); :class:`~massgen_mcp.core.run_state.ResultRecord` holds these.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from enum import StrEnum
from typing import Annotated, Literal, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict

from massgen_mcp.core.edges import without_controls
from massgen_mcp.core.errors import ConfigError

ModelText = Annotated[str, AfterValidator(without_controls)]
"""Text a model wrote (a claim, a vote's reason, a summary), kept in a record that every output
renders: a terminal, ``--json`` read by ``jq -r``, a pull request, SARIF, the HTML report. It
holds no control or bidirectional character (:func:`~massgen_mcp.core.edges.without_controls`),
whoever built the record and whichever file it was read back from: one rule at the record,
so no output has to remember it."""


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
    """A review's outcome, from the findings it counts (:class:`ReviewOutcome`)."""

    APPROVE = "approve"
    CHANGES_REQUESTED = "changes_requested"
    BLOCKED = "blocked"  # a counted blocker
    # No verdict: the team never voted, every member was dropped, or no member wrote a usable
    # review (:attr:`ReviewOutcome.inconclusive` says which).
    INCONCLUSIVE = "inconclusive"


class Tier(StrEnum):
    """How much of the team stands behind a finding: a review's three lists.

    One model alone finds many real defects (in a study of 154 confirmed defects reviewed by
    8 models, 56.5 % were found by exactly one: Zenodo record 20519585, 2026), so a finding
    that fewer than a majority back is not thereby wrong: it is *unconfirmed* until a
    majority disputes it."""

    AGREED = "agreed"  # a strict majority of the live members backs it
    UNCONFIRMED = "unconfirmed"  # backed by fewer, and disputed by no majority
    REJECTED = "rejected"  # a strict majority of the live members disputes it

    @property
    def rank(self) -> int:
        return {"agreed": 2, "unconfirmed": 1, "rejected": 0}[self.value]


# The tiers a verdict may count down to (a rejected finding never counts).
COUNTED_TIERS = (Tier.AGREED, Tier.UNCONFIRMED)


Named = TypeVar("Named", bound=StrEnum)


def named(kind: type[Named], value: object, field: str,
          allowed: Sequence[Named] | None = None) -> Named:
    """``value`` as one of ``kind``'s names (a severity, a tier; only ``allowed`` ones when
    given), or one line naming the field and the choices: "--fail-on: 'majr' is not one of
    blocker, major, minor, nit"."""
    members = list(kind) if allowed is None else list(allowed)
    found = next((m for m in members if m.value == str(value).strip().lower()), None)
    if found is None:
        choices = ", ".join(member.value for member in members)
        raise ConfigError(f"{field}: {str(value)[:40]!r} is not one of {choices}")
    return found


class ReviewOutput(Record):
    """How the command line that started a review shows its outcome: stdout's format and
    the ``--fail-on`` that gates the exit code (None: exit 0 whatever the verdict).
    Recorded with the review, so that ``resume`` of a stopped one ends as it would have."""

    format: Literal["text", "markdown", "sarif", "json", "github"] = "text"
    fail_on: Severity | None = None


class ReviewTarget(Record):
    """What a review run reviews, set by the review faces (never by ``run_consensus``):
    its answers must be reviews (:mod:`massgen_mcp.consensus.findings`) and its result
    carries a :class:`ReviewOutcome`."""

    root: str  # the repository's top folder
    commit: str | None = None  # the reviewed side is this commit's tree; None: the work tree
    described: str = ""  # e.g. "the changes since the merge base with main"
    files: list[str] = []  # the changed files, in diff order
    # The least severity of a counted finding that requests changes (a blocker blocks).
    threshold: Severity = Severity.MAJOR
    # What the run was sent, for the outcome's coverage: the changed lines of ``files``,
    # and each file left out of the diff with why ("path: why").
    lines: int = 0
    left_out: list[str] = []
    part: int = 0  # a diff reviewed in parts: this run's part (1, 2, ...); 0: the whole diff
    parts: int = 0
    # The least tier the verdict counts: agreed findings only, or unconfirmed ones too.
    tier: Tier = Tier.AGREED
    output: ReviewOutput = ReviewOutput()  # the command line's; resume shows it so again

    def title(self) -> str:
        """What ``sessions`` and ``show`` call the review, instead of its long prompt:
        ``review: the working tree against HEAD, 3 files``."""
        count = len(self.files)
        return f"review: {self.described}, {count} file{'' if count == 1 else 's'}"


class Stance(Record):
    """A member's stand on a finding, with its reason in one line."""

    agent_id: str
    reason: ModelText


class Finding(Record):
    """One finding of a review, as the team's recorded actions settled it: raised in a
    member's review, confirmed by members whose own review holds it (``same_as``, or the same
    lines and category) or who voted for a review that holds it, disputed by members whose
    review rejects it. Its support (``backers`` of the outcome's ``members``) is computed once,
    here, and every output shows it."""

    id: str  # F1, F2, ... in the outcome's order (unconfirmed: U1, ...; rejected: R1, ...)
    tier: Tier = Tier.AGREED
    file: str  # relative to the repository, '/'-separated
    line: int  # on the new side, 1-based
    end_line: int
    severity: Severity
    category: ModelText
    claim: ModelText
    evidence: ModelText = ""  # the lines that show it, quoted
    fix: ModelText = ""
    raised_by: str  # agent id
    confirmed_by: list[str] = []  # agent ids, raiser excluded
    # The live members that back it (the raiser among them unless it no longer does), in
    # the team's order: its support is len(backers) of the outcome's members.
    backers: list[str] = []
    disputed_by: list[Stance] = []
    sources: list[str] = []  # the findings in members' reviews it gathers, e.g. ["B1.2"]
    reason: ModelText | None = None  # a rejected finding: why the majority disputed it
    # Set when the finding is not on the reviewed change: its file is not in it, or its
    # lines are not in the diff's hunks (a member read the file with its tools).
    outside: str | None = None


class Dissent(Record):
    """A live member that did not back the winning review, and why, in one line."""

    agent_id: str
    model: str
    voted_for: str | None = None  # the answer label it voted for; None: no standing vote
    reason: ModelText


class RunnerUp(Record):
    """The strongest answer that lost: the most votes after the winner's (ties: the agent
    listed first), with a short excerpt and each of its voters' reasons."""

    label: str
    agent_id: str
    model: str
    excerpt: ModelText
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


def dissent_of(live: list[str], votes: Sequence[Vote], winners: Collection[str],
               models: dict[str, str], fallback: dict[str, str] | None = None,
               backing: Collection[str] = ()) -> list[Dissent]:
    """Each live member whose standing vote is not for one of ``winners`` (the winning
    answer's label; a review's: the labels of the reviews equal to it), with its vote's
    reason; without a vote, ``fallback``'s reason for it (a review's summary) or "did not
    vote". Members in ``backing`` back the winner whatever their vote says (a review's: the
    winning review's author, and members without a vote whose own review is the winning
    one). One rule for every result and every review."""
    standing = {vote.voter: vote for vote in votes}
    found: list[Dissent] = []
    for aid in live:
        vote = standing.get(aid)
        if aid in backing or (vote is not None and vote.answer in winners):
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
    """What the team agreed on a change, in three tiers (:class:`Tier`): the findings a
    strict majority of the live members backs, those fewer back and no majority disputes,
    and those a majority disputes (with their reasons); the verdict the counted ones give,
    the agreement and the dissent. Computed from the members' recorded answers and votes
    only (:func:`massgen_mcp.consensus.findings.outcome`), never from a presenter's prose."""

    verdict: Verdict
    threshold: Severity
    tier: Tier = Tier.AGREED  # the least tier the verdict counts
    inconclusive: str | None = None  # why there is no verdict (verdict: inconclusive)
    # Live members whose position is the winning review's: a standing vote for it or for a
    # review equal to it (the same findings after merging), or, without a vote, their own
    # review equal to it.
    agreement: int
    members: int  # live members
    winner: str | None = None  # the winning review's label
    equal: list[str] = []  # the other reviews equal to the winning one, counted with it
    # A tie between positions, each written as its labels ("A1=B1"), and how it was broken.
    tied: list[str] = []
    tie_break: str | None = None
    summary: ModelText = ""  # the winning review's own summary line (its author's words)
    winner_by: str | None = None  # the winning review's author (who wrote ``summary``)
    findings: list[Finding] = []  # agreed
    unconfirmed: list[Finding] = []
    rejected: list[Finding] = []
    dissent: list[Dissent] = []
    dropped: list[str] = []  # agent ids that did not last the run
    coverage: Coverage | None = None  # None: a record written before coverage was kept
