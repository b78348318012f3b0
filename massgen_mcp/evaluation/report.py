"""``summary.html`` of ``massgen-mcp eval``: the page a person reads to decide whether a team of
models beats its best member, by how much, and at what cost.

In order: a one-line verdict computed from the paired test, a chart of accuracy against cost
(inline SVG), the methods, the paired tests, the best member, every question with who got it
right, and the settings. One file, no network: inline CSS (the run report's look, light and
dark), no scripts, a Content-Security-Policy that forbids every fetch, hover text via ``title``.
Questions, answers, method names and settings come from datasets and models, so every string
from the summary is HTML-escaped before it is placed in the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from massgen_mcp.core.records import clip
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
LABEL_CHARS = 28  # a point's label in the chart
SIGNIFICANT = 0.05  # the p-value below which the verdict names a winner

# kind: (legend text, marker shape)
KINDS: dict[MethodKind, tuple[str, str]] = {
    MethodKind.CONSENSUS: ("team consensus", "circle"),
    MethodKind.MEMBER: ("one member alone", "square"),
    MethodKind.MAJORITY: ("majority of first drafts", "diamond"),
    MethodKind.SELF_CONSISTENCY: ("self-consistency", "triangle"),
    MethodKind.CEILING: ("ceiling (any member right)", "ring"),
}

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

# The chart's geometry, in SVG user units.
WIDTH, HEIGHT = 860, 420
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 16, 84  # plot margins; the legend sits under the x axis
UNKNOWN_BAND = 84  # right of the plot: methods whose cost is unknown
CHAR_WIDTH, LINE_HEIGHT = 6.6, 13  # a 12 px label's width per character and its height


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _interval(method: MethodScore) -> str:
    """A bootstrap interval as "[70–85]" (percent)."""
    low, high = method.interval
    return f"[{low * 100:.0f}–{high * 100:.0f}]"


def _usd_tick(value: float) -> str:
    """An axis tick in dollars, without trailing zeros: $0.002, not $0.0020."""
    text = usd(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


def _p(p: float) -> str:
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3g}" if p < 0.1 else f"{p:.2f}"


def _short_name(name: str, limit: int) -> str:
    """A method's name for a narrow place: without its "(provider/model)" tail, then cut."""
    if name.endswith(")") and " (" in name:
        name = name[:name.rindex(" (")]
    return name if len(name) <= limit else name[:limit - 1] + "…"


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
    scores = f" {_pct(method.accuracy)} {_interval(method)}" if method else ""
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


# The chart.

@dataclass
class _Point:
    method: MethodScore
    x: float  # pixels
    y: float
    low: float  # the interval's ends, pixels
    high: float


def _nice_ticks(top: float) -> list[float]:
    """0 and round steps (1, 2, 2.5 or 5 times a power of ten) up to at least ``top``."""
    top = top if math.isfinite(top) and top > 1e-12 else 1.0
    raw = top / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(f * magnitude for f in (1, 2, 2.5, 5, 10) if f * magnitude >= raw * 0.999)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _x_values(methods: Sequence[MethodScore]) -> tuple[str, list[float | None]]:
    """The x axis's title and each method's value: cost per question, or mean calls when no
    cost is known (unpriced local models) or every cost is zero."""
    costs = [m.cost_per_question for m in methods]
    if any(c for c in costs):
        return "cost per question (USD)", costs
    return "mean model calls per question (no cost known)", [m.mean_calls for m in methods]


def _place_points(methods: Sequence[MethodScore], xs: Sequence[float | None],
                  x_of: Callable[[float], float],
                  unknown_x: float) -> list[_Point]:
    """Each method at its pixel position; points in the same column are spread sideways, so
    that neither their markers nor their interval bars hide one another."""
    points: list[_Point] = []
    taken: dict[int, int] = {}
    for method, value in zip(methods, xs, strict=True):
        x = unknown_x if value is None else x_of(value)
        column = round(x / 4)
        x += 7 * taken.get(column, 0)
        taken[column] = taken.get(column, 0) + 1
        low, high = method.interval
        points.append(_Point(method, x, _y(method.accuracy), _y(low), _y(high)))
    return points


def _on_scale(value: float) -> float:
    """``value`` within [0, 1]; one that is not a number sits at 0, so no NaN reaches the SVG."""
    return min(1.0, max(0.0, value)) if not math.isnan(value) else 0.0


