"""``summary.html`` of ``massgen-mcp eval``: the page a person reads to decide whether a team of
models beats its best member, by how much, and at what cost.

In order: a one-line verdict computed from the paired test, a chart of accuracy against cost
(inline SVG), the methods, the paired tests, the best member, every question with who got it
right, and the settings. One file, no network: inline CSS (the run report's look, light and
dark), no scripts, a Content-Security-Policy that forbids every fetch, hover text via ``title``.
Questions, answers, method names and settings come from datasets and models, so every string
from the summary is HTML-escaped before it is placed in the page.

The chart is drawn by :mod:`.cost_chart`; this module writes the rest of the page around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from massgen_mcp.core.records import clip
from massgen_mcp.evaluation.cost_chart import chart
from massgen_mcp.evaluation.figure_text import interval, pct, short_name
from massgen_mcp.evaluation.summary import (
    Comparison,
    EvalSummary,
    ItemOutcome,
    MethodKind,
    MethodScore,
)
from massgen_mcp.render.format import escape as _e
from massgen_mcp.render.format import usd
from massgen_mcp.render.html import CSS

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
QUESTION_CHARS = 200  # the per-question table's cut; the full text is in the cell's title
HEADER_CHARS = 16  # a method's column header in the per-question table
SIGNIFICANT = 0.05  # the p-value below which the verdict names a winner

EVAL_CSS = """
#verdict{font-size:16px;margin:12px 0}.warn{color:var(--warn)}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}td.num{white-space:nowrap}
td.mark{text-align:center}td.ok{color:var(--win)}td.bad{color:var(--bad)}
td.none{color:var(--muted)}dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}
dt{color:var(--muted)}dd{margin:0;word-break:break-word}.wide{overflow-x:auto}
svg.chart{width:100%;max-width:860px;height:auto;font:12px system-ui,sans-serif}
svg.chart text{fill:var(--fg)}svg.chart .axis-title,svg.chart .tick{fill:var(--muted)}
.grid{stroke:var(--line);stroke-width:1}.frame{stroke:var(--muted);fill:none}
.bar{stroke-width:1.5}.mark{stroke-width:1.5}
.k-consensus{fill:var(--accent);stroke:var(--accent)}.k-member{fill:#64748b;stroke:#64748b}
.k-majority{fill:var(--warn);stroke:var(--warn)}.k-self_consistency{fill:#9333ea;stroke:#9333ea}
.k-ceiling{fill:none;stroke:var(--win)}
"""


def _p(p: float) -> str:
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3g}" if p < 0.1 else f"{p:.2f}"


# The verdict.

def _team(methods: Sequence[MethodScore]) -> MethodScore | None:
    """The method the page is about: the first consensus, else the first method."""
    return next((m for m in methods if m.kind is MethodKind.CONSENSUS),
                methods[0] if methods else None)


def _headline_test(summary: EvalSummary, team: str, best: str | None) -> Comparison | None:
    """The paired test of the team against its best member, else the first one there is."""
    comparisons = summary.comparisons
    wanted = {team, best}
    return next((c for c in comparisons if {c.a, c.b} == wanted),
                comparisons[0] if comparisons else None)


def _accuracy_phrase(name: str, by_name: Mapping[str, MethodScore], best: str | None) -> str:
    role = "best member " if name == best else ""
    method = by_name.get(name)
    scores = f" {pct(method.accuracy)} {interval(method)}" if method else ""
    return f"{role}<strong>{_e(name)}</strong>{scores}"


def _outcome(test: Comparison) -> str:
    if test.p_value >= SIGNIFICANT or test.a_only == test.b_only:
        return "no clear difference"
    better = test.a if test.a_only > test.b_only else test.b
    return f"<strong>{_e(better)}</strong> is better"


def verdict(summary: EvalSummary) -> str:
    """The page's one line, as HTML: the team against its best member, and what the paired
    test says; just the accuracies when there is no test."""
    team = _team(summary.methods)
    if team is None:
        return "No method was scored."
    by_name = {m.name: m for m in summary.methods}
    best = summary.best_member.name if summary.best_member else None
    test = _headline_test(summary, team.name, best)
    if test is None:
        names = dict.fromkeys(n for n in (team.name, best) if n is not None)
        return "; ".join(_accuracy_phrase(n, by_name, best) for n in names) + "."
    return (f"{_accuracy_phrase(test.a, by_name, best)} vs "
            f"{_accuracy_phrase(test.b, by_name, best)}: p = {_e(_p(test.p_value))} "
            f"(McNemar, {test.a_only} vs {test.b_only} discordant): {_outcome(test)}")


# The tables.

def _methods_table(methods: Sequence[MethodScore], questions: int) -> str:
    rows = "".join(
        f'<tr><td title="{_e(m.kind)}">{_e(m.name)}</td>'
        f'<td class="num">{pct(m.accuracy)} {interval(m)}</td>'
        f'<td class="num">{m.correct}/{questions}</td>'
        f'<td class="num">{m.mean_calls:.1f}</td><td class="num">{m.mean_tokens:,.0f}</td>'
        f'<td class="num" title="total {usd(m.cost_usd)}">{usd(m.cost_per_question)}</td>'
        f'<td class="num">{usd(m.cost_per_correct)}</td>'
        f'<td class="num">{m.mean_seconds:.1f} s</td></tr>'
        for m in methods)
    return ('<table class="methods"><tr><th>method</th><th class="num">accuracy [95 %]</th>'
            '<th class="num">correct</th><th class="num">calls / question</th>'
            '<th class="num">tokens / question</th><th class="num">cost / question</th>'
            '<th class="num">cost / correct answer</th><th class="num">seconds / question</th>'
            f"</tr>{rows}</table>")


def _tests_table(comparisons: Sequence[Comparison]) -> str:
    if not comparisons:
        return '<p class="muted">No paired tests.</p>'
    rows = "".join(
        f'<tr><td>{_e(c.a)}</td><td>{_e(c.b)}</td>'
        f'<td class="num">{c.a_only}</td><td class="num">{c.b_only}</td>'
        f'<td class="num">{c.both}</td><td class="num">{c.neither}</td>'
        f'<td class="num">{_e(_p(c.p_value))}</td><td>{_outcome(c)}</td></tr>'
        for c in comparisons)
    return ("<table class='tests'><tr><th>a</th><th>b</th><th class='num'>only a right</th>"
            "<th class='num'>only b right</th><th class='num'>both right</th>"
            "<th class='num'>neither</th><th class='num'>p</th><th>verdict</th></tr>"
            f"{rows}</table><p class='muted'>McNemar's exact test: on the questions exactly "
            f"one of the two got right, is the split more lopsided than a fair coin's? "
            f"p &lt; {SIGNIFICANT} names the better one.</p>")


def _best_member(summary: EvalSummary) -> str:
    best = summary.best_member
    if best:
        line = (f"<p>Best member: <strong>{_e(best.name)}</strong>, chosen by "
                f"{_e(best.chosen_by)}.</p>")
        if best.warning:
            line += f'<p class="warn">⚠ {_e(best.warning)}</p>'
    else:
        line = '<p class="muted">No best member (no member was scored alone).</p>'
    share = "unknown" if summary.all_wrong is None else pct(summary.all_wrong)
    return (f"{line}<p>Questions every member got wrong: <strong>{share}</strong>"
            " (no choice among the members' answers is right there).</p>")


def _mark(value: bool | None) -> str:
    if value is True:
        return '<td class="mark ok">✓</td>'
    if value is False:
        return '<td class="mark bad">✗</td>'
    return '<td class="mark none" title="not scored">–</td>'


def _items_table(items: Sequence[ItemOutcome], names: Sequence[str]) -> str:
    if not items:
        return '<p class="muted">No questions.</p>'
    head = "".join(f'<th class="mark" title="{_e(n)}">{_e(short_name(n, HEADER_CHARS))}</th>'
                   for n in names)
    rows = []
    for number, item in enumerate(items, 1):
        rows.append(
            f'<tr class="item"><td class="num" title="{_e(item.source)}">{number}</td>'
            f'<td title="{_e(item.question)}">{_e(clip(item.question, QUESTION_CHARS)[0])}</td>'
            f'<td>{_e(item.expected)}</td>'
            f"{''.join(_mark(item.correct.get(n)) for n in names)}</tr>")
    return ('<div class="wide"><table class="items"><tr><th class="num">#</th><th>question</th>'
            f"<th>expected</th>{head}</tr>{''.join(rows)}</table></div>"
            '<p class="muted">✓ right · ✗ wrong · – not scored · hover a question for all of '
            "it, a number for its source</p>")


def _setting(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _settings(settings: Mapping[str, Any]) -> str:
    if not settings:
        return '<p class="muted">No settings recorded.</p>'
    rows = "".join(f"<dt>{_e(key)}</dt><dd>{_e(_setting(value))}</dd>"
                   for key, value in settings.items())
    return f"<dl>{rows}</dl>"


def render_eval_summary(summary: EvalSummary) -> str:
    """The whole page, a self-contained HTML5 document, from the eval's summary."""
    methods = summary.methods
    names = [m.name for m in methods]
    name, questions, of = summary.name, summary.questions, summary.of
    counted = f"{len(methods)} method{'' if len(methods) == 1 else 's'}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<link rel="icon" href="data:,">
<title>massgen eval {_e(name)}</title><style>{CSS}{EVAL_CSS}</style></head>
<body>
<h1>Eval {_e(name)}: does the team beat its best member?</h1>
<p class="muted">{_e(questions)} of {_e(of)} questions scored · {counted}</p>
<p id="verdict" class="card">{verdict(summary)}</p>
<h2>Accuracy and cost</h2>{chart(methods)}
<h2>Methods</h2>{_methods_table(methods, questions)}
<h2>Paired tests</h2>{_tests_table(summary.comparisons)}
<h2>Best member</h2>{_best_member(summary)}
<h2>Questions</h2>{_items_table(summary.items, names)}
<h2>Settings</h2>{_settings(summary.settings)}
</body></html>
"""
