"""Large libraries load with the cyclic garbage collector paused, and what they leave is frozen.

An import makes hundreds of thousands of objects that live as long as the process (classes,
functions, module dicts). While they are made, the collector runs every few hundred
allocations and, as the heap grows, walks all of it again and again, finding almost nothing:
litellm's import costs ~2.9 s of CPU with the collector on and ~2.0 s with it paused, the
server's (fastmcp, mcp) ~1.05 s against ~0.9 s (docs/performance.md). Frozen afterwards
(:func:`gc.freeze`), those objects are never walked again by the collections a run makes,
nor by the last one at exit (~0.6 s of CPU for litellm's ~300,000).

Only import work goes inside :func:`loading`; a run never does, so a cycle the run makes is
collected as usual. The few cycles an import leaves behind are frozen with the rest: about two
thousand objects for litellm, measured.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = True


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Pause the collector while the body imports, then freeze what was made and resume it.
    Nested or concurrent uses (the server's load and litellm's warm-up thread) resume it once,
    when the last one ends, and only if it was on before the first began."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.freeze()
                if _was_enabled:
                    gc.enable()