def _y(share: float) -> float:
    return TOP + (1 - _on_scale(share)) * (HEIGHT - TOP - BOTTOM)


def _marker(shape: str, kind: str, x: float, y: float) -> str:
    cls = f'class="mark k-{kind}"'
    if shape == "square":
        return f'<rect {cls} x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9"/>'
    if shape == "diamond":
        return (f'<path {cls} d="M{x:.1f} {y - 6:.1f}L{x + 6:.1f} {y:.1f}L{x:.1f} '
                f'{y + 6:.1f}L{x - 6:.1f} {y:.1f}Z"/>')
    if shape == "triangle":
        return (f'<path {cls} d="M{x:.1f} {y - 6:.1f}L{x + 6:.1f} {y + 4.5:.1f}L{x - 6:.1f} '
                f'{y + 4.5:.1f}Z"/>')
    radius = 6 if shape == "ring" else 5
    return f'<circle {cls} cx="{x:.1f}" cy="{y:.1f}" r="{radius}"/>'


def _labels(points: Sequence[_Point], right: float) -> list[tuple[float, float, str]]:
    """Where each point's label goes (x, baseline y, text-anchor), so that it overlaps no
    marker and no label placed, stays in the chart, and is nearer its own marker than any
    other (points of equal accuracy and cost sit 7 px apart: a label put beside one of them
    on the far side of another was read as the other's). Beside the point, else above or
    below it, at growing distance; failing every rule but the last, the first free place."""
    markers = [(p.x, p.y) for p in points]
    placed = [(p.x - 7, p.x + 7, p.y + 4) for p in points]  # left, right, baseline
    out: list[tuple[float, float, str]] = [(0.0, 0.0, "start")] * len(points)
    for i in sorted(range(len(points)), key=lambda j: (points[j].y, points[j].x)):
        point = points[i]
        width = CHAR_WIDTH * len(_short_name(point.method.name, LABEL_CHARS))
        fallback: tuple[float, float, float, str] | None = None
        chosen: tuple[float, float, float, str] | None = None
        for left, y, x, anchor in _label_places(point, width, right):
            if any(left < b_right and a_left < left + width and abs(y - base) < LINE_HEIGHT
                   for a_left, b_right, base in placed):
                continue
            fallback = fallback or (left, y, x, anchor)
            if _nearest(markers, (x, y - 4)) == i:
                chosen = (left, y, x, anchor)
                break
        left, y, x, anchor = chosen or fallback or (point.x + 9, point.y + 4, point.x + 9,
                                                    "start")
        placed.append((left, left + width, y))
        out[i] = (x, y, anchor)
    return out


def _label_places(point: _Point, width: float, right: float
                  ) -> Iterator[tuple[float, float, float, str]]:
    """Candidate places of a label, best first: (left edge, baseline y, anchor x, anchor)."""
    beside = [(point.x + 9, point.x + 9, "start"), (point.x - 9 - width, point.x - 9, "end")]
    if point.x + 9 + width > right:  # no room on the right: the left first
        beside.reverse()
    for shift in (0, 1, -1, 2, -2, 3, -3, 4, -4):
        y = point.y + 4 + shift * LINE_HEIGHT
        for left, x, anchor in beside:
            if left >= LEFT and left + width <= right:
                yield left, y, x, anchor
        if shift == 0:
            continue
        # Over or under its own marker, centred: nearer it than a neighbour 7 px aside.
        y = point.y + (-9 if shift < 0 else 17) + (abs(shift) - 1) * LINE_HEIGHT * (
            -1 if shift < 0 else 1)
        left = point.x - width / 2
        if left >= LEFT and left + width <= right:
            yield left, y, point.x, "middle"


def _nearest(markers: Sequence[tuple[float, float]], at: tuple[float, float]) -> int:
    """The index of the marker nearest ``at`` (-1 on a tie: the label would be ambiguous)."""
    distances = [math.dist(m, at) for m in markers]
    best = min(distances)
    return distances.index(best) if distances.count(best) == 1 else -1


