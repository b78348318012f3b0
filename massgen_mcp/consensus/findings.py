"""The rules of a review run: what a member's review must hold, and which findings the team
agrees on, as pure functions of the recorded answers and votes.

A review is an ordinary consensus run whose answers are reviews. The protocol stays the
consensus protocol (anonymous peers, vote or revise, a new answer clears the votes); only
the meaning of the two actions is pinned down, so that who backs what is read from the
members' own actions, never from a presenter's prose:

* **A member's review** (its answer) is one JSON object (:func:`parse_review`): a one-line
  ``summary``, its ``findings`` (file, line range on the new side, severity, category, claim,
  quoted evidence, fix) and the peer findings it ``rejects``, each with a reason. Peers name
  a finding by its answer's label and its place: ``B1.2`` is the second finding of ``B1``.
  A finding that repeats a peer's says so with ``same_as``.
* **Revising** (a new answer) restates the member's whole review: findings it confirms from
  peers (``same_as``), its own, and the peer findings it rejects.
* **Voting** for a review endorses every finding in it and says it misses nothing that
  matters: the vote is the member's last action, so it stands over its own earlier review
  (a member that votes for a peer's review no longer backs a finding only its own held).

:func:`outcome` groups the findings of the current reviews into one finding each (a
``same_as`` link, or two members' findings on the same file, overlapping lines and category),
and keeps those a **strict majority of the live members** backs: a member backs a finding
when its standing vote is for a review that holds it or, without a standing vote (its turn
was cut short by the decision), when its own current review does. Of the rest,
those a strict majority disputes are *rejected* (with their reasons), and the others are
*unconfirmed*: one model alone finds many real defects, so a finding fewer back is not thereby
wrong. The verdict follows from the counted findings' severities (the agreed ones, or the
unconfirmed ones too) and the run's threshold; a record with no live member, no usable
review or no vote gives none (*inconclusive*). Reviews with the same findings after merging
are one position: their backers count together.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from massgen_mcp.core.edges import (
    UnsafeJson,
    find_json_object,
    has_control_characters,
    without_controls,
)
from massgen_mcp.core.outcomes import (
    Coverage,
    Finding,
    ReviewOutcome,
    ReviewTarget,
    Severity,
    Stance,
    Tier,
    Verdict,
    dissent_of,
)
from massgen_mcp.core.records import AgentPhase
from massgen_mcp.core.run_state import AgentResult, AnswerRecord, VoteRecord

MAX_FINDINGS = 50  # per review: a longer list is a dump, not a review
MAX_REJECTS = 50
MAX_PATH_CHARS = 300
MAX_LINE = 10_000_000
CLAIM_CHARS = 1_000
EVIDENCE_CHARS = 2_000
FIX_CHARS = 2_000
REASON_CHARS = 300
SUMMARY_CHARS = 500
CATEGORIES = ("correctness", "security", "performance", "breaking-change", "tests",
              "error-handling", "concurrency", "maintainability", "docs", "other")
# Two members' findings on the same file and category whose line ranges come this close are
# one finding (models quote a range a line or two apart).
NEAR_LINES = 2
_ID = re.compile(r"\A([A-H])(\d{1,3})\.(\d{1,3})\Z")
_BAD_PATH = re.compile(r"(\A/|\A[A-Za-z]:|\\|(?:\A|/)\.\.(?:/|\Z))")

FORMAT = """\
Answer (new_answer) with your review as one JSON object:
{"summary": "<one line: your overall judgement>",
 "findings": [{"file": "<path>", "line": <first line, new side>, "end_line": <last line>,
   "severity": "blocker|major|minor|nit", "category": "<one of: CATEGORIES>",
   "claim": "<what is wrong and why>", "evidence": "<the lines that show it, quoted>",
   "fix": "<what to do>", "same_as": "<optional: a peer finding you confirm, e.g. B1.2>"}],
 "rejects": [{"finding": "<a peer finding you disagree with, e.g. A1.1>",
   "reason": "<one line>"}]}
