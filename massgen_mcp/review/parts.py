"""A diff over what one review run can send, reviewed in parts, and the parts' outcomes
merged into one review with its coverage.

**Why runs, not one run.** A part is an ordinary review run of the same team, with the same
question and rules (:mod:`massgen_mcp.consensus.findings`), whose context is the part's
diff. The engine, the records, resume and the report stay as they are: a part is recorded,
resumable and shown like any review, and the only new step is :func:`merge`, which puts
the parts' settled outcomes together. One run whose members reviewed every part would need
the engine to hold several contexts and several rounds of votes in one record.

**How a diff is cut** (:func:`split`): by file, in the diff's order, packed into parts of
at most ``room`` characters. A test file goes with the file it tests (``tests/test_app.py``
with ``src/app.py``: :func:`subject`), so a member sees a change and its tests together;
a group over ``room`` is packed file by file, and only a file that alone is over ``room``
is cut between its hunks (its header repeated in each piece), and a hunk over ``room``
(a new file's only one) into smaller hunks with their own counts. Only a line that alone is
over ``room`` (a minified file's) leaves its hunk out, named in the coverage with why.

**Merged under the same rules.** Each part's findings were settled by its own run: a
strict majority of that run's live members. The merged review lists every part's agreed,
unconfirmed and rejected findings (numbered again), its verdict follows from the counted
findings of every part (agreed, or unconfirmed too: the review's tier),
its agreement is the weakest part's (k of n), and a part that ended without a verdict
(failed, or inconclusive) is named in the coverage with its files, as left out. A review
whose parts all ended so covered nothing, and is inconclusive: never an approval.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from massgen_mcp.consensus.findings import verdict
from massgen_mcp.core.outcomes import (
    Coverage,
    Finding,
    ReviewOutcome,
    Severity,
    Tier,
    Verdict,
)
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.run_state import ResultRecord, Usage
from massgen_mcp.render.review import as_markdown
from massgen_mcp.review.diff import FileDiff, split_diff

MAX_PARTS = 50  # more would be hundreds of calls: what is past it is left out, and named
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_HUNK_BYTES = re.compile(rb"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
HEADER_ROOM = 48  # a cut hunk's own "@@ -a,b +c,d @@" line


@dataclass(frozen=True)
class Part:
    """One review run's share of a diff: its text, the files it holds and their changed
    lines (added and removed)."""

    diff: str
    files: tuple[str, ...]
    lines: int


@dataclass(frozen=True)
class Split:
    """A diff in parts, and what no part holds (``"path: why"``)."""

    parts: tuple[Part, ...]
    left_out: tuple[str, ...]


def changed_lines(section: FileDiff) -> int:
    """The added and removed lines of a file's section (its ``---``/``+++`` header not)."""
    body = False
    count = 0
    for line in section.lines:
        if line.startswith(b"@@ "):
            body = True
        elif body and line[:1] in (b"+", b"-"):
            count += 1
    return count


def changed_lines_in(diff: str) -> int:
    """The added and removed lines of a whole diff."""
    return sum(changed_lines(s) for s in split_diff(diff.encode(), "the diff") if s.paths)


def subject(path: str) -> str:
    """The name a file and its tests share: ``app`` for ``src/app.py``,
    ``tests/test_app.py``, ``app_test.go``, ``app.test.ts``, ``AppTest.java`` (lower case)."""
    name = PurePosixPath(path).name
    for marker in (".test.", ".spec."):
        if marker in name:
            return name.split(marker, 1)[0].lower()
    stem = name.split(".", 1)[0].removeprefix("test_")
    for suffix in ("_tests", "_test", "Tests", "Test"):
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem[:-len(suffix)]
            break
    return stem.lower()


def is_test(path: str) -> bool:
    """Whether ``path`` is a test file by its name or folder."""
    pure = PurePosixPath(path)
    name = pure.name.split(".", 1)[0]
    return (name.startswith("test_") or name.endswith(("_test", "_tests", "Test", "Tests"))
            or ".test." in pure.name or ".spec." in pure.name
            or any(part in ("tests", "test", "__tests__") for part in pure.parts[:-1]))


def _groups(sections: Sequence[FileDiff]) -> list[list[FileDiff]]:
    """Sections in the diff's order, each test file moved beside the first file it tests."""
    groups: list[list[FileDiff]] = []
    by_subject: dict[str, list[FileDiff]] = {}
    waiting: dict[str, list[FileDiff]] = {}  # tests whose subject comes later in the diff
    for section in sections:
        key = subject(section.path)
        if is_test(section.path):
            if key in by_subject:
                by_subject[key].append(section)
            else:
                waiting.setdefault(key, []).append(section)
            continue
        group = [section, *waiting.pop(key, [])]
        by_subject.setdefault(key, group)
        groups.append(group)
    groups.extend(tests for tests in waiting.values())  # tests of no file in the change
    return groups


