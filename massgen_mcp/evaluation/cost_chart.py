"""The chart of ``summary.html``: each method's accuracy (with its interval) against its cost
per question, as inline SVG.

The chart is the page's one picture, and the part that needs geometry: the axes' round ticks,
points of equal accuracy and cost spread sideways so that neither their markers nor their
interval bars hide one another, and labels placed so that each overlaps nothing and is
nearer its own marker than any other. Method names come from datasets and models, so every
string is HTML-escaped; a value that is not a number is drawn on the axis, never as ``NaN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from massgen_mcp.evaluation.figure_text import interval, pct, short_name
from massgen_mcp.evaluation.summary import MethodKind, MethodScore
from massgen_mcp.render.format import escape as _e
from massgen_mcp.render.format import usd

LABEL_CHARS = 28  # a point's label in the chart

# kind: (legend text, marker shape)
KINDS: dict[MethodKind, tuple[str, str]] = {
    MethodKind.CONSENSUS: ("team consensus", "circle"),
    MethodKind.MEMBER: ("one member alone", "square"),
    MethodKind.MAJORITY: ("majority of first drafts", "diamond"),
    MethodKind.SELF_CONSISTENCY: ("self-consistency", "triangle"),
    MethodKind.CEILING: ("ceiling (any member right)", "ring"),
}

# The chart's geometry, in SVG user units.
WIDTH, HEIGHT = 860, 420
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 16, 84  # plot margins; the legend sits under the x axis
UNKNOWN_BAND = 84  # right of the plot: methods whose cost is unknown
CHAR_WIDTH, LINE_HEIGHT = 6.6, 13  # a 12 px label's width per character and its height


def _usd_tick(value: float) -> str:
    """An axis tick in dollars, without trailing zeros: $0.002, not $0.0020."""
    text = usd(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


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
        width = CHAR_WIDTH * len(short_name(point.method.name, LABEL_CHARS))
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
    tip = (f"{name}: {pct(method.accuracy)} {interval(method)} · "
           f"{usd(method.cost_per_question)} per question · "
           f"{method.mean_calls:.1f} calls per question")
    x = f"{point.x:.1f}"
    bar = (f'<path class="bar k-{kind}" d="M{x} {point.low:.1f}V{point.high:.1f}'
           f'M{point.x - 4:.1f} {point.low:.1f}h8M{point.x - 4:.1f} {point.high:.1f}h8"/>')
    lx, ly, anchor = label
    return (f'<g class="point" data-kind="{_e(kind)}"><title>{_e(tip)}</title>{bar}'
            f"{_marker(KINDS[kind][1], kind, point.x, point.y)}"
            f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">'
            f"{_e(short_name(name, LABEL_CHARS))}</text></g>")


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