An empty "findings" list says the change is fine. Peer findings are named by their review's
label and place: B1.2 is the second finding of review B1. To confirm a peer's finding, repeat
it in your findings with "same_as"; to dispute one, list it in "rejects". Voting for a review
means you agree with every finding in it and that it misses nothing important; otherwise
answer with your revised review (it replaces your earlier one).""".replace(
    "CATEGORIES", ", ".join(CATEGORIES))


@dataclass(frozen=True)
class Claimed:
    """One finding as a member's review states it."""

    file: str
    line: int
    end_line: int
    severity: Severity
    category: str
    claim: str
    evidence: str
    fix: str
    same_as: str | None


@dataclass(frozen=True)
class Review:
    """A member's review, checked."""

    summary: str
    findings: tuple[Claimed, ...]
    rejects: tuple[tuple[str, str], ...]  # (peer finding id, reason)


class ReviewProblem(ValueError):
    """What is wrong with a review, phrased for the model that wrote it."""


def _text(item: dict[str, object], key: str, limit: int, *, required: bool = False) -> str:
    value = item.get(key)
    if value is None or value == "":
        if required:
            raise ReviewProblem(f"each finding needs a non-empty {key!r} string")
        return ""
    if not isinstance(value, str):
        raise ReviewProblem(f"{key!r} must be a string")
    # Shown in terminals, PR comments and SARIF viewers: no control character survives.
    value = without_controls(value)
    value = " ".join(value.split()) if key in ("claim", "reason", "summary") else value.strip()
    return value if len(value) <= limit else value[:limit - 1] + "…"


def _line(item: dict[str, object], key: str) -> int | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LINE:
        raise ReviewProblem(f"{key!r} must be a line number (1 or more)")
    return value


