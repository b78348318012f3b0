"""A review's outcome (:class:`~massgen_mcp.core.outcomes.ReviewOutcome`) where reviews are read:
a terminal (:func:`as_text`, findings grouped by file, each at ``path:line``), a pull request
(:func:`as_markdown`, also the run's final answer), an MCP host (:func:`as_brief`: the verdict
and the agreed findings in a few lines), and code scanning (:func:`as_sarif`, SARIF 2.1.0).

Every text in a finding was written by a model: the Markdown fences quoted evidence with a
fence longer than any run of backticks in it and escapes what GitHub would render as HTML,
a mention or a link; SARIF carries the texts as plain strings and the path as a relative,
percent-encoded URI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from massgen_mcp._version import __version__
from massgen_mcp.core.outcomes import (
    Finding,
    ReviewOutcome,
    Severity,
    Verdict,
)

VERDICT_WORDS = {Verdict.APPROVE: "approve", Verdict.CHANGES_REQUESTED: "changes requested",
                 Verdict.BLOCKED: "blocked"}
SARIF_LEVEL = {Severity.BLOCKER: "error", Severity.MAJOR: "error", Severity.MINOR: "warning",
               Severity.NIT: "note"}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/massgen/massgen-mcp"
BRIEF_FINDINGS = 10  # the MCP text's list; structuredContent has them all


def _who(agent_id: str, models: Mapping[str, str]) -> str:
    model = models.get(agent_id)
    return f"{agent_id} ({model})" if model else agent_id


def _where(finding: Finding) -> str:
    span = (f"{finding.line}" if finding.end_line == finding.line
            else f"{finding.line}-{finding.end_line}")
    return f"{finding.file}:{span}"


def headline(review: ReviewOutcome) -> str:
    """"changes requested: 2 findings agreed by 3 of 3 (1 rejected)"."""
    agreed = len(review.findings)
    words = f"{VERDICT_WORDS[review.verdict]}: {agreed} finding{'' if agreed == 1 else 's'}"
    words += f" agreed, {review.agreement} of {review.members} members backed the review"
    if review.rejected:
        words += f" ({len(review.rejected)} rejected)"
    return words


def _backing(finding: Finding, review: ReviewOutcome, models: Mapping[str, str]) -> str:
    backers = 1 + len(finding.confirmed_by)
    text = f"raised by {_who(finding.raised_by, models)}"
    if finding.confirmed_by:
        text += ", confirmed by " + ", ".join(_who(a, models) for a in finding.confirmed_by)
    return f"{text} ({backers} of {review.members})"


def as_text(review: ReviewOutcome, models: Mapping[str, str]) -> str:
    """For a terminal: the verdict, the agreed findings grouped by file, the rejected ones
    and the dissent."""
    lines = [f"Verdict: {headline(review)}"]
    if review.summary:
        lines.append(f"Summary: {review.summary}")
    if review.coverage is not None:
        lines.append(f"Coverage: {review.coverage.words().removeprefix('coverage: ')}")
    by_file: dict[str, list[Finding]] = {}
    for finding in review.findings:
        by_file.setdefault(finding.file, []).append(finding)
    for file, found in by_file.items():
        lines += ["", file]
        for f in found:
            lines.append(f"  {_where(f)}  [{f.severity}] {f.category}: {f.claim}")
            if f.fix:
                lines.append(f"    fix: {' '.join(f.fix.split())}")
            lines.append(f"    {_backing(f, review, models)}")
            for stance in f.disputed_by:
                lines.append(f"    disputed by {_who(stance.agent_id, models)}: {stance.reason}")
            if f.outside:
                lines.append(f"    outside the change: {f.outside}")
    if review.rejected:
        lines += ["", "Rejected by the team:"]
        for f in review.rejected:
            lines.append(f"  {_where(f)}  [{f.severity}] {f.claim} (raised by "
                         f"{_who(f.raised_by, models)}; {f.reason})")
    lines += _dissent_lines(review, models, "  ")
    return "\n".join(lines)


def _dissent_lines(review: ReviewOutcome, models: Mapping[str, str], indent: str) -> list[str]:
    lines: list[str] = []
    if review.dissent:
        lines += ["", "Dissent:"]
        for d in review.dissent:
            voted = f"voted for {d.voted_for}" if d.voted_for else "no vote"
            lines.append(f"{indent}{_who(d.agent_id, models)} ({voted}): {d.reason}")
    if review.dropped:
        lines += ["", "Dropped or late: " + ", ".join(_who(a, models) for a in review.dropped)]
    return lines


def as_brief(review: ReviewOutcome) -> str:
    """For an MCP host's text: the verdict and the agreed findings, one line each."""
    lines = [f"Verdict: {headline(review)}"]
    for f in review.findings[:BRIEF_FINDINGS]:
        lines.append(f"- {f.id} {_where(f)} [{f.severity}] {f.claim}")
    if len(review.findings) > BRIEF_FINDINGS:
        lines.append(f"- ... and {len(review.findings) - BRIEF_FINDINGS} more "
                     "(structuredContent.review.findings)")
    for d in review.dissent:
        lines.append(f"Dissent: {d.agent_id}: {d.reason}")
    if review.coverage is not None:
        lines.append(f"Coverage: {review.coverage.words().removeprefix('coverage: ')}")
    return "\n".join(lines)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~])")
