"""Large imports run with the cyclic collector paused, and it comes back as it was."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from massgen_mcp.core.loading import loading


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_paused_inside_and_on_again_after() -> None:
    with loading():
        assert not gc.isenabled()
        with loading():  # a nested load does not turn it back on early
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_import_that_fails_still_turns_it_back_on() -> None:
    with pytest.raises(ImportError), loading():
        import massgen_mcp_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with loading():
        pass
    assert not gc.isenabled()


def test_two_threads_loading_at_once_turn_it_on_once_both_are_done() -> None:
    inside, release = threading.Barrier(2), threading.Event()
    seen: list[bool] = []

    def load() -> None:
        with loading():
            inside.wait(10)
            release.wait(10)
        seen.append(gc.isenabled())

    other = threading.Thread(target=load)
    other.start()
    with loading():
        inside.wait(10)
        release.set()
        other.join(10)
        assert seen == [False], "the other thread's end turned it on under this load"
    assert gc.isenabled()


def test_what_was_loaded_is_frozen_and_a_run_s_cycles_are_still_collected() -> None:
    code = """
import gc
from massgen_mcp.core.loading import loading
before = gc.get_freeze_count()
with loading():
    import email.mime.multipart
assert gc.get_freeze_count() > before, "nothing frozen"
class Node:
    pass
a = Node(); b = Node(); a.other = b; b.other = a
del a, b
assert gc.isenabled() and gc.collect() >= 2, "the cycle was not collected"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