def _path(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ReviewProblem("each finding needs a 'file': a path relative to the repository")
    path = value.strip()
    if path.startswith("./"):
        path = path[2:]
    for prefix in ("a/", "b/"):  # copied from a diff header
        if path.startswith(prefix):
            path = path[2:]
            break
    if (len(path) > MAX_PATH_CHARS or has_control_characters(path) or _BAD_PATH.search(path)):
        raise ReviewProblem(f"'file' {path[:80]!r} must be a path inside the repository, "
                            "relative, with '/' between folders")
    return path


def _finding(item: object) -> Claimed:
    if not isinstance(item, dict):
        raise ReviewProblem("each finding must be a JSON object")
    line = _line(item, "line")
    if line is None:
        raise ReviewProblem("each finding needs a 'line' (its first line on the new side)")
    end = _line(item, "end_line") or line
    severity = item.get("severity")
    if severity not in tuple(Severity):
        raise ReviewProblem("'severity' must be one of blocker, major, minor, nit")
    category = str(item.get("category") or "other").strip().lower()
    same_as = item.get("same_as")
    if same_as is not None and same_as != "" and (
            not isinstance(same_as, str) or not _ID.match(same_as.strip())):
        raise ReviewProblem("'same_as' must name a peer finding such as B1.2")
    return Claimed(file=_path(item.get("file")), line=line, end_line=max(line, end),
                   severity=Severity(str(severity)),
                   category=category if category in CATEGORIES else "other",
                   claim=_text(item, "claim", CLAIM_CHARS, required=True),
                   evidence=_text(item, "evidence", EVIDENCE_CHARS),
                   fix=_text(item, "fix", FIX_CHARS),
                   same_as=same_as.strip() if isinstance(same_as, str) and same_as else None)


def parse_review(content: str) -> Review:
    """The review in an answer's ``content`` (one JSON object, perhaps in a code fence or
    after a line of prose); :class:`ReviewProblem` says what to fix."""
    try:
        value = find_json_object(content)
    except UnsafeJson as exc:
        raise ReviewProblem(f"your review's JSON is not usable: {exc}") from None
    if not isinstance(value, dict) or "findings" not in value:
        raise ReviewProblem('your answer must be your review as one JSON object with '
                            '"summary", "findings" and "rejects"')
    findings, rejects = value.get("findings"), value.get("rejects") or []
    if not isinstance(findings, list) or not isinstance(rejects, list):
        raise ReviewProblem('"findings" and "rejects" must be lists')
    findings = _distinct(findings)  # a finding repeated word for word is one finding
    if len(findings) > MAX_FINDINGS or len(rejects) > MAX_REJECTS:
        raise ReviewProblem(f"at most {MAX_FINDINGS} findings and {MAX_REJECTS} rejects; "
                            "keep the ones that matter")
    refused: list[tuple[str, str]] = []
    for item in rejects:
        if not isinstance(item, dict):
            raise ReviewProblem('each reject must be {"finding": "B1.2", "reason": "..."}')
        target = str(item.get("finding") or "").strip()
        if not _ID.match(target):
            raise ReviewProblem(f"reject {target[:20]!r}: name a peer finding such as B1.2")
        refused.append((target, _text(item, "reason", REASON_CHARS) or "no reason given"))
    return Review(summary=_text(value, "summary", SUMMARY_CHARS),
                  findings=tuple(_finding(item) for item in findings),
                  rejects=tuple(refused))


def review_problem(content: str) -> str | None:
    """Why ``content`` is not a usable review (for the corrective retry), or None."""
    try:
        parse_review(content)
    except ReviewProblem as exc:
        return f"{exc}. Send your whole review again as one JSON object."
    return None


# -- the team's outcome --------------------------------------------------------------------


@dataclass
class _Node:
    """A finding in one current review: ``B1.2``."""

    id: str
    label: str
    agent_id: str
    claimed: Claimed


class _Groups:
    """Union-find over finding ids that never puts two findings of one review together."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.labels: dict[str, set[str]] = {}

    def add(self, node_id: str, label: str | None) -> None:
        if node_id not in self.parent:
            self.parent[node_id] = node_id
            self.labels[node_id] = {label} if label else set()

    def root(self, node_id: str) -> str:
        while self.parent[node_id] != node_id:
            self.parent[node_id] = self.parent[self.parent[node_id]]
            node_id = self.parent[node_id]
        return node_id

    def join(self, a: str, b: str) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra == rb or self.labels[ra] & self.labels[rb]:
            return
        first, second = sorted((ra, rb), key=_id_order)
        self.parent[second] = first
        self.labels[first] |= self.labels.pop(second)


def _id_order(node_id: str) -> tuple[int, str, int]:
    match = _ID.match(node_id)
    assert match is not None
    return int(match.group(2)), match.group(1), int(match.group(3))


def _near(a: Claimed, b: Claimed) -> bool:
    return (a.file == b.file and a.category == b.category
            and a.line <= b.end_line + NEAR_LINES and b.line <= a.end_line + NEAR_LINES)


def _parsed(answers: Sequence[AnswerRecord]) -> dict[str, tuple[AnswerRecord, Review]]:
    """The current reviews that parse (a resumed run's record edited by hand may hold one
    that does not: it then backs nothing)."""
    reviews: dict[str, tuple[AnswerRecord, Review]] = {}
    for answer in answers:
        try:
            reviews[answer.label] = (answer, parse_review(answer.content))
        except ReviewProblem:
            continue
    return reviews


def _severity(found: list[Severity]) -> Severity:
    """The backers' severity: the median, the milder of the middle two (a finding's
    severity is what most of its backers would sign)."""
    ordered = sorted(found, key=lambda s: s.rank)
    return ordered[(len(ordered) - 1) // 2]


def outcome(answers: Sequence[AnswerRecord], votes: Sequence[VoteRecord],
            agents: dict[str, AgentResult], *, threshold: Severity,
            winner_label: str | None, tier: Tier = Tier.AGREED) -> ReviewOutcome:
    """What the team agreed, from the current reviews (``answers``), the standing votes and
    who is still live (``agents``' ``dropped_reason``): each finding in its tier, the
    positions (equal reviews are one), the winning one with its backing and dissent, and the
    verdict from the findings of ``tier`` or stronger; inconclusive when there is nothing to
    judge by."""
    live = [aid for aid, agent in agents.items()
            if agent.dropped_reason is None and agent.status is not AgentPhase.RESERVE]
    team_order = list(agents)
    reviews = _parsed(answers)
    letters = {answer.label[0]: answer.agent_id for answer in answers}
    nodes: dict[str, _Node] = {}
    groups = _Groups()
    for label, (answer, review) in reviews.items():
        for place, claimed in enumerate(review.findings, 1):
            node = _Node(f"{label}.{place}", label, answer.agent_id, claimed)
            nodes[node.id] = node
            groups.add(node.id, label)
    for node in nodes.values():  # explicit links first, then findings that coincide
        if node.claimed.same_as and node.claimed.same_as in nodes:
            groups.join(node.id, node.claimed.same_as)
    ordered = sorted(nodes.values(), key=lambda n: _id_order(n.id))
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if a.agent_id != b.agent_id and _near(a.claimed, b.claimed):
                groups.join(a.id, b.id)
    members: dict[str, list[_Node]] = {}
    for node in ordered:
        members.setdefault(groups.root(node.id), []).append(node)
    standing = {vote.voter: vote for vote in votes if vote.voter in live}
    settled = [_settle(group, reviews, standing, live, letters, team_order)
               for group in members.values()]
    found = {t: _numbered([f for f in settled if f.tier is t], prefix)
             for t, prefix in ((Tier.AGREED, "F"), (Tier.UNCONFIRMED, "U"),
                               (Tier.REJECTED, "R"))}
    stand = _Positions(reviews, groups, standing, live, team_order)
    why = _inconclusive(live, reviews, standing)
    # Without a verdict there is no winning review either: a best answer the votes never
    # backed would read as the team's.
    won = _NO_WINNER if why else stand.winning(winner_label)
    author = reviews[won.label][0].agent_id if won.label in reviews else None
    counted = [f for t in Tier if t.rank >= tier.rank for f in found[t]]
    # The winner's author and members without a vote whose own review is the winning one
    # back it; without a winning review there is nothing to dissent from.
    backing = {aid for aid in live if aid == author or (
        won.position is not None and aid not in standing and stand.own(aid) == won.position)}
    dissent = [] if why else dissent_of(
        live, list(standing.values()), won.labels,
        {aid: agent.model for aid, agent in agents.items()},
        {a.agent_id: r.summary for a, r in reviews.values() if r.summary}, backing=backing)
    return ReviewOutcome(
        verdict=Verdict.INCONCLUSIVE if why else verdict(counted, threshold),
        threshold=threshold, tier=tier, inconclusive=why, agreement=won.backing,
        members=len(live), winner=won.label,
        equal=[label for label in won.labels if label != won.label],
        tied=won.tied, tie_break=won.tie_break,
        summary=reviews[won.label][1].summary if won.label in reviews else "",
        winner_by=author,
        findings=found[Tier.AGREED], unconfirmed=found[Tier.UNCONFIRMED],
        rejected=found[Tier.REJECTED],
        dissent=dissent,
        dropped=[aid for aid, agent in agents.items() if agent.dropped_reason is not None])


def _inconclusive(live: list[str], reviews: dict[str, tuple[AnswerRecord, Review]],
                  standing: dict[str, VoteRecord]) -> str | None:
    """Why the team's record gives no verdict, or None: with no live member, no usable
    review or no vote, an approve would say what nobody said."""
    if not live:
        return "every member was dropped"
    if not any(answer.agent_id in live for answer, _ in reviews.values()):
        return "no member wrote a usable review"
    if not standing:
        return "the team never voted"
    return None


@dataclass(frozen=True)
class _Won:
    """The winning position: its labels (the winning review first), its backing, and the tie
    it won, if any."""

    label: str | None
    labels: list[str]
    position: frozenset[str] | None
    backing: int
    tied: list[str]
    tie_break: str | None


_NO_WINNER = _Won(label=None, labels=[], position=None, backing=0, tied=[], tie_break=None)


class _Positions:
    """Where each live member stands: a position is a review's set of findings (after
    merging), so equal reviews (two empty ones included) are one position. A member stands
    where its standing vote is, or, without one (its turn was cut short by the decision),
    on its own current review."""

    def __init__(self, reviews: dict[str, tuple[AnswerRecord, Review]], groups: _Groups,
                 standing: dict[str, VoteRecord], live: list[str],
                 team_order: list[str]) -> None:
        self.of_label = {label: frozenset(groups.root(f"{label}.{place}")
                                          for place in range(1, len(review.findings) + 1))
                         for label, (_, review) in reviews.items()}
        self.own_label = {answer.agent_id: label for label, (answer, _) in reviews.items()}
        self.author = {label: answer.agent_id for label, (answer, _) in reviews.items()}
        self.order = {aid: i for i, aid in enumerate(team_order)}
        self.votes = {aid: vote.answer for aid, vote in standing.items()}
        self.held: dict[str, frozenset[str]] = {}
        for aid in live:
            label = self.votes.get(aid) or self.own_label.get(aid)
            position = self.position(label)
            if position is not None:
                self.held[aid] = position

    def position(self, label: str | None) -> frozenset[str] | None:
        if label is None:
            return None
        # A vote for a review that does not parse stands alone (a planted record's).
        return self.of_label.get(label, frozenset({f"?{label}"}))

    def own(self, aid: str) -> frozenset[str] | None:
        return self.position(self.own_label.get(aid))

    def labels(self, position: frozenset[str]) -> list[str]:
        """The reviews in ``position``, their authors in the team's order."""
        return sorted((label for label, p in self.of_label.items() if p == position),
                      key=lambda label: (self.order.get(self.author[label], len(self.order)),
                                         label))

    def winning(self, winner_label: str | None) -> _Won:
        """The position most live members hold. The run's winner keeps it when its position
        is among the most held; otherwise (equal reviews counted together outnumber it) the
        most held, ties to the position of the member listed first in the team."""
        count: dict[frozenset[str], int] = {}
        for held in self.held.values():
            count[held] = count.get(held, 0) + 1
        mine = self.position(winner_label)
        best = max(count.values(), default=0)
        top = sorted((p for p, n in count.items() if n == best), key=self._first)
        position: frozenset[str] | None = mine if mine in top or not top else top[0]
        labels = self.labels(position) if position is not None else []
        if winner_label is not None and position == mine:
            labels = [winner_label, *(label for label in labels if label != winner_label)]
        label = labels[0] if labels else winner_label
        tied, tie_break = [], None
        if len(top) > 1 and position is not None:
            ranked = [position, *(p for p in top if p != position)]  # the winner's first
            tied = ["=".join(self.labels(p)) or "?" for p in ranked]
            single = {p: max((sum(1 for v in self.votes.values() if v == lbl)
                              for lbl in self.labels(p)), default=0) for p in top}
            outvoted = all(single[position] > single[p] for p in top if p != position)
            tie_break = ("the most votes for a single review" if outvoted else
                         "the team's order: the member listed first wins a tie")
        return _Won(label=label, labels=labels or ([label] if label else []),
                    position=position,
                    backing=count.get(position, 0) if position is not None else 0,
                    tied=tied, tie_break=tie_break)

    def _first(self, position: frozenset[str]) -> int:
        return min((self.order.get(aid, len(self.order))
                    for aid, p in self.held.items() if p == position), default=len(self.order))


