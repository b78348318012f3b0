"""How a method's figures read, the same in the chart and in the tables of ``summary.html``:
one rounding of a share, one way to write an interval, one way to shorten a name."""

from __future__ import annotations

from massgen_mcp.evaluation.summary import MethodScore


def pct(share: float) -> str:
    """A share as a whole percent: "83 %"."""
    return f"{share * 100:.0f} %"


def interval(method: MethodScore) -> str:
    """A bootstrap interval as "[70–85]" (percent)."""
    low, high = method.interval
    return f"[{low * 100:.0f}–{high * 100:.0f}]"


def short_name(name: str, limit: int) -> str:
    """A method's name for a narrow place: without its "(provider/model)" tail, then cut."""
    if name.endswith(")") and " (" in name:
        name = name[:name.rindex(" (")]
    return name if len(name) <= limit else name[:limit - 1] + "…"