_MENTION = re.compile(r"@(?=\w)")
# GFM's extended autolinks: a scheme's "://" or a "www." makes a link of plain text.
_AUTOLINK = re.compile(r"\b(?:https?|ftp)(?=://)|\bwww(?=\.)", re.IGNORECASE)


def md_inline(text: str) -> str:
    """Model text as inert Markdown: no HTML, link (a bare URL or ``www.`` included: a
    zero-width space after its scheme or ``www``), image, emphasis or table breaks, and no
    @mention that would notify someone on GitHub."""
    text = " ".join(text.split())
    text = _AUTOLINK.sub(lambda m: m.group() + "\u200b", _MD_SPECIAL.sub(r"\\\1", text))
    return _MENTION.sub("@\u200b", text)


def code_span(text: str) -> str:
    """``text`` (one line) as a Markdown code span, shown as it is: backslash escapes are not
    escapes inside one (``md_inline`` would show ``my\\_module.py``), and nothing in it is
    HTML, a link or a mention; the fence is longer than any run of backticks in it, so none
    closes it, and a space pads a text that starts or ends with a backtick (the span drops
    one on each side)."""
    text = " ".join(text.split())
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fenced(text: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text.rstrip("\n"), fence]


def as_markdown(review: ReviewOutcome, models: Mapping[str, str], *,
                described: str = "") -> str:
    """For a pull request comment (and the run's final answer)."""
    title = "## Team review"
    if described:
        title += f": {md_inline(described)}"
    lines = [title, "", f"**Verdict: {VERDICT_WORDS[review.verdict]}** "
             f"({len(review.findings)} agreed finding{'' if len(review.findings) == 1 else 's'};"
             f" {review.agreement} of {review.members} members backed the winning review)"]
    if review.summary:
        lines += ["", md_inline(review.summary)]
    if review.coverage is not None:
        lines += ["", f"_{md_inline(review.coverage.words().capitalize())}_"]
    if not review.findings:
        lines += ["", "No finding was backed by a majority of the team."]
    for f in review.findings:
        lines += ["", f"### {f.id} {code_span(_where(f))} — {f.severity}, "
                  f"{md_inline(f.category)}", "", md_inline(f.claim)]
        if f.evidence:
            lines += ["", *_fenced(f.evidence)]
        if f.fix:
            lines += ["", f"**Fix:** {md_inline(f.fix)}"]
        lines += ["", f"_{md_inline(_backing(f, review, models))}_"]
        if f.outside:
            lines.append(f"- outside the change: {md_inline(f.outside)}")
        for stance in f.disputed_by:
            lines.append(f"- disputed by {md_inline(_who(stance.agent_id, models))}: "
                         f"{md_inline(stance.reason)}")
    if review.rejected:
        lines += ["", "### Rejected by the team", ""]
        for f in review.rejected:
            lines.append(f"- {code_span(_where(f))} {f.severity}: {md_inline(f.claim)} "
                         f"— {md_inline(f.reason or '')}")
    if review.dissent or review.dropped:
        lines += ["", "### Dissent", ""]
        for d in review.dissent:
            voted = f"voted for {d.voted_for}" if d.voted_for else "no vote"
            lines.append(f"- {md_inline(_who(d.agent_id, models))} ({voted}): "
                         f"{md_inline(d.reason)}")
        for aid in review.dropped:
            lines.append(f"- {md_inline(_who(aid, models))}: dropped or late")
    return "\n".join(lines) + "\n"


def _rule(category: str) -> dict[str, Any]:
    return {"id": category, "name": category.title().replace("-", ""),
            "shortDescription": {"text": f"A {category} problem the review team agreed on"}}


def as_sarif(review: ReviewOutcome, models: Mapping[str, str], *,
             session_id: str | None = None) -> dict[str, Any]:
    """SARIF 2.1.0: one result per agreed finding, its level from the severity, the
    backing in its properties; the verdict in the run's properties."""
    categories = sorted({f.category for f in review.findings})
    results: list[dict[str, Any]] = []
    for f in review.findings:
        message = f.claim + (f" Fix: {f.fix}" if f.fix else "")
        result: dict[str, Any] = {
            "ruleId": f.category, "ruleIndex": categories.index(f.category),
            "level": SARIF_LEVEL[f.severity], "message": {"text": message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": quote(f.file), "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": f.line, "endLine": f.end_line}}}],
            "properties": {"findingId": f.id, "severity": str(f.severity),
                           "raisedBy": _who(f.raised_by, models),
                           "confirmedBy": [_who(a, models) for a in f.confirmed_by],
                           "disputedBy": [{"member": _who(s.agent_id, models),
                                           "reason": s.reason} for s in f.disputed_by]}}
        if f.outside:
            result["properties"]["outside"] = f.outside
        if f.evidence:
            region = result["locations"][0]["physicalLocation"]["region"]
            region["snippet"] = {"text": f.evidence}
        results.append(result)
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "massgen-mcp", "version": __version__,
                            "informationUri": INFORMATION_URI,
                            "rules": [_rule(c) for c in categories]}},
        "results": results,
        "properties": {"verdict": str(review.verdict), "threshold": str(review.threshold),
                       "agreement": review.agreement, "members": review.members,
                       "dissent": [{"member": _who(d.agent_id, models), "reason": d.reason}
                                   for d in review.dissent]}}
    if review.coverage is not None:
        run["properties"]["coverage"] = {**review.coverage.model_dump(mode="json"),
                                         "percent": round(review.coverage.percent, 1)}
    if session_id:
        run["automationDetails"] = {"id": f"massgen-mcp/review/{session_id}"}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