def _settle(group: list[_Node], reviews: dict[str, tuple[AnswerRecord, Review]],
            standing: dict[str, VoteRecord], live: list[str],
            letters: dict[str, str], team_order: list[str]) -> Finding:
    """One finding from the nodes that state it, in its tier: agreed when a strict majority
    of the live members backs it, rejected when a strict majority disputes it, else
    unconfirmed."""
    labels = {node.label: node for node in group}
    stated: dict[str, Severity] = {}  # backer -> the severity it signed
    for node in group:  # a member without a standing vote backs its own review
        if node.agent_id in live and node.agent_id not in standing:
            stated[node.agent_id] = node.claimed.severity
    for voter, vote in standing.items():
        # A vote is the member's last action (a new answer clears it): it backs the voted
        # review's findings, and only those, over the member's own earlier review.
        if vote.answer in labels:
            stated[voter] = labels[vote.answer].claimed.severity
    ids = {node.id for node in group} | {n.claimed.same_as for n in group
                                         if n.claimed.same_as}
    disputed: list[Stance] = []
    for answer, review in reviews.values():
        if answer.agent_id in stated or answer.agent_id not in live:
            continue
        reason = next((why for target, why in review.rejects if target in ids), None)
        if reason is not None:
            disputed.append(Stance(agent_id=answer.agent_id, reason=reason))
    # Raised by: the author of the earliest revision that states it (a same_as that names
    # an earlier revision still names its author); among findings made independently in
    # the same round, the agent listed first in the team (letters are shuffled per run).
    order = {aid: i for i, aid in enumerate(team_order)}

    def first(node_id: str) -> tuple[int, int]:
        return _id_order(node_id)[0], order.get(letters[node_id[0]], len(order))

    origins = sorted((i for i in ids if i and i[0] in letters), key=first)
    raiser = letters[origins[0][0]] if origins else group[0].agent_id
    lead = next((n for n in group if n.agent_id == raiser), group[0])
    claimed = lead.claimed
    backers = [aid for aid in live if aid in stated]
    tier = (Tier.AGREED if len(backers) * 2 > len(live) else
            Tier.REJECTED if len(disputed) * 2 > len(live) else Tier.UNCONFIRMED)
    return Finding(
        id="", tier=tier, file=claimed.file, line=claimed.line, end_line=claimed.end_line,
        severity=_severity(list(stated.values())) if stated else claimed.severity,
        category=claimed.category, claim=claimed.claim, evidence=claimed.evidence,
        fix=claimed.fix, raised_by=raiser,
        confirmed_by=[aid for aid in backers if aid != raiser], backers=backers,
        disputed_by=disputed, sources=[node.id for node in group],
        reason=disputed[0].reason if tier is Tier.REJECTED else None)


