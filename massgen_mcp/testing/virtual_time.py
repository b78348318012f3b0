"""An event loop whose clock jumps to its next timer: the real engine in virtual time.

Under real latency a run spends its seconds waiting on models, and the protocol's timing
rules (the first round's quorum, the early decision, the turns it cancels) decide how many.
With every model in process (:class:`~.scripted.ScriptedProvider` with a
:class:`~.scripted.Latency`) nothing outside the loop is awaited, so a loop whose clock skips
straight to the next timer runs the real engine through minutes of model time in milliseconds
of CPU. What it measures is the rules' own floor: the time a user would wait if the engine,
HTTP and the models' servers cost nothing (``bench/run.py --only latency_floor``, hundreds of
seeds a rule).

Only the loop's clock (``loop.time()``, what ``asyncio.sleep``, ``asyncio.timeout`` and the
quorum's stopwatch read) is virtual; ``time.monotonic()`` and the wall clock are not. With no
timer due the loop blocks for real, so a thread's result still wakes it.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that never waits for a timer: when nothing is ready it moves the clock
    on by the time the loop would have slept."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer at all: only the outside world (a thread) can wake us
            return super().select(None)
        ready = super().select(0)
        if not ready:
            self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time, starting at 0."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