def _point_svg(point: _Point, label: tuple[float, float, str]) -> str:
    method, kind = point.method, point.method.kind
    name = method.name
    tip = (f"{name}: {_pct(method.accuracy)} {_interval(method)} · "
           f"{usd(method.cost_per_question)} per question · "
           f"{method.mean_calls:.1f} calls per question")
    x = f"{point.x:.1f}"
    bar = (f'<path class="bar k-{kind}" d="M{x} {point.low:.1f}V{point.high:.1f}'
           f'M{point.x - 4:.1f} {point.low:.1f}h8M{point.x - 4:.1f} {point.high:.1f}h8"/>')
    lx, ly, anchor = label
    return (f'<g class="point" data-kind="{_e(kind)}"><title>{_e(tip)}</title>{bar}'
            f"{_marker(KINDS[kind][1], kind, point.x, point.y)}"
            f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">'
            f"{_e(_short_name(name, LABEL_CHARS))}</text></g>")


def _axes(ticks: Sequence[float], x_of: Callable[[float], float], title: str, money: bool,
          plot_right: float, unknown_x: float | None) -> str:
    bottom = HEIGHT - BOTTOM
    parts = [f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{plot_right - LEFT:.1f}" '
             f'height="{bottom - TOP}"/>']
    for i in range(6):
        y = _y(i / 5)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{plot_right:.1f}" y1="{y:.1f}" '
                     f'y2="{y:.1f}"/><text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{i * 20} %</text>')
    for tick in ticks:
        x = x_of(tick)
        text = _usd_tick(tick) if money else f"{tick:g}"
        parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{bottom}"/>'
                     f'<text class="tick" x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">'
                     f"{_e(text)}</text>")
    if unknown_x is not None:
        parts.append(f'<text class="tick" x="{unknown_x:.1f}" y="{bottom + 16}" '
                     'text-anchor="middle">unknown</text>')
    parts.append(f'<text class="axis-title" x="{(LEFT + plot_right) / 2:.1f}" '
                 f'y="{bottom + 34}" text-anchor="middle">{_e(title)}</text>'
                 f'<text class="axis-title" transform="translate(16 {(TOP + bottom) / 2:.1f}) '
                 f'rotate(-90)" text-anchor="middle">accuracy (bar: 95 % interval)</text>')
    return "".join(parts)


def _legend(kinds: Sequence[MethodKind]) -> str:
    parts, x, y = [], float(LEFT), HEIGHT - 16
    for kind in kinds:
        text, shape = KINDS[kind]
        parts.append(f'{_marker(shape, kind, x + 6, y - 4)}<text x="{x + 16:.1f}" y="{y}">'
                     f"{_e(text)}</text>")
        x += 30 + CHAR_WIDTH * len(text)
    return f'<g class="legend">{"".join(parts)}</g>'


def chart(methods: Sequence[MethodScore]) -> str:
    """Accuracy (with its interval) against cost per question, one point per method."""
    if not methods:
        return '<p class="muted">No method was scored.</p>'
    title, xs = _x_values(methods)
    money = title.startswith("cost")
    unknown = any(x is None for x in xs)
    plot_right = WIDTH - RIGHT - (UNKNOWN_BAND if unknown else 0)
    unknown_x = plot_right + UNKNOWN_BAND / 2 if unknown else None
    ticks = _nice_ticks(max([x for x in xs if x is not None] + [0.0]) * 1.05)
    span = ticks[-1] or 1.0

    def x_of(value: float) -> float:
        return LEFT + 12 + (plot_right - LEFT - 24) * _on_scale(value / span)

    points = _place_points(methods, xs, x_of, unknown_x or 0.0)
    labels = _labels(points, WIDTH - RIGHT)
    kinds = list(dict.fromkeys(m.kind for m in methods))
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'aria-label="accuracy against {_e(title)}">'
            f"{_axes(ticks, x_of, title, money, plot_right, unknown_x)}"
            f"{''.join(_point_svg(p, label) for p, label in zip(points, labels, strict=True))}"
            f"{_legend(kinds)}</svg>")


# The tables.

def _methods_table(methods: Sequence[MethodScore], questions: int) -> str:
    rows = "".join(
        f'<tr><td title="{_e(m.kind)}">{_e(m.name)}</td>'
        f'<td class="num">{_pct(m.accuracy)} {_interval(m)}</td>'
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
    share = "unknown" if summary.all_wrong is None else _pct(summary.all_wrong)
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
    head = "".join(f'<th class="mark" title="{_e(n)}">{_e(_short_name(n, HEADER_CHARS))}</th>'
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
