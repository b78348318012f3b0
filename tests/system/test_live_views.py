"""Watching a run as it happens: the live page's event stream (in Chromium, and its limits),
steering notes in the report and the CLI, and the CLI's live lines on a real terminal.

Every run here streams from the scripted server a few characters at a time
(``chunk_delay_s``), its answers numbered words ("w000 w001 ..."): a view that shows some of
the words but not the last has shown a draft, whatever the timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client

from massgen_mcp.cli.live import agent_line, fit
from massgen_mcp.cli.main import main
from massgen_mcp.core.records import AgentPhase, CallPurpose
from massgen_mcp.core.run_state import AgentStatus, Draft
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.render.html import LIVE_CSP, render_report
from massgen_mcp.server import pages, shutdown
from massgen_mcp.server.app import create_server
from massgen_mcp.service import ConsensusService
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, answer
from tests.helpers import unused_port
from tests.npm_clients import CHROMIUM, CLIENTS, PLAYWRIGHT, needs_browser
from tests.servers import TOKEN, server_env

WORDS = 60  # each answer: "w000 ... w059"
LAST = f"w{WORDS - 1:03d}"
HOSTILE = '</textarea><script>window.pwned=true</script><img src=x onerror="window.pwned=1">'


def numbered(req: ChatRequest) -> Reply:
    """Answers of numbered words (agent b's ends in markup), then the usual votes."""
    if req.vote_labels or req.is_final:
        return agree(req)
    words = " ".join(f"w{i:03d}" for i in range(WORDS))
    return answer(words + (f" {HOSTILE}" if req.model == "b" else ""))


@pytest.fixture
def slow() -> Iterator[ScriptedServer]:
    """A scripted server that streams every reply 4 characters every 30 ms (~3 s each)."""
    with ScriptedServer(numbered, chunk_delay_s=0.03) as server:
        yield server


def shown_words(text: str) -> list[int]:
    return [int(w) for w in re.findall(r"\bw(\d{3})\b", text)]


# -- the live page in Chromium -------------------------------------------------------------

needs_playwright = pytest.mark.skipif(
    not PLAYWRIGHT.exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
    reason="run 'npm ci' in tests/clients to drive the live page")


@needs_browser
@needs_playwright
@pytest.mark.slow
async def test_the_live_page_shows_drafts_before_the_answers(
        http_server: str, tmp_path: Path) -> None:
    """The answers start streaming once the page is loaded (a browser can take longer to
    start than the ~3 s the answers stream; under load the page then met them written)."""
    watching = threading.Event()

    def after_the_page_loads(req: ChatRequest) -> Reply:
        if not (req.vote_labels or req.is_final):
            watching.wait(120)
        return numbered(req)

    with ScriptedServer(after_the_page_loads, chunk_delay_s=0.03) as slow, contextlib.ExitStack(
            ) as cleanup:
        cleanup.callback(watching.set)  # no server thread waits past the test
        await _watch_a_run(http_server, slow, tmp_path, watching)


async def _watch_a_run(mcp_url: str, slow: ScriptedServer, tmp_path: Path,
                       watching: threading.Event) -> None:
    base = mcp_url.removesuffix("/mcp")
    async with Client(mcp_url, auth=TOKEN) as client:
        sid = (await client.call_tool("run_consensus", {
            "question": "Count to sixty", "models": [f"openai/{m}@{slow.base_url}"
                                                     for m in "abc"]})).structured_content[
            "session_id"]
        url = f"{base}/sessions/{sid}?token={TOKEN}"
        async with httpx.AsyncClient() as http:
            page = await http.get(url)
        shot = tmp_path / "live-page.png"  # kept as this test run's artifact
        browser = await asyncio.create_subprocess_exec(
            "node", str(CLIENTS / "live_page.mjs"), url, str(shot), cwd=CLIENTS,
            env=server_env(tmp_path, CHROMIUM=CHROMIUM or "chromium"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert browser.stdout is not None
            ready = await asyncio.wait_for(browser.stdout.readline(), 90)
            watching.set()
            mid_line = await asyncio.wait_for(browser.stdout.readline(), 90)
            end_line = await asyncio.wait_for(browser.stdout.readline(), 120)
            await asyncio.wait_for(browser.wait(), 30)
        finally:
            if browser.returncode is None:
                browser.kill()
                await browser.wait()
        err = (await browser.stderr.read()).decode() if browser.stderr else ""
        final = (await client.call_tool("get_result", {"session_id": sid})).structured_content

    assert ready == b"ready\n", (ready, err[-3000:])
    assert page.headers["content-security-policy"] == LIVE_CSP
    assert "<script>" in page.text and 'class="agent-box"' in page.text
    assert mid_line.startswith(b"mid "), (mid_line, err[-3000:])
    mid = json.loads(mid_line.removeprefix(b"mid "))
    writing = [box for box in mid["boxes"] if box["writing"] and shown_words(box["text"])]
    assert len(writing) >= 2 and mid["status"] == "running" and mid["live"]
    # Part of an answer, not yet all of it: a draft, shown as it streams. (A box may show all
    # sixty words while its stream sends the reply's last characters, the JSON's end.)
    assert any(max(shown_words(box["text"])) < WORDS - 1 for box in writing), writing
    assert all("tokens" in box["stats"] and box["phase"] == "working" for box in writing)
    assert mid["answers"] < 3  # the report below the boxes has not got every answer yet
    assert mid["liveMarkup"] == 0 and mid["pwned"] is False

    assert end_line.startswith(b"end "), (end_line, err[-3000:])
    end = json.loads(end_line.removeprefix(b"end "))
    assert end["live"] is False and end["scripts"] == 0 and end["status"] == "completed"
    assert end["loads"] == 2, "one reload, at the end"
    assert end["answers"] == 3 and end["winner"].startswith("Winner ")
    assert end["pwned"] is False and end["problems"] == [] and end["elsewhere"] == []
    assert final["status"] == "completed"
    assert shot.stat().st_size > 10_000


# -- the event stream's door and its limits -------------------------------------------------

async def test_the_live_stream_needs_the_token_and_the_right_host(
        http_server: str, slow: ScriptedServer) -> None:
    base = http_server.removesuffix("/mcp")
    async with Client(http_server, auth=TOKEN) as client:
        sid = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/{m}@{slow.base_url}" for m in "ab"]})
               ).structured_content["session_id"]
        live = f"{base}/sessions/{sid}/live"
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(live)).status_code == 401
            assert (await http.get(f"{live}?token=wrong")).status_code == 401
            rebound = await http.get(f"{live}?token={TOKEN}", headers={"Host": "evil.example"})
            assert rebound.status_code == 421  # DNS rebinding: the app's Host guard
            foreign = await http.get(f"{live}?token={TOKEN}",
                                     headers={"Origin": "http://evil.example"})
            assert foreign.status_code == 403
            missing = await http.get(f"{base}/sessions/01M811FXDYM8XNC5FE75XV7FF6/live"
                                     f"?token={TOKEN}")
            assert missing.status_code == 404
            async with http.stream("GET", live, headers={
                    "Authorization": f"Bearer {TOKEN}"}) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                first = await anext(events(stream))
            assert first["event"] == "status" and first["data"]["status"] == "running"
            assert {a["id"] for a in first["data"]["agents"]} == {"agent_a", "agent_b"}
        await client.call_tool("cancel_session", {"session_id": sid})


async def test_a_run_in_another_process_is_polled_not_ended(
        http_server: str, slow: ScriptedServer, home: Path) -> None:
    """The server cannot watch a run the CLI holds: its stream sends the status it can read
    and closes without ``end``, so the page reconnects (``retry``) instead of reloading."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "run", "q", "--models", "openai/a,openai/b",
         "--base-url", slow.base_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=server_env(home))
    try:
        assert proc.stderr is not None
        first = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 60)
        sid = first.split()[1]  # "session <id> · record in <folder>"
        base = http_server.removesuffix("/mcp")
        async with httpx.AsyncClient(timeout=30) as http, http.stream(
                "GET", f"{base}/sessions/{sid}/live?token={TOKEN}") as stream:
            body = [line async for line in stream.aiter_lines()]
    finally:
        proc.kill()
        proc.wait(10)
    assert body[0] == f"retry: {pages.RECONNECT_MS}"
    statuses = [json.loads(line.removeprefix("data: ")) for line in body
                if line.startswith("data: ")]
    assert [s["status"] for s in statuses] == ["running"]
    assert "event: end" not in body


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The server-sent events of ``response``: ``{"event": name, "data": parsed JSON}``."""
    name = "message"
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield {"event": name, "data": json.loads(line.removeprefix("data: "))}
            name = "message"


def watchers() -> list[asyncio.Task[Any]]:
    """The live streams' pending watch steps in this loop (pages._next)."""
    return [t for t in asyncio.all_tasks()
            if getattr(t.get_coro(), "__qualname__", "") == "_next"]


async def until(condition: Any, deadline_s: float = 10) -> None:
    """Wait for ``condition()`` to hold, checking every 20 ms, failing after the deadline."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_live_streams_are_capped_and_end_with_their_client_and_the_server(
        home: Path, slow: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    monkeypatch.setattr(pages, "MAX_LIVE_STREAMS", 1)
    service = ConsensusService.local(home)
    app = create_server(home=home, service=service).http_app()
    port = unused_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           timeout_graceful_shutdown=30))
    serving = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started)
        started = await service.start(RunSpec(
            question="q", models=["openai/a", "openai/b"], base_url=slow.base_url))
        live = f"http://127.0.0.1:{port}/sessions/{started.session_id}/live"
        async with httpx.AsyncClient(timeout=10) as http:
            async with http.stream("GET", live) as first:
                assert (await anext(events(first)))["event"] == "status"
                assert len(watchers()) == 1
                busy = await http.get(live)  # the one stream allowed is open
                assert busy.status_code == 503 and busy.headers["retry-after"] == "10"
            await until(lambda: not watchers())  # its client went: its watcher ended
            async with http.stream("GET", live) as second:  # and its place is free again
                assert second.status_code == 200
                received = events(second)
                assert (await anext(received))["event"] == "status"
                shutdown.stopping.set()  # what the server's signal handler sets first
                server.should_exit = True
                rest = [event["event"] async for event in received]
        assert "end" not in rest, "a stopping server ends the stream, not the run"
        await asyncio.wait_for(serving, pages.STOP_POLL_S + 5)  # not the 30 s grace period
        assert not watchers()
    finally:
        shutdown.stopping.clear()
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        await service.aclose()


# -- steering in the report and in `show` ----------------------------------------------------

async def test_a_note_shows_in_the_report_and_in_show(home: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    note = f"Count in French, please {HOSTILE}"
    asked = threading.Semaphore(0)
    release = threading.Event()

    def held(req: ChatRequest) -> Reply:
        if req.call_index == 0:
            asked.release()
            release.wait(30)  # the first answers wait until the note is in
        return numbered(req)

    with ScriptedServer(held) as scripted:
        service = ConsensusService.local(home)
        try:
            started = await service.start(RunSpec(
                question="Count", models=["openai/a", "openai/b"], base_url=scripted.base_url))
            for _ in range(2):
                assert await asyncio.to_thread(asked.acquire, True, 30)
            await service.steer(started.session_id, note)
            status = await service.status(started.session_id)
            release.set()
            await service.wait(started.session_id, 60, until_done=True)
            page = render_report(service.record(started.session_id))
        finally:
            release.set()
            await service.aclose()
    assert status.notes and status.notes[0].startswith("Count in French")
    assert "<script>window.pwned" not in page and "<img" not in page
    escaped = "Count in French, please &lt;/textarea&gt;&lt;script&gt;window.pwned=true"
    assert "<li title=\"at " in page and escaped in page.split('id="notes"')[1]
    assert page.count('class="ev steered"') == 2, "the note is in every agent's lane"
    assert await asyncio.to_thread(main, ["show", started.session_id]) == 0
    shown = capsys.readouterr().out
    assert "your note to the team: Count in French, please </textarea>" in shown
    assert re.search(r"agent_a \|.*NOTE", shown) and re.search(r"agent_b \|.*NOTE", shown)


# -- the CLI's live lines --------------------------------------------------------------------

def run_in_terminal(home: Path, server: ScriptedServer, columns: int = 100) -> str:
    """``massgen-mcp run`` on a real pseudo-terminal (stdout and stderr both): everything the
    terminal got, escape sequences included."""
    leader, follower = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "run", "Count to sixty", "--models",
         "openai/a,openai/b,openai/c", "--base-url", server.base_url],
        stdin=follower, stdout=follower, stderr=follower, close_fds=True,
        env=server_env(home, TERM="xterm", COLUMNS=str(columns)))
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the run ended and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(30) == 0, seen.decode(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return seen.decode(errors="replace")


@pytest.mark.slow
def test_the_cli_shows_a_live_line_per_agent_on_a_terminal(home: Path,
                                                           slow: ScriptedServer) -> None:
    screen = run_in_terminal(home, slow)
    answered = screen.index(" answered ")
    before = screen[:answered]
    live = re.findall(r'(agent_[abc])  writing its answer… (\d+) tokens  "…([^"\r\n]*)"', before)
    assert {who for who, _, _ in live} >= {"agent_a", "agent_b", "agent_c"}, before[-2000:]
    assert any(shown_words(tail) and LAST not in tail for _, _, tail in live)
    assert "\x1b[3A\x1b[J" in screen, "the three lines are redrawn in place"
    rows = [row for row in re.split(r"\r?\n|\x1b\[3A\x1b\[J", screen) if "writing" in row]
    assert all(len(row) <= 99 for row in rows), "each live line fits the terminal"
    tail = screen[screen.rindex("\x1b[J"):]  # after the last redraw: the lines are gone
    assert "writing" not in tail and "massgen-mcp: completed; winner" in tail


def test_the_cli_prints_plain_lines_when_not_on_a_terminal(home: Path,
                                                           slow: ScriptedServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "run", "Count to sixty", "--models",
         "openai/a,openai/b", "--base-url", slow.base_url], capture_output=True, text=True,
        timeout=120, env=server_env(home, TERM="xterm"))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr and "writing" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("session ") and "started with agent_a=openai/a" in lines[1]
    assert sum(" answered " in line for line in lines) == 2
    assert lines[-1].startswith("massgen-mcp: completed; winner ")
    assert done.stdout.startswith("Final: w000 w001")


def test_a_live_line_fits_its_row_and_obeys_nothing_in_the_draft() -> None:
    """A draft's control characters are shown, not obeyed; wide characters count double."""
    draft = Draft(purpose=CallPurpose.ANSWER, text="line one\nline two \x1b]0;evil\x07 " +
                  "漢字" * 40 + " the end", chars=500, tokens=99, elapsed_s=1.0)
    agent = AgentStatus(model="openai/b", label_letter="B", phase=AgentPhase.WORKING,
                        answers=0, draft=draft)
    line = fit(agent_line("agent_b", agent), 59)
    assert line.startswith('agent_b  writing its answer… 99 tokens  "…') and line.endswith(' end"')
    assert "\x1b" not in line and "\n" not in line
    columns = sum(2 if unicodedata.east_asian_width(c) == "W" else 1 for c in line)
    assert 57 <= columns <= 59
    hostile = fit(agent_line("agent_b", agent.model_copy(update={"draft": draft.model_copy(
        update={"text": "x \x1b]0;evil\x07"})})), 80)
    assert hostile.endswith('"…x \\x1b]0;evil\\x07"')
    idle = agent.model_copy(update={"draft": None, "activity": "read_file a.py"})
    assert agent_line("agent_b", idle) == "agent_b  working · read_file a.py"


def test_a_live_line_of_a_tool_call_stays_on_its_row() -> None:
    """The activity quotes a path the model chose: a newline or tab in it would draw a second
    row the redraw never clears (a forged progress line left on the screen)."""
    agent = AgentStatus(model="openai/b", label_letter="B", phase=AgentPhase.WORKING,
                        answers=0, activity="read_file a\n✓ consensus: A2 won\tb")
    line = fit(agent_line("agent_b", agent), 80)
    assert line == "agent_b  working · read_file a ✓ consensus: A2 won b"
