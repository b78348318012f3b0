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
    Tier,
    Verdict,
)

VERDICT_WORDS = {Verdict.APPROVE: "approve", Verdict.CHANGES_REQUESTED: "changes requested",
                 Verdict.BLOCKED: "blocked", Verdict.INCONCLUSIVE: "inconclusive"}
SARIF_LEVEL = {Severity.BLOCKER: "error", Severity.MAJOR: "error", Severity.MINOR: "warning",
               Severity.NIT: "note"}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/massgen/massgen-mcp"
BRIEF_FINDINGS = 10  # the MCP text's list; structuredContent has them all
UNCONFIRMED_WORDS = ("Unconfirmed (fewer than a majority back them, and no majority disputes "
                     "them):")
REJECTED_WORDS = "Rejected by the team (a majority disputes them):"


def _who(agent_id: str, models: Mapping[str, str]) -> str:
    model = models.get(agent_id)
    return f"{agent_id} ({model})" if model else agent_id


def _where(finding: Finding) -> str:
    span = (f"{finding.line}" if finding.end_line == finding.line
            else f"{finding.line}-{finding.end_line}")
    return f"{finding.file}:{span}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def tally(review: ReviewOutcome) -> str:
    """The record's findings by tier: "2 agreed findings (1 blocker, 1 major), 1 unconfirmed,
    0 rejected"."""
    agreed = _count(len(review.findings), "agreed finding")
    by_severity = [f"{n} {s}" for s in Severity
                   if (n := sum(1 for f in review.findings if f.severity is s))]
    if by_severity:
        agreed += f" ({', '.join(by_severity)})"
    return f"{agreed}, {len(review.unconfirmed)} unconfirmed, {len(review.rejected)} rejected"


def backing(review: ReviewOutcome) -> str:
    """"2 of 3 members backed the winning review A1 (and B1, the same findings)"."""
    if review.winner is None:
        return f"no winning review among {_count(review.members, 'live member')}"
    equal = (f" (and {', '.join(review.equal)}, the same findings)" if review.equal else "")
    return (f"{review.agreement} of {review.members} members backed the winning review "
            f"{review.winner}{equal}")


def headline(review: ReviewOutcome) -> str:
    """The line under the verdict, from the agreed record: "blocked: 2 agreed findings
    (1 blocker, 1 major), 1 unconfirmed, 0 rejected; 2 of 3 members backed the winning
    review A1"; an inconclusive review says why instead of a verdict."""
    if review.verdict is Verdict.INCONCLUSIVE:
        return f"inconclusive: {review.inconclusive or 'no verdict'}; {tally(review)}"
    return f"{VERDICT_WORDS[review.verdict]}: {tally(review)}; {backing(review)}"


def rule_line(review: ReviewOutcome) -> str:
    """What the verdict counts: "counted: agreed findings; major or worse requests changes,
    a blocker blocks"."""
    counted = ("agreed findings" if review.tier is Tier.AGREED
               else "agreed and unconfirmed findings")
    return (f"counted: {counted}; {review.threshold} or worse requests changes, "
            "a blocker blocks")


def tie_line(review: ReviewOutcome) -> str | None:
    """"a tie among A1=B1, C1 (2 members each), broken by the team's order: ..."", or None."""
    if not review.tied:
        return None
    return (f"a tie among {', '.join(review.tied)} ({_count(review.agreement, 'member')} "
            f"each), broken by {review.tie_break}")


def summary_line(review: ReviewOutcome, models: Mapping[str, str]) -> str | None:
    """The winning review's own summary, labelled as its author's words (the verdict and
    the counts above are the team's)."""
    if not review.summary:
        return None
    by = f" by {_who(review.winner_by, models)}" if review.winner_by else ""
    return f"the winning review's own summary{by}: {review.summary}"