def _numbered(found: list[Finding], prefix: str) -> list[Finding]:
    found.sort(key=lambda f: (-f.severity.rank, f.file, f.line, f.claim))
    return [f.model_copy(update={"id": f"{prefix}{i}"}) for i, f in enumerate(found, 1)]


def verdict(counted: Sequence[Finding], threshold: Severity) -> Verdict:
    """Blocked by a counted blocker; changes requested by a counted finding at or above
    ``threshold``; else approve. Counted: the findings of the tier the review counts
    (agreed, or unconfirmed ones too)."""
    if any(f.severity is Severity.BLOCKER for f in counted):
        return Verdict.BLOCKED
    if any(f.severity.rank >= threshold.rank for f in counted):
        return Verdict.CHANGES_REQUESTED
    return Verdict.APPROVE


def _distinct(items: list[object]) -> list[object]:
    """``items`` without exact repeats (a model that loops sends one finding 500 times),
    in order: counted once, so the list is judged by what it says."""
    seen: set[str] = set()
    kept: list[object] = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


# -- what the review covered ---------------------------------------------------------------

_HUNK_HEAD = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def hunk_ranges(diff: str) -> dict[str, list[tuple[int, int]]]:
    """Each file's new-side line ranges that ``diff``'s hunks show (read by their counts,
    so a changed line never reads as a header): where a finding is on the change."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    path: str | None = None
    old = new = 0  # lines of the current hunk still to come
    for line in diff.split("\n"):
        if old > 0 or new > 0:
            kind = line[:1]
            if kind in ("-", "+", " ", "", "\\"):
                old -= kind in ("-", " ", "")
                new -= kind in ("+", " ", "")
                continue
            old = new = 0
        if line.startswith("+++ "):
            name = line[4:].split("\t", 1)[0].strip()
            path = None if name == "/dev/null" else name.removeprefix("b/")
        elif path is not None and (head := _HUNK_HEAD.match(line)):
            old, start, new = int(head[1] or 1), int(head[2]), int(head[3] or 1)
            ranges.setdefault(path, []).append((start, start + max(new, 1) - 1))
    return ranges


def with_coverage(review: ReviewOutcome, target: ReviewTarget, diff: str) -> ReviewOutcome:
    """``review`` with what its run covered (``target``'s files and changed lines, and the
    files left out) and each finding that is not on the change marked ``outside``, with
    why: counted as the team settled it, shown apart."""
    ranges = hunk_ranges(diff)
    files = set(target.files)

    def mark(finding: Finding) -> Finding:
        shown = ranges.get(finding.file)
        if finding.file not in files:
            why = "its file is not in the reviewed change"
        elif shown and not any(finding.line <= end + NEAR_LINES
                               and start <= finding.end_line + NEAR_LINES
                               for start, end in shown):
            why = "its lines are not in the diff's hunks"
        else:
            return finding
        return finding.model_copy(update={"outside": why})

    coverage = Coverage(files=list(target.files), lines=target.lines,
                        total_lines=target.lines, left_out=list(target.left_out))
    return review.model_copy(update={
        "findings": [mark(f) for f in review.findings],
        "unconfirmed": [mark(f) for f in review.unconfirmed],
        "rejected": [mark(f) for f in review.rejected], "coverage": coverage})

