"""Reading a record off the event loop, in a lane of its own.

A record's events are read back from the end and capped (records/store.py), but a planted
log still takes up to a second to read; read on the event loop it froze every other call, so
it is read in a thread. Not in the loop's default executor: that has cpu + 4 threads, and it is
also where the loop resolves host names and where the other faces' blocking work goes, so a
few concurrent report reads filled it and stalled all of them. Record reads queue in this
lane among themselves instead.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

READERS = 2  # record reads at once; more queue here, not in the loop's executor

_P = ParamSpec("_P")
_T = TypeVar("_T")
_lane = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="massgen-record-read")


async def read_off_loop(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``fn(*args, **kwargs)`` in the record-read lane."""
    return await asyncio.get_running_loop().run_in_executor(
        _lane, functools.partial(fn, *args, **kwargs))
