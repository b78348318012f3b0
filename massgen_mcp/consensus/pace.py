"""When round one stops waiting for a straggler: the quorum rule, as plain arithmetic.

Real providers are uneven: one model in a team is often several times slower than the rest,
and waiting for it in round one delays every review. The rule is relative, never a fixed
number of seconds, so it holds for a 2 s API model and a 2 min coding CLI alike:

* a **quorum** is a strict majority of the live agents; before it has answered nobody is late;
* then an agent still writing its first answer is **late** once the round has lasted
  ``late_factor`` times the median time the answered agents took (3.0 by default: three
  times as slow as the typical peer is a clear margin, not noise; with lognormal latencies of
  shape 0.5 one call in seventy is that slow by chance);
* review then opens for the agents that have answered; a late agent's turn goes on, its
  first answer still written on its own (it saw no peer's answer) and joining as a new answer
  when it arrives.

:func:`late_at` is the rule as plain sums, tested without a clock; :class:`FirstRound` is
the engine's stopwatch for it.
"""

from __future__ import annotations

import asyncio
import time
from statistics import median


def quorum(live: int) -> int:
    """How many first answers must be in before anyone counts as late."""
    return live // 2 + 1


def late_at(answered_s: list[float], live: int, late_factor: float) -> float | None:
    """Seconds into round one after which the agents still writing are late, or None while
    fewer than a quorum of ``live`` agents have answered (``answered_s``: the times they
    took, measured in this run; answers replayed from a record carry no time)."""
    if not answered_s or len(answered_s) < quorum(live):
        return None
    return late_factor * median(answered_s)


def _now() -> float:
    """The running event loop's clock (``time.monotonic`` unless the loop keeps its own, as
    the benchmarks' virtual time does: :mod:`massgen_mcp.testing.virtual_time`), the same
    clock the engine's waits read; outside a loop, ``time.monotonic``."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


class FirstRound:
    """Round one's stopwatch: when it began and how long each first answer took."""

    def __init__(self, late_factor: float) -> None:
        self.late_factor = late_factor
        self.answered_s: list[float] = []
        self.start()

    def start(self) -> None:
        """The agents' turns begin now (after the run's MCP servers are up)."""
        self._started = _now()

    def elapsed(self) -> float:
        return _now() - self._started

    def answered(self) -> None:
        self.answered_s.append(self.elapsed())

    def until_late(self, live: int) -> float | None:
        """Seconds until the agents still writing are late (0 if they are), or None."""
        at = late_at(self.answered_s, live, self.late_factor)
        return None if at is None else max(0.0, at - self.elapsed())
