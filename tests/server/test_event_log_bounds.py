"""A planted events.jsonl just under its size cap (issue 57, N6): 250 MiB of tiny events
took two minutes of CPU to parse, and read on the server's event loop it froze the server.
A read parses the last EVENTS_READ_MAX events only, in a worker thread, and says how many it
skipped; what needs every event (resume, the events resource) refuses in one line."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from fastmcp import Client

from massgen_mcp.cli.main import main
from massgen_mcp.core.errors import SessionStateError
from massgen_mcp.core.records import EventType, RunStatus
from massgen_mcp.records.reader import EVENTS_READ_MAX
from massgen_mcp.records.store import SessionStore
from massgen_mcp.server.app import create_server
from massgen_mcp.server.views import report_uri
from tests.helpers import text_of

RELEASE = Path(__file__).parents[1] / "fixtures" / "release-0.1.0"
SID = "01M825WQ0MVBEB1ZBBVMKK79J8"  # the release's one session
TINY = b'{"seq":1,"ts":0.0,"type":"retry"}\n'
PLANTED = 60 * 2**20 // len(TINY)  # ~60 MB of tiny events


@pytest.fixture
def huge(home: Path) -> int:
    """A real record (release 0.1.0's) whose event log starts with ~60 MB of tiny events
    planted before its own; the number of lines the log holds."""
    shutil.copytree(RELEASE, home)
    events = home / "sessions" / SID / "events.jsonl"
    own = events.read_bytes()
    events.write_bytes(TINY * PLANTED + own)
    return PLANTED + own.count(b"\n")


def test_a_read_parses_only_the_last_events_and_counts_the_rest(home: Path, huge: int) -> None:
    record = SessionStore(home).read_record(SID)
    assert len(record.events) == EVENTS_READ_MAX
    assert record.events_skipped == huge - EVENTS_READ_MAX
    assert record.events[-1].type is EventType.FINISHED  # the record's own last event
    assert record.events[0].type is EventType.RETRY  # then planted ones, up to the cap


def test_what_needs_every_event_refuses_in_one_line_naming_the_file(
        home: Path, huge: int) -> None:
    with pytest.raises(SessionStateError) as caught:
        SessionStore(home).read_events(SID)
    assert str(caught.value) == (
        f"session {SID}: events.jsonl holds more than {EVENTS_READ_MAX:,} events or 16 MiB "
        "(a run records hundreds of small ones); it is not replayed or read whole: show and "
        "the report show its last events")


def test_resume_replays_no_more_than_the_cap(home: Path, huge: int,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    status = home / "sessions" / SID / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()),
                                  "status": RunStatus.INTERRUPTED.value}))
    (home / "sessions" / SID / "result.json").unlink()
    assert main(["resume", SID, "--quiet"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "events.jsonl holds" in err[0], err


def test_show_is_bounded_and_says_what_it_skipped(home: Path, huge: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", SID]) == 0
    out = capsys.readouterr().out
    skipped = huge - EVENTS_READ_MAX
    assert (f"{skipped:,} earlier events skipped: the record holds more than are read at "
            f"once; shown are the last {EVENTS_READ_MAX:,}") in out
    assert len(out) < 2**20
    assert main(["show", SID, "--html"]) == 0
    page = (home / "sessions" / SID / "report.html").read_text()
    assert f"{skipped:,} earlier events skipped" in page


async def test_the_server_answers_other_calls_while_a_huge_report_is_read(
        home: Path, huge: int) -> None:
    """The report is read in a worker thread: calls made while it is read are answered
    then, not after it. Read on the event loop, none could be (at most one that slipped in
    before the read began)."""
    async with Client(create_server(home=home), mode="legacy") as client:
        report = asyncio.create_task(client.read_resource(report_uri(SID)))
        answered = 0
        while not report.done():
            listed = await client.call_tool("list_sessions", {})
            assert [s["session_id"] for s in listed.structured_content["sessions"]] == [SID]
            answered += not report.done()
        page = text_of((await report)[0])
    assert answered >= 2
    assert f"{huge - EVENTS_READ_MAX:,} earlier events skipped" in page


async def test_report_reads_queue_in_their_own_lane_not_the_loops_executor(
        home: Path, huge: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads of the report that take long (held here until released) run in their own lane:
    the event loop's default executor, where it resolves host names and the other faces'
    blocking work goes, still runs work at once. In that executor, eight held reads filled
    all of its cpu + 4 threads (red team, round 4)."""
    import threading

    from massgen_mcp.server.record_reads import READERS

    release = threading.Event()
    held: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    read_tail = SessionStore.read_events_tail

    def slow(self: SessionStore, *args: object, **kwargs: object) -> object:
        loop.call_soon_threadsafe(held.put_nowait, threading.current_thread().name)
        release.wait(120)  # a read that takes its time, then reads for real
        return read_tail(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SessionStore, "read_events_tail", slow)
    async with Client(create_server(home=home), mode="legacy") as client:
        reads = [asyncio.create_task(client.read_resource(report_uri(SID))) for _ in range(8)]
        try:
            # guards against a stall, not measures: each comes at once, or not at all
            lanes = [await asyncio.wait_for(held.get(), 60) for _ in range(READERS)]
            assert all(name.startswith("massgen-record-read") for name in lanes), lanes
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "ran"), 60) == "ran"
            assert not any(read.done() for read in reads)
        finally:
            release.set()
        pages = await asyncio.gather(*reads)
    assert all("earlier events skipped" in text_of(page[0]) for page in pages)
