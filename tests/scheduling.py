"""The order the xdist workers take the tests in (a plugin, loaded by tests/conftest.py)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest

T = TypeVar("T")


def long_first(items: Sequence[T], workers: int, is_long: Callable[[T], bool]) -> list[T]:
    """``items`` reordered so that each worker's share, as worksteal splits the list (the
    i-th of n takes ``left // (n - i)`` of what is left), starts with its turn of the long
    ones; the rest keep their order."""
    long = [item for item in items if is_long(item)]
    rest = iter([item for item in items if not is_long(item)])
    shares = [long[k::workers] for k in range(workers)]
    left = len(items)
    for k, share in enumerate(shares):
        size = left // (workers - k)
        left -= size
        share.extend(itertools.islice(rest, max(0, size - len(share))))
    return [item for share in shares for item in share] + list(rest)


@pytest.hookimpl(trylast=True)  # after -m and --deselect: the list the workers will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests (``slow``) start first, spread over the workers: worksteal hands each
    worker a contiguous share of the list and lets an idle one take the end of a busy one's,
    so a long test late in a share kept a core busy while the other had nothing left (half a
    minute of the suite's time). Every worker computes the same order from the same list; the
    controller takes the order from them (pyproject's addopts choose worksteal; under another
    --dist the order is only a different one)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2 or not hasattr(config, "workerinput"):
        return
    items[:] = long_first(items, workers, lambda item: item.get_closest_marker("slow") is not None)
