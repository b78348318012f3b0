"""The small formatters every view for people shares: one HTML escape and one way to write
money, so the run report, the eval page and the eval table cannot drift apart."""

from __future__ import annotations

import html
import math

from massgen_mcp.core.edges import without_controls


def escape(value: object) -> str:
    """Any value as text safe inside an element or a quoted attribute (``None`` is empty),
    without the control and bidirectional characters no page should obey (a right-to-left
    override reorders what a reader sees): the rule of every model text's record
    (:data:`~massgen_mcp.core.outcomes.ModelText`), for what a page shows from elsewhere."""
    return html.escape(without_controls("" if value is None else str(value)), quote=True)


def usd(value: float | None) -> str:
    """Dollars with as many decimals as a small amount needs: $0.0012, $0.050, $1.50; "unknown"
    when the price is (a provider without prices reports none, and a sum may overflow)."""
    if value is None or not math.isfinite(value):
        return "unknown"
    if value == 0:
        return "$0"
    decimals = min(8, max(2, 1 - math.floor(math.log10(abs(value)))))
    return f"${value:.{decimals}f}"
