"""A review's outcome where a pull request's reviewers read it on GitHub: workflow-command
annotations on the diff (:func:`as_annotations`), the one summary comment (:func:`comment_body`,
found again by :data:`MARKER`), a pull-request review's inline comments (:func:`inline_comments`)
and the step's outputs (:func:`outputs`).

Every text in a finding was written by a model and may try to be a workflow command of its
own (``\\n::add-mask::``, ``::set-output``): an annotation is one line, its message and
properties escaped by GitHub's rules (:func:`escape_data`, :func:`escape_property`), so a
newline in a claim is ``%0A`` inside our command's message, never the start of another. The
comment's Markdown is :func:`massgen_mcp.render.review.as_markdown`'s, inert Markdown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from massgen_mcp.core.outcomes import Finding, ReviewOutcome, Severity
from massgen_mcp.render.review import as_markdown, code_span, headline, md_inline

MARKER = "<!-- massgen-mcp:review -->"
# The place for what a later run carries over (the findings' states, issue 69 item 1): a hidden
# JSON block, read back only from a comment our own identity wrote.
STATE_OPEN = "<!-- massgen-mcp:state "
STATE_CLOSE = " -->"
STATE_VERSION = 1
# GitHub shows at most 10 annotations of each level per step (50 per job); more are dropped
# silently, so the last notice says what was left out.
ANNOTATIONS_PER_LEVEL = 10
COMMENT_CHARS = 65_536  # GitHub refuses a longer issue comment (422)
COMMENT_ROOM = 60_000  # the review's Markdown in the comment; the rest: marker, footer, state
LEVEL = {Severity.BLOCKER: "error", Severity.MAJOR: "error", Severity.MINOR: "warning",
         Severity.NIT: "notice"}
LEVELS = ("error", "warning", "notice")


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, CR and LF as GitHub's runner unescapes them."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``): also ``:`` and ``,``,
    which would end the value or the properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def tiers(review: ReviewOutcome) -> list[tuple[str, Finding]]:
    """The findings a reader is shown, each with its tier: the agreed ones, then the
    unconfirmed ones where the outcome has that tier. Rejected findings are not annotated:
    a majority of the team disputed them."""
    shown = [("agreed", f) for f in review.findings]
    return shown + [("unconfirmed", f) for f in getattr(review, "unconfirmed", None) or []]


def _span(finding: Finding) -> str:
    return (f"{finding.line}" if finding.end_line == finding.line
            else f"{finding.line}-{finding.end_line}")


def _annotation(level: str, finding: Finding, tier: str, members: int) -> str:
    backers = 1 + len(finding.confirmed_by)
    title = f"{finding.id} {finding.severity}, {finding.category} ({tier}, {backers} of {members})"
    message = finding.claim + (f"\nFix: {finding.fix}" if finding.fix else "")
    for stance in finding.disputed_by:
        message += f"\nDisputed by {stance.agent_id}: {stance.reason}"
    props = [f"file={escape_property(finding.file)}", f"line={finding.line}",
             f"endLine={finding.end_line}", f"title={escape_property(title)}"]
    return f"::{level} {','.join(props)}::{escape_data(message)}"


def as_annotations(review: ReviewOutcome) -> str:
    """GitHub Actions annotations, one line per shown finding: agreed blockers and majors
    are errors, minors warnings, nits notices; an unconfirmed finding is a notice whatever
    its severity. At most :data:`ANNOTATIONS_PER_LEVEL` of each level; when any is left out,
    the last notice (taking one notice's place) says how many of each and where they all
    are."""
    by_level: dict[str, list[str]] = {level: [] for level in LEVELS}
    for tier, finding in tiers(review):
        level = LEVEL[finding.severity] if tier == "agreed" else "notice"
        by_level[level].append(_annotation(level, finding, tier, review.members))
    cap = dict.fromkeys(LEVELS, ANNOTATIONS_PER_LEVEL)
    if any(len(found) > ANNOTATIONS_PER_LEVEL for found in by_level.values()):
        cap["notice"] -= 1  # the room for the notice that says what was left out
    lines: list[str] = []
    left: list[str] = []
    for level in LEVELS:
        lines += by_level[level][:cap[level]]
        extra = len(by_level[level]) - cap[level]
        if extra > 0:
            left.append(f"{extra} {level}{'' if extra == 1 else 's'}")
    if left:
        lines.append(f"::notice title={escape_property('Review findings not annotated')}::"
                     + escape_data(f"GitHub shows {ANNOTATIONS_PER_LEVEL} annotations of "
                                   f"each level per step; left out: {', '.join(left)}. "
                                   "Every finding is in the job summary, the pull request's "
                                   "review comment and the SARIF."))
    return "\n".join(lines)


def outputs(review: ReviewOutcome) -> dict[str, str]:
    """The step's outputs: the verdict, and the findings counted by tier and, for the agreed
    ones, by severity (one line each, so no value needs a delimiter)."""
    found: dict[str, str] = {"verdict": str(review.verdict), "agreed": str(len(review.findings)),
                             "unconfirmed": str(len(getattr(review, "unconfirmed", None) or [])),
                             "rejected": str(len(review.rejected))}
    for severity in Severity:
        found[str(severity)] = str(sum(f.severity is severity for f in review.findings))
    return found


def state_block(review: ReviewOutcome, head: str | None) -> str:
    """The hidden JSON a later run reads back from our own comment (issue 69 item 1): the
    reviewed head and each shown finding's place. ``<`` and ``>`` are JSON escapes, so no
    text in it can close the HTML comment."""
    state = {"version": STATE_VERSION, "head": head,
             "findings": [{"id": f.id, "tier": tier, "file": f.file, "line": f.line,
                           "end_line": f.end_line, "category": f.category,
                           "severity": str(f.severity)} for tier, f in tiers(review)]}
    text = json.dumps(state, ensure_ascii=True, separators=(",", ":"))
    return STATE_OPEN + text.replace("<", "\\u003c").replace(">", "\\u003e") + STATE_CLOSE


def read_state(body: str) -> dict[str, Any] | None:
    """The state block of a comment's ``body``, or None when it has none or it is not ours
    to read (a caller passes only a comment its own identity wrote); corrupt JSON is None."""
    start = body.rfind(STATE_OPEN)
    end = body.find(STATE_CLOSE, start + len(STATE_OPEN)) if start >= 0 else -1
    if end < 0:
        return None
    try:
        state = json.loads(body[start + len(STATE_OPEN):end])
    except ValueError:
        return None
    return state if isinstance(state, dict) and state.get("version") == STATE_VERSION else None


def _cut(markdown: str, room: int) -> str:
    """``markdown`` within ``room`` characters, cut before a finding's heading (never
    inside a fenced block), with a line that says so."""
    if len(markdown) <= room:
        return markdown
    cut = markdown.rfind("\n### ", 0, room)
    return (markdown[:cut if cut > 0 else 0].rstrip() + "\n\n_The review is longer than a "
            "comment holds; every finding is in the job summary and the SARIF._\n")


def comment_body(review: ReviewOutcome, models: Mapping[str, str], *, described: str = "",
                 head: str | None = None, run_url: str | None = None) -> str:
    """The one summary comment on the pull request: :data:`MARKER`, the review as Markdown,
    a footer naming the reviewed head and the workflow run, and the hidden state block."""
    markdown = _cut(as_markdown(review, models, described=described), COMMENT_ROOM)
    footer = []
    if head:
        footer.append(f"reviewed {code_span(head[:12])}")
    if run_url:
        footer.append(f"[workflow run]({run_url})")
    lines = [MARKER, markdown.rstrip(), "",
             "<sub>massgen-mcp team review" + (": " + " · ".join(footer) if footer else "")
             + "</sub>", "", state_block(review, head)]
    return "\n".join(lines)[:COMMENT_CHARS]


def summary_markdown(review: ReviewOutcome, models: Mapping[str, str], *,
                     described: str = "") -> str:
    """The job summary ($GITHUB_STEP_SUMMARY): the review as Markdown."""
    return as_markdown(review, models, described=described)


def review_body(review: ReviewOutcome) -> str:
    """The top of a pull-request review whose inline comments carry the findings."""
    return f"**massgen-mcp team review:** {md_inline(headline(review))}"


@dataclass(frozen=True)
class Hunk:
    """The new side's lines of one hunk of a changed file, first to last."""

    first: int
    last: int


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def hunks_of(patch: str) -> list[Hunk]:
    """The new side's line ranges of a file's diff hunks (GitHub's ``patch`` of a pull
    request's file: hunks only, no file header); an empty new side has none."""
    found = []
    for match in _HUNK.finditer(patch):
        first, count = int(match.group(1)), int(match.group(2) or 1)
        if count:
            found.append(Hunk(first, first + count - 1))
    return found


def inline_comments(review: ReviewOutcome, hunks: Mapping[str, Sequence[Hunk]]
                    ) -> tuple[list[dict[str, Any]], int]:
    """A pull-request review's comments: each shown finding whose lines lie in one hunk of
    its file's diff (GitHub refuses the whole review over a comment outside one), on the new
    side; and how many findings had no such place (they stay in the summary comment)."""
    comments: list[dict[str, Any]] = []
    missed = 0
    for tier, f in tiers(review):
        if not any(h.first <= f.line and f.end_line <= h.last for h in hunks.get(f.file, ())):
            missed += 1
            continue
        backers = 1 + len(f.confirmed_by)
        body = [f"**{f.id} {f.severity}, {md_inline(f.category)}** ({tier}, {backers} of "
                f"{review.members})", "", md_inline(f.claim)]
        if f.fix:
            body += ["", f"**Fix:** {md_inline(f.fix)}"]
        comment: dict[str, Any] = {"path": f.file, "line": f.end_line, "side": "RIGHT",
                                   "body": "\n".join(body)}
        if f.line < f.end_line:
            comment.update(start_line=f.line, start_side="RIGHT")
        comments.append(comment)
    return comments, missed