def support(finding: Finding, review: ReviewOutcome, models: Mapping[str, str]) -> str:
    """A finding's support, as its record computed it, the same in every output: "backed by
    2 of 3: raised by a, confirmed by b"."""
    raised = _who(finding.raised_by, models)
    if finding.raised_by not in finding.backers:
        raised += (" (dropped)" if finding.raised_by in review.dropped
                   else " (no longer backs it)")
    text = (f"backed by {len(finding.backers)} of {review.members}: raised by {raised}")
    if finding.confirmed_by:
        text += ", confirmed by " + ", ".join(_who(a, models) for a in finding.confirmed_by)
    if finding.disputed_by:
        text += f"; disputed by {len(finding.disputed_by)} of {review.members}"
    return text


def _text_finding(f: Finding, review: ReviewOutcome, models: Mapping[str, str]) -> list[str]:
    lines = [f"  {_where(f)}  [{f.severity}] {f.category}: {f.claim}"]
    if f.fix:
        lines.append(f"    fix: {' '.join(f.fix.split())}")
    lines.append(f"    {support(f, review, models)}")
    for stance in f.disputed_by:
        lines.append(f"    disputed by {_who(stance.agent_id, models)}: {stance.reason}")
    if f.outside:
        lines.append(f"    outside the change: {f.outside}")
    return lines


def as_text(review: ReviewOutcome, models: Mapping[str, str]) -> str:
    """For a terminal: the verdict, the agreed findings grouped by file, the unconfirmed and
    rejected ones, and the dissent."""
    lines = [f"Verdict: {headline(review)}", rule_line(review)]
    lines += [line for line in (tie_line(review), summary_line(review, models)) if line]
    if review.coverage is not None:
        lines.append(f"Coverage: {review.coverage.words().removeprefix('coverage: ')}")
    by_file: dict[str, list[Finding]] = {}
    for finding in review.findings:
        by_file.setdefault(finding.file, []).append(finding)
    for file, found in by_file.items():
        lines += ["", file]
        for f in found:
            lines += _text_finding(f, review, models)
    for title, found in ((UNCONFIRMED_WORDS, review.unconfirmed),
                         (REJECTED_WORDS, review.rejected)):
        if found:
            lines += ["", title]
            for f in found:
                lines += _text_finding(f, review, models)
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
    """For an MCP host's text: the verdict, then the agreed and the unconfirmed findings,
    one line each."""
    lines = [f"Verdict: {headline(review)}"]
    tie = tie_line(review)
    if tie:
        lines.append(tie[0].upper() + tie[1:])
    shown = [*review.findings, *review.unconfirmed]
    for f in shown[:BRIEF_FINDINGS]:
        lines.append(f"- {f.id} {_where(f)} [{f.severity}, {f.tier}, "
                     f"{len(f.backers)} of {review.members}] {f.claim}")
    if len(shown) > BRIEF_FINDINGS:
        lines.append(f"- ... and {len(shown) - BRIEF_FINDINGS} more "
                     "(structuredContent has them all)")
    for d in review.dissent:
        lines.append(f"Dissent: {d.agent_id}: {d.reason}")
    if review.coverage is not None:
        lines.append(f"Coverage: {review.coverage.words().removeprefix('coverage: ')}")
    return "\n".join(lines)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~])")
# What GitHub links in a comment's rendered text whatever escapes it: a mention (``@user``) and
# an issue reference (``#12``, ``GH-12``, ``owner/repo#12``; ``\#12`` renders as ``#12``). A
# zero-width space after the ``@``, ``#`` or ``GH-`` leaves the text as it reads and links
# nothing.
_REFERENCE = re.compile(r"@(?=\w)|#(?=\d)|\bGH-(?=\d)", re.IGNORECASE)
# GFM's extended autolinks: a scheme's "://" or a "www." makes a link of plain text.
_AUTOLINK = re.compile(r"\b(?:https?|ftp)(?=://)|\bwww(?=\.)", re.IGNORECASE)


def md_inline(text: str) -> str:
    """Model text as inert Markdown: no HTML, link (a bare URL or ``www.`` included: a
    zero-width space after its scheme or ``www``), image, emphasis or table breaks, and no
    @mention that would notify someone or issue reference that would link another issue on
    GitHub (a zero-width space after its ``@``, ``#`` or ``GH-``)."""
    text = " ".join(text.split())
    text = _AUTOLINK.sub(lambda m: m.group() + "\u200b", _MD_SPECIAL.sub(r"\\\1", text))
    return _REFERENCE.sub(lambda m: m.group() + "\u200b", text)


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


