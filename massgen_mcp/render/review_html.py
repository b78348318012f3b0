"""A review run's part of report.html: the verdict, the agreed and rejected findings, the
dissent, and the diff under review with each agreed finding drawn below the line its range
ends on (issue 55).

Everything here is untrusted: a finding is model output, the diff may be a stranger's patch.
Every text goes through :func:`~massgen_mcp.render.format.escape` and lands in an element's
text or a quoted attribute; no ``href``, ``src`` or ``style`` is built from it (the only
links are ``#finding-N`` fragments numbered here), and the page keeps the report's CSP (no
script at all). The diff is at most the run's context (~180 kB): it is parsed in one pass,
each finding is placed by a dictionary look-up and a binary search, and the page is built
from lists joined once, so the work is linear in the diff and the findings.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from massgen_mcp.core.outcomes import Finding, ReviewOutcome
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.run_state import SessionRecord
from massgen_mcp.render.format import escape as _e
from massgen_mcp.render.review import (
    REJECTED_WORDS,
    UNCONFIRMED_WORDS,
    VERDICT_WORDS,
    backing,
    headline,
    rule_line,
    summary_line,
    support,
    tie_line,
)

# Styles for the review section only: a report without a review is byte for byte as before.
REVIEW_CSS = """
.verdict{font-weight:700}.verdict.approve{color:var(--win)}.verdict.changes_requested{
color:var(--warn)}.verdict.blocked{color:var(--bad)}.verdict.inconclusive{color:var(--muted)}
.sev{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;font-weight:600;
border:1px solid currentColor}.sev.blocker{color:var(--bad)}.sev.major{color:var(--warn)}
.sev.minor{color:var(--accent)}.sev.nit{color:var(--muted)}
.finding{background:var(--card);border:1px solid var(--line);border-left:4px solid var(--warn);
border-radius:6px;padding:8px 12px;margin:6px 0;font:14px/1.45 system-ui,sans-serif;
white-space:normal}.finding.blocker{border-left-color:var(--bad)}
.finding.minor{border-left-color:var(--accent)}.finding.nit{border-left-color:var(--line)}
.finding .claim{margin:4px 0}.finding pre{margin:4px 0}.finding ul{margin:2px 0;padding-left:20px}
.finding .who{font-size:13px;color:var(--muted)}
table.diff{border:0;font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;
table-layout:fixed}table.diff td{border:0;padding:0 6px;vertical-align:top}
table.diff td.n{width:4.5em;color:var(--muted);text-align:right;user-select:none}
table.diff td.t{white-space:pre-wrap;word-break:break-all}
table.diff tr.add td.t{background:color-mix(in srgb,var(--win) 14%,transparent)}
table.diff tr.del td.t{background:color-mix(in srgb,var(--bad) 14%,transparent)}
table.diff tr.hunk td{color:var(--accent);background:var(--card)}
table.diff tr.meta td{color:var(--muted)}table.diff tr.at td{padding:2px 6px 6px}
.diff-file>summary{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
"""


@dataclass
class DiffLine:
    """One line of a hunk: ``kind`` is " " (context), "+", "-" or "\\" (no newline at end);
    ``old``/``new`` its line numbers on each side (None on the side it is not on)."""

    kind: str
    text: str
    old: int | None = None
    new: int | None = None


@dataclass
class FileDiff:
    """One file's section: its path on the new side (the old one for a deleted file), the
    lines before its first hunk (``index``, ``rename from``...), and its lines in order,
    hunk headers included (kind "@")."""

    path: str
    header: list[str] = field(default_factory=list)
    lines: list[DiffLine] = field(default_factory=list)
    old_path: str | None = None


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(text: str) -> str:
    """A path as git writes it: ``"b/caf\\303\\251.py"`` (C-quoted, octal UTF-8 bytes) or
    plain; a plain one loses what ``diff -u`` adds after a tab (a timestamp)."""
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text.split("\t", 1)[0]
    out = bytearray()
    body, i = text[1:-1], 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567" and re.fullmatch(r"[0-7]{3}", body[i + 1:i + 4]):
                out.append(int(body[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
        out += char.encode("utf-8", "surrogatepass")
        i += 1
    return out.decode("utf-8", "replace")


def _side(text: str, prefix: str) -> str | None:
    """The path of a ``---``/``+++`` line's rest: None for /dev/null, git's a/ or b/ gone."""
    path = _unquote(text.strip() if text.startswith('"') else text)
    if path == "/dev/null":
        return None
    return path.removeprefix(prefix)


def _git_header_path(rest: str) -> str:
    """``diff --git a/X b/X``'s new path, for a section with no ---/+++ (a rename, a mode
    change): the two halves are the same name unless it was renamed."""
    if rest.startswith('"'):
        end = rest.rfind(' "')
        return _unquote(rest[end + 1:]).removeprefix("b/") if end > 0 else rest
    half = (len(rest) - 1) // 2
    if rest[half:half + 3] == " b/" and rest[2:half] == rest[half + 3:]:
        return rest[half + 3:]
    cut = rest.rfind(" b/")
    return rest[cut + 3:] if cut >= 0 else rest


class _Parser:
    """The one pass of :func:`parse_diff`: where it is (a file, a hunk's remaining counts)."""

    def __init__(self) -> None:
        self.preamble: list[str] = []
        self.files: list[FileDiff] = []
        self.current: FileDiff | None = None
        self.old = self.new = self.old_left = self.new_left = 0

    def hunk_line(self, file: FileDiff, line: str) -> None:
        kind = line[:1] or " "  # an empty line: context whose space an editor stripped
        if kind == "+":
            file.lines.append(DiffLine("+", line[1:], new=self.new))
            self.new, self.new_left = self.new + 1, self.new_left - 1
        elif kind == "-":
            file.lines.append(DiffLine("-", line[1:], old=self.old))
            self.old, self.old_left = self.old + 1, self.old_left - 1
        elif kind == "\\":
            file.lines.append(DiffLine("\\", line))
        else:
            file.lines.append(DiffLine(" ", line[1:], old=self.old, new=self.new))
            self.old, self.new = self.old + 1, self.new + 1
            self.old_left, self.new_left = self.old_left - 1, self.new_left - 1

    def start(self, path: str, header: str, old_path: str | None = None) -> None:
        self.current = FileDiff(path, [header], old_path=old_path)
        self.files.append(self.current)

    def other_line(self, file: FileDiff | None, line: str) -> None:
        hunk = _HUNK.match(line)
        if hunk and file is not None:
            self.old, self.new = int(hunk.group(1)), int(hunk.group(3))
            self.old_left = int(hunk.group(2)) if hunk.group(2) is not None else 1
            self.new_left = int(hunk.group(4)) if hunk.group(4) is not None else 1
            file.lines.append(DiffLine("@", line))
        elif line.startswith("diff --git "):
            self.start(_git_header_path(line[len("diff --git "):]), line)
        elif line.startswith("--- ") and (file is None or file.lines or any(
                h.startswith("--- ") for h in file.header)):
            self.start("?", line, _side(line[4:], "a/"))
        elif file is None:
            self.preamble.append(line)
        elif line.startswith("--- "):
            file.header.append(line)
            file.old_path = _side(line[4:], "a/")
        elif line.startswith("+++ ") and not file.lines:
            file.header.append(line)
            file.path = _side(line[4:], "b/") or file.old_path or file.path
        elif not file.lines:
            file.header.append(line)
        else:  # between hunks, or after the last: kept visible, in order
            file.lines.append(DiffLine("#", line))


def parse_diff(text: str) -> tuple[list[str], list[FileDiff]]:
    """A unified diff's files, with every hunk line numbered on both sides, in one pass; and
    the lines before the first file (a patch's mail header, a commit message).

    Lenient, as the diff may be anyone's: a hunk ends when its counts are used up or at a
    line that cannot be in one; a line no file claims is kept as a header line."""
    parser = _Parser()
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        file = parser.current
        if (file is not None and (parser.old_left > 0 or parser.new_left > 0)
                and line[:1] in (" ", "+", "-", "\\", "")):
            parser.hunk_line(file, line)
            continue
        parser.old_left = parser.new_left = 0
        parser.other_line(file, line)
    for file in parser.files:
        if file.path == "?" and file.old_path:
            file.path = file.old_path
    preamble = parser.preamble
    while preamble and not preamble[-1].strip():
        preamble.pop()
    return preamble, parser.files


def _norm(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


@dataclass
class Placement:
    """Where each agreed finding goes, by its index in the outcome's list: ``at[(file index,
    line index)]`` the findings drawn below that diff line, in the outcome's order;
    ``per_file`` how many each file got; ``elsewhere`` those on no line of the diff."""

    at: dict[tuple[int, int], list[int]]
    per_file: dict[int, int]
    elsewhere: list[int]


def place(files: list[FileDiff], findings: list[Finding]) -> Placement:
    """Each finding below the last new-side line of the diff within its range (the line
    its range ends on, when that is shown), or ``elsewhere`` when its file is not in the
    diff or none of its lines is."""
    by_path: dict[str, int] = {}
    for position, file in enumerate(files):
        by_path.setdefault(_norm(file.path), position)
    shown: dict[int, tuple[list[int], list[int]]] = {}
    at: dict[tuple[int, int], list[int]] = {}
    per_file: dict[int, int] = {}
    elsewhere: list[int] = []
    for number, finding in enumerate(findings):
        index = by_path.get(_norm(finding.file))
        if index is None:
            elsewhere.append(number)
            continue
        if index not in shown:
            pairs = sorted((d.new, i) for i, d in enumerate(files[index].lines)
                           if d.new is not None)
            shown[index] = ([n for n, _ in pairs], [i for _, i in pairs])
        numbers, positions = shown[index]  # new-side numbers, each with its line's index
        first, last = sorted((finding.line, finding.end_line))
        k = bisect.bisect_right(numbers, last) - 1
        if k < 0 or numbers[k] < first:
            elsewhere.append(number)
            continue
        at.setdefault((index, positions[k]), []).append(number)
        per_file[index] = per_file.get(index, 0) + 1
    return Placement(at, per_file, elsewhere)


def _who(agent_id: str, models: Mapping[str, str]) -> str:
    model = models.get(agent_id)
    return f"{agent_id} ({model})" if model else agent_id


def _where(finding: Finding) -> str:
    span = (str(finding.line) if finding.end_line == finding.line
            else f"{finding.line}-{finding.end_line}")
    return f"{finding.file}:{span}"


def _card(finding: Finding, number: int | None, review: ReviewOutcome,
          models: Mapping[str, str]) -> str:
    """One finding as a card: severity badge, place, claim, evidence, fix, and who stands
    where (``number``: its anchor, for the agreed findings' list to link to)."""
    anchor = f' id="finding-{number}"' if number is not None else ""
    parts = [f'<div class="finding {_e(finding.severity)}"{anchor}>'
             f'<strong>{_e(finding.id)}</strong> <span class="sev {_e(finding.severity)}">'
             f'{_e(finding.severity)}</span> {_e(finding.category)} · '
             f'<code>{_e(_where(finding))}</code>',
             f'<div class="claim">{_e(finding.claim)}</div>']
    if finding.evidence:
        parts.append(f"<pre>{_e(finding.evidence)}</pre>")
    if finding.fix:
        parts.append(f"<div><strong>Fix:</strong> {_e(finding.fix)}</div>")
    parts.append(f'<div class="who">{_e(finding.tier)}: {_e(support(finding, review, models))}'
                 + (f" · from {_e(', '.join(finding.sources))}" if finding.sources else "")
                 + "</div>")
    if finding.disputed_by:
        items = "".join(f"<li>disputed by {_e(_who(s.agent_id, models))}: {_e(s.reason)}</li>"
                        for s in finding.disputed_by)
        parts.append(f'<ul class="who">{items}</ul>')
    if finding.reason:
        parts.append(f'<div class="who">rejected: {_e(finding.reason)}</div>')
    parts.append("</div>")
    return "".join(parts)


_ROW_CLASS = {"+": "add", "-": "del", " ": "ctx", "\\": "meta", "#": "meta", "@": "hunk"}


def _file_table(file: FileDiff, index: int, placement: Placement, cards: list[str]) -> str:
    rows = [f'<tr class="meta"><td class="n"></td><td class="n"></td><td class="t">{_e(h)}'
            "</td></tr>" for h in file.header]
    for position, line in enumerate(file.lines):
        marker = line.kind if line.kind in "+- " else ""
        rows.append(f'<tr class="{_ROW_CLASS[line.kind]}"><td class="n">{_e(line.old)}</td>'
                    f'<td class="n">{_e(line.new)}</td><td class="t">{_e(marker)}'
                    f"{_e(line.text)}</td></tr>")
        for number in placement.at.get((index, position), []):
            rows.append(f'<tr class="at"><td colspan="3">{cards[number]}</td></tr>')
    found = placement.per_file.get(index, 0)
    note = f" · {found} finding{'' if found == 1 else 's'}" if found else ""
    return (f'<details class="diff-file"{" open" if found else ""}><summary>{_e(file.path)}'
            f'<span class="muted">{_e(note)}</span></summary><table class="diff">'
            f'{"".join(rows)}</table></details>')


def _dissent(review: ReviewOutcome, models: Mapping[str, str]) -> str:
    items = []
    for d in review.dissent:
        voted = f"voted for {d.voted_for}" if d.voted_for else "no vote"
        items.append(f"<li>{_e(_who(d.agent_id, models))} ({_e(voted)}): {_e(d.reason)}</li>")
    items += [f"<li>{_e(_who(a, models))}: dropped or late</li>" for a in review.dropped]
    if not items:
        return ""
    return f'<h3>Dissent</h3><ul id="dissent">{"".join(items)}</ul>'


def review_section(record: SessionRecord) -> str:
    """The review's section of the report, or "" for a run that is not a review."""
    result = record.result
    if result is None or result.review is None:
        return ""
    review = result.review
    models = {aid: a.model for aid, a in record.status.agents.items()}
    request: RequestRecord | None = record.request
    preamble, files = parse_diff(request.context or "") if request else ([], [])
    placement = place(files, review.findings)
    cards = [_card(f, n, review, models) for n, f in enumerate(review.findings, 1)]
    target = request.review if request else None
    out = ['<section id="review"><h2>Review</h2><div class="card">'
           f'<span class="verdict {_e(review.verdict)}" id="verdict">'
           f"{_e(VERDICT_WORDS[review.verdict])}</span> · "
           f'<span id="headline">{_e(headline(review).split(": ", 1)[1])}</span>'
           f'<br><span class="muted" id="agreement">{_e(backing(review))} · '
           f"{_e(rule_line(review))}"
           + (f" · reviewed: {_e(target.described)}" if target and target.described else "")
           + "</span>"
           + (f'<br><span class="muted" id="coverage">{_e(review.coverage.words())}</span>'
              if review.coverage is not None else "")
           + "".join(f'<p class="muted">{_e(line[0].upper() + line[1:])}</p>'
                     for line in (tie_line(review), summary_line(review, models)) if line)
           + "</div>"]
    if review.findings:
        items = "".join(
            f'<li><a href="#finding-{n}">{_e(f.id)}</a> <span class="sev {_e(f.severity)}">'
            f"{_e(f.severity)}</span> <code>{_e(_where(f))}</code> {_e(f.claim)}</li>"
            for n, f in enumerate(review.findings, 1))
        out.append(f'<h3>Agreed findings</h3><ul id="agreed">{items}</ul>')
    else:
        out.append('<p class="muted">No finding was backed by a majority of the team.</p>')
    if placement.elsewhere:
        why = ("the record holds no diff" if not files
               else "their file or lines are not in the diff")
        out.append(f'<h3>Not on a line of the diff</h3><p class="muted">{_e(why)}</p>'
                   f'<div id="off-diff">{"".join(cards[n] for n in placement.elsewhere)}'
                   "</div>")
    for words, key, found in ((UNCONFIRMED_WORDS, "unconfirmed", review.unconfirmed),
                              (REJECTED_WORDS, "rejected", review.rejected)):
        if found:
            out.append(f'<h3>{_e(words.rstrip(":"))}</h3><div id="{key}">'
                       + "".join(_card(f, None, review, models) for f in found) + "</div>")
    out.append(_dissent(review, models))
    if files or preamble:
        out.append('<h3>The diff</h3><div id="diff">')
        if preamble:
            out.append(f'<pre class="muted">{_e(chr(10).join(preamble))}</pre>')
        out += [_file_table(f, i, placement, cards) for i, f in enumerate(files)]
        out.append("</div>")
    out.append("</section>")
    return "\n".join(out)