def _pieces(section: FileDiff, room: int) -> tuple[list[bytes], list[str]]:
    """A file over ``room`` cut between its hunks, its header in each piece; a hunk that
    alone is over ``room`` is left out."""
    first = next((i for i, line in enumerate(section.lines) if line.startswith(b"@@ ")),
                 len(section.lines))
    header = b"".join(section.lines[:first])
    hunks: list[list[bytes]] = []
    for line in section.lines[first:]:
        if line.startswith(b"@@ ") or not hunks:
            hunks.append([])
        hunks[-1].append(line)
    pieces: list[bytes] = []
    left_out: list[str] = []
    current = b""
    for whole in hunks:
        cut = ([whole] if len(header) + len(b"".join(whole)) <= room
               else _cut_hunk(whole, room - len(header)))
        if cut is None:
            start = _HUNK.match(whole[0].decode("utf-8", "replace"))
            where = f" at line {start[1]}" if start else ""
            left_out.append(f"{section.path}: a line of the hunk{where} is more than one "
                            f"review run holds ({room:,} bytes)")
            continue
        for hunk in cut:
            text = b"".join(hunk)
            if current and len(current) + len(text) > room:
                pieces.append(current)
                current = b""
            current = (current or header) + text
    if current:
        pieces.append(current)
    return pieces, left_out


def _cut_hunk(hunk: list[bytes], room: int) -> list[list[bytes]] | None:
    """A hunk over ``room`` as several smaller hunks, each with its own header and counts
    (a new file's one hunk, a long rewrite); None when a line alone is over ``room`` (a
    minified file's) or the hunk has no header to count from."""
    head = _HUNK_BYTES.match(hunk[0])
    if head is None:
        return None
    old, new = int(head[1]), int(head[2])
    cut: list[list[bytes]] = []
    lines: list[bytes] = []
    size = olds = news = 0
    for line in hunk[1:]:
        if len(line) + HEADER_ROOM > room:
            return None
        if lines and size + len(line) + HEADER_ROOM > room:
            cut.append([f"@@ -{old},{olds} +{new},{news} @@\n".encode(), *lines])
            old, new = old + olds, new + news
            lines, size, olds, news = [], 0, 0, 0
        lines.append(line)
        size += len(line)
        kind = line[:1]
        olds += kind != b"+" and kind != b"\\"
        news += kind != b"-" and kind != b"\\"
    if lines:
        cut.append([f"@@ -{old},{olds} +{new},{news} @@\n".encode(), *lines])
    return cut


def split(diff: str, room: int) -> Split:
    """``diff`` in parts of at most ``room`` characters (bytes of UTF-8: never fewer), by
    file, tests beside their code (see the module's docstring)."""
    sections = [s for s in split_diff(diff.encode(), "the diff") if s.paths]
    parts: list[list[tuple[str, bytes, int]]] = [[]]  # (file, text, changed lines)
    size = 0
    left_out: list[str] = []

    def put(path: str, text: bytes, lines: int) -> None:
        nonlocal size
        if parts[-1] and size + len(text) > room:
            parts.append([])
            size = 0
        parts[-1].append((path, text, lines))
        size += len(text)

    for group in _groups(sections):
        texts = [b"".join(s.lines) for s in group]
        if sum(map(len, texts)) <= room:
            if parts[-1] and size + sum(map(len, texts)) > room:
                parts.append([])
                size = 0
            for section, text in zip(group, texts, strict=True):
                put(section.path, text, changed_lines(section))
            continue
        for section, text in zip(group, texts, strict=True):
            if len(text) <= room:
                put(section.path, text, changed_lines(section))
                continue
            pieces, dropped = _pieces(section, room)
            left_out += dropped
            for piece in pieces:
                put(section.path, piece,
                    changed_lines(FileDiff(lines=piece.splitlines(keepends=True))))
    kept = [part for part in parts if part]
    for extra in kept[MAX_PARTS:]:
        left_out += [f"{path}: past the review's {MAX_PARTS} parts (review it on its own)"
                     for path in dict.fromkeys(p for p, _, _ in extra)]
    return Split(tuple(Part(diff=b"".join(t for _, t, _ in part).decode("utf-8"),
                            files=tuple(dict.fromkeys(p for p, _, _ in part)),
                            lines=sum(n for _, _, n in part))
                       for part in kept[:MAX_PARTS]),
                 tuple(dict.fromkeys(left_out)))


# -- the parts' outcomes, merged -----------------------------------------------------------


def _renumbered(found: list[Finding], prefix: str) -> list[Finding]:
    """Findings of several parts in one list: a finding two parts both state (a file cut
    between them) once, then numbered as one review's are."""
    seen: set[tuple[str, int, int, str, str]] = set()
    distinct: list[Finding] = []
    for finding in found:
        key = (finding.file, finding.line, finding.end_line, finding.category, finding.claim)
        if key not in seen:
            seen.add(key)
            distinct.append(finding)
    distinct.sort(key=lambda f: (-f.severity.rank, f.file, f.line, f.claim))
    return [f.model_copy(update={"id": f"{prefix}{i}"}) for i, f in enumerate(distinct, 1)]