def _md_finding(f: Finding, review: ReviewOutcome, models: Mapping[str, str],
                heading: str = "###") -> list[str]:
    lines = ["", f"{heading} {f.id} {code_span(_where(f))} — {f.severity}, "
             f"{md_inline(f.category)}",
             "", md_inline(f.claim)]
    if f.evidence:
        lines += ["", *_fenced(f.evidence)]
    if f.fix:
        lines += ["", f"**Fix:** {md_inline(f.fix)}"]
    lines += ["", f"_{md_inline(support(f, review, models))}_"]
    if f.outside:
        lines.append(f"- outside the change: {md_inline(f.outside)}")
    for stance in f.disputed_by:
        lines.append(f"- disputed by {md_inline(_who(stance.agent_id, models))}: "
                     f"{md_inline(stance.reason)}")
    return lines


def as_markdown(review: ReviewOutcome, models: Mapping[str, str], *,
                described: str = "") -> str:
    """For a pull request comment (and the run's final answer)."""
    title = "## Team review"
    if described:
        title += f": {md_inline(described)}"
    head = headline(review)
    word, rest = head.split(": ", 1)
    lines = [title, "", f"**Verdict: {word}**: {md_inline(rest)}", "",
             f"_{md_inline(rule_line(review))}_"]
    for line in (tie_line(review), summary_line(review, models)):
        if line:
            lines += ["", md_inline(line[0].upper() + line[1:])]
    if review.coverage is not None:
        lines += ["", f"_{md_inline(review.coverage.words().capitalize())}_"]
    if not review.findings:
        lines += ["", "No finding was backed by a majority of the team."]
    for f in review.findings:
        lines += _md_finding(f, review, models)
    for title_words, found in ((UNCONFIRMED_WORDS, review.unconfirmed),
                               (REJECTED_WORDS, review.rejected)):
        if found:
            lines += ["", f"### {title_words.rstrip(':')}"]
            for f in found:  # under the tier's own heading
                lines += _md_finding(f, review, models, "####")
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
            "shortDescription": {"text": f"A {category} problem a review team raised"}}


def as_sarif(review: ReviewOutcome, models: Mapping[str, str], *,
             session_id: str | None = None) -> dict[str, Any]:
    """SARIF 2.1.0: one result per agreed finding, its level from the severity, and one per
    unconfirmed finding at level ``note``; the tier and the support in its properties; the
    verdict and what it counts in the run's properties."""
    shown = [*review.findings, *review.unconfirmed]
    categories = sorted({f.category for f in shown})
    results: list[dict[str, Any]] = []
    for f in shown:
        message = f.claim + (f" Fix: {f.fix}" if f.fix else "")
        result: dict[str, Any] = {
            "ruleId": f.category, "ruleIndex": categories.index(f.category),
            "level": SARIF_LEVEL[f.severity] if f.tier is Tier.AGREED else "note",
            "message": {"text": message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": quote(f.file), "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": f.line, "endLine": f.end_line}}}],
            "properties": {"findingId": f.id, "tier": str(f.tier), "severity": str(f.severity),
                           "support": support(f, review, models),
                           "backers": len(f.backers), "members": review.members,
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
        "properties": {"verdict": str(review.verdict), "headline": headline(review),
                       "inconclusive": review.inconclusive,
                       "threshold": str(review.threshold), "tier": str(review.tier),
                       "agreed": len(review.findings),
                       "unconfirmed": len(review.unconfirmed),
                       "rejected": len(review.rejected),
                       "agreement": review.agreement, "members": review.members,
                       "winner": review.winner, "equal": review.equal,
                       "tied": review.tied, "tieBreak": review.tie_break,
                       "dissent": [{"member": _who(d.agent_id, models), "reason": d.reason}
                                   for d in review.dissent]}}
    if review.coverage is not None:
        run["properties"]["coverage"] = {**review.coverage.model_dump(mode="json"),
                                         "percent": round(review.coverage.percent, 1)}
    if session_id:
        run["automationDetails"] = {"id": f"massgen-mcp/review/{session_id}"}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
