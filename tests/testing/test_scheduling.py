"""The suite's own scheduling: each worker's share starts with its turn of the long tests."""

from __future__ import annotations

from tests.scheduling import long_first


def shares(items: list[str], workers: int) -> list[list[str]]:
    """How worksteal first splits a list among idle workers."""
    out, left = [], list(items)
    for k in range(workers):
        size = len(left) // (workers - k)
        out.append(left[:size])
        left = left[size:]
    return out


def test_each_share_starts_with_long_tests_and_nothing_is_lost() -> None:
    items = [f"t{i:02d}" for i in range(20)] + ["L1", "L2", "L3", "L4"]
    ordered = long_first(items, 3, lambda name: name.startswith("L"))
    assert sorted(ordered) == sorted(items)
    firsts = [share[:2] for share in shares(ordered, 3)]
    assert firsts == [["L1", "L4"], ["L2", "t06"], ["L3", "t13"]]
    assert [i for i in ordered if i.startswith("t")] == [i for i in items if i.startswith("t")]


def test_more_long_tests_than_fit_in_a_share_are_all_kept() -> None:
    items = ["L1", "L2", "L3", "t1"]
    ordered = long_first(items, 2, lambda name: name.startswith("L"))
    assert sorted(ordered) == sorted(items) and ordered[0] == "L1"