def _judged(result: ResultRecord) -> bool:
    """A part whose run settled a verdict (not failed before a review, not inconclusive)."""
    return result.review is not None and result.review.verdict is not Verdict.INCONCLUSIVE


def merge(parts: Sequence[Part], results: Sequence[ResultRecord], left_out: Sequence[str],
          threshold: Severity, tier: Tier = Tier.AGREED) -> ReviewOutcome:
    """One review from the parts' results (in the parts' order), with its coverage; a part
    without a verdict (failed, or inconclusive) covers nothing, and when no part has one
    the review is inconclusive (nothing was judged: never an approval)."""
    reviews = [(part, result.review) for part, result in zip(parts, results, strict=True)
               if result.review is not None and _judged(result)]
    failed = [i for i, result in enumerate(results, 1) if not _judged(result)]
    missed = [f"{path}: part {i} of {len(parts)} "
              f"{'was inconclusive' if results[i - 1].review is not None else 'failed'} "
              f"({results[i - 1].status}"
              f"{', ' + str(results[i - 1].finish_reason) if results[i - 1].finish_reason else ''})"
              for i in failed for path in parts[i - 1].files]
    coverage = Coverage(
        files=list(dict.fromkeys(f for part, _ in reviews for f in part.files)),
        lines=sum(part.lines for part, _ in reviews),
        total_lines=sum(part.lines for part in parts),
        left_out=[*left_out, *missed], parts=len(parts), failed_parts=failed)
    if not reviews:
        return ReviewOutcome(
            verdict=Verdict.INCONCLUSIVE, threshold=threshold, tier=tier,
            inconclusive=f"no part of the {len(parts)} ended with a verdict",
            agreement=0, members=0, coverage=coverage)
    found = {t: _renumbered([f for _, r in reviews
                             for f in {Tier.AGREED: r.findings, Tier.UNCONFIRMED: r.unconfirmed,
                                       Tier.REJECTED: r.rejected}[t]], prefix)
             for t, prefix in ((Tier.AGREED, "F"), (Tier.UNCONFIRMED, "U"),
                               (Tier.REJECTED, "R"))}
    counted = [f for t in Tier if t.rank >= tier.rank for f in found[t]]
    weakest = min((r for _, r in reviews), key=lambda r: (r.agreement / max(r.members, 1),
                                                          r.agreement))
    summaries = [f"part {i}: {r.summary}" for i, (_, r) in enumerate(reviews, 1) if r.summary]
    return ReviewOutcome(
        verdict=verdict(counted, threshold), threshold=threshold, tier=tier,
        agreement=weakest.agreement, members=weakest.members,
        summary="; ".join(summaries)[:500],
        findings=found[Tier.AGREED], unconfirmed=found[Tier.UNCONFIRMED],
        rejected=found[Tier.REJECTED],
        dissent=list({d.agent_id: d for _, r in reviews for d in r.dissent}.values()),
        dropped=list(dict.fromkeys(a for _, r in reviews for a in r.dropped)),
        coverage=coverage)


def merged_result(parts: Sequence[Part], results: Sequence[ResultRecord],
                  left_out: Sequence[str], threshold: Severity, described: str,
                  tier: Tier = Tier.AGREED) -> ResultRecord:
    """The result of a review in parts: the first completed part's record (else the
    first's; the others' sessions are named in ``notes``) with the merged review and its
    final answer, every part's usage and errors, and the coverage. No part with a verdict:
    the review is inconclusive (:func:`merge`), its coverage said in ``notes`` too."""
    merged = merge(parts, results, left_out, threshold, tier)
    base = next((r for r in results if r.status is RunStatus.COMPLETED), results[0])
    sessions = ", ".join(r.session_id for r in results)
    notes = [*base.notes, f"reviewed in {len(parts)} parts (sessions {sessions})"]
    if merged.verdict is Verdict.INCONCLUSIVE and merged.coverage is not None:
        notes.append(merged.coverage.words())
    models = {aid: agent.model for r in results for aid, agent in r.agents.items()}
    return base.model_copy(update={
        "review": merged, "usage": total_usage([r.usage for r in results]), "notes": notes,
        "errors": [f"part {i} of {len(parts)}: {e}" for i, r in enumerate(results, 1)
                   for e in r.errors],
        "final_answer": as_markdown(merged, models, described=described)})


def total_usage(usages: Sequence[Usage]) -> Usage:
    """Several runs' usage added up (an unknown price in one: unknown in all)."""
    total: dict[str, object] = {}
    for name in Usage.model_fields:
        values = [getattr(u, name) for u in usages]
        if name == "cost_usd":
            total[name] = None if any(v is None for v in values) else sum(values)
        elif all(isinstance(v, (int, float)) for v in values):
            total[name] = sum(values)
    return Usage.model_validate(total)
