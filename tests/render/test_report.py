"""report.html: structure, escaping, the MCP resource, the live pages, and a real browser."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastmcp import Client

from massgen_mcp.cli.main import main
from massgen_mcp.render.html import markdown
from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, error
from tests.helpers import Outcome, Scripted, by_model, hostile, run_team, team_for
from tests.npm_clients import chromium, needs_browser
from tests.servers import TOKEN

XSS = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


async def xss_run(scripted: Scripted, models: tuple[str, ...] = ("a", "b", "c")) -> Outcome:
    server = scripted(hostile(XSS))
    return await run_team(team_for(server, models), question=f"Why? {XSS}")


async def test_report_is_written_and_escapes_everything(scripted: Scripted) -> None:
    out = await xss_run(scripted)
    page = (out.folder / "report.html").read_text()
    assert "<script" not in page.lower() and "<img" not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert page.count('class="lane"') == 3
    assert f"Winner <strong>{out.result['winner']['label']}</strong>" in page
    assert "<strong>42</strong>" in page and "<li>one</li>" in page  # Markdown rendered
    assert "http://" not in page and "https://" not in page, "no network needed"


async def test_report_handles_eight_agents_and_many_events(scripted: Scripted) -> None:
    def churn(req: ChatRequest) -> Reply:
        own = list(req.answers.values())[-1] if req.answers else ""
        if req.vote_labels and "new_answer" in req.tool_names and own.count("+") < 2:
            return answer(own + " +")
        if req.model == "h" and req.call_index == 0:
            return error(503, "busy", retry_after=0)
        return agree(req)

    server = scripted(churn)
    out = await run_team(team_for(server, tuple("abcdefgh")))
    assert len(out.events()) > 30
    page = (out.folder / "report.html").read_text()
    assert page.count('class="lane"') == 8
    assert page.count("<details") == len(list((out.folder / "answers").glob("*.md")))
    assert "○" in page, "invalidated votes are shown in the matrix"


def test_markdown_subset_is_safe() -> None:
    rendered = markdown("## T\n\n`<b>` **x** [a](javascript:alert(1))\n\n```\n<i>\n```")
    assert "<code>&lt;b&gt;</code>" in rendered and "<b>" not in rendered
    assert "<i>" not in rendered and "href" not in rendered


async def test_show_html_and_resource(scripted: Scripted,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = await xss_run(scripted, ("a", "b"))
    sid = out.result["session_id"]
    (out.folder / "report.html").unlink()
    import asyncio
    assert await asyncio.to_thread(main, ["show", sid, "--html"]) == 0
    assert capsys.readouterr().out.strip() == str(out.folder / "report.html")
    async with Client(create_server()) as client:
        [resource] = await client.read_resource(f"massgen://sessions/{sid}/report")
        result = (await client.call_tool("get_result", {"session_id": sid})).structured_content
    assert resource.text.startswith("<!doctype html>")
    assert result["report"] == f"massgen://sessions/{sid}/report"


async def test_get_result_links_the_mcp_apps_view() -> None:
    async with Client(create_server()) as client:
        tool = next(t for t in await client.list_tools() if t.name == "get_result")
        listed = {str(r.uri): r for r in await client.list_resources()}
        [view] = await client.read_resource("ui://massgen/session.html")
    assert tool.meta["ui"] == {"resourceUri": "ui://massgen/session.html"}
    assert listed["ui://massgen/session.html"].mime_type == "text/html;profile=mcp-app"
    assert view.mime_type == "text/html;profile=mcp-app"
    # Self-contained: the report's styles inline, no placeholder left, nothing fetched.
    assert "--bg:#fff" in view.text and "/*CSS*/" not in view.text
    assert "__VERSION__" not in view.text and not re.search(r"(src|href)=", view.text)


async def test_live_pages_need_the_token(http_server: str, scripted: Scripted) -> None:
    server = scripted(by_model(agree))
    base = http_server.removesuffix("/mcp")
    async with Client(http_server, auth=TOKEN) as client:
        handle = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/{m}@{server.base_url}" for m in "ab"],
            "wait_s": 30})).structured_content
    sid = handle["session_id"]
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/sessions")).status_code == 401
        assert (await http.get(f"{base}/sessions/{sid}?token=wrong")).status_code == 401
        listing = await http.get(f"{base}/sessions?token={TOKEN}")
        assert listing.status_code == 200 and sid in listing.text
        page = await http.get(f"{base}/sessions/{sid}",
                              headers={"Authorization": f"Bearer {TOKEN}"})
        assert page.status_code == 200 and 'class="lane"' in page.text
        assert 'http-equiv="refresh"' not in page.text, "finished runs stop refreshing"
        missing = await http.get(f"{base}/sessions/01M811FXDYM8XNC5FE75XV7FF6?token={TOKEN}")
        assert missing.status_code == 404


@needs_browser
async def test_report_renders_in_a_real_browser(scripted: Scripted, tmp_path: Path) -> None:
    out = await xss_run(scripted)
    url = (out.folder / "report.html").as_uri()
    dom = chromium("--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert len(re.findall(r'class="lane"', dom.stdout)) == 3
    assert "Winner" in dom.stdout and "pwned" in dom.stdout  # shown as text, not run
    assert "<script" not in dom.stdout.lower()
    shot = tmp_path / "report.png"  # kept as this test run's artifact
    picture = chromium(f"--screenshot={shot}", "--window-size=1200,1600", url, tmp=tmp_path)
    assert picture.returncode == 0 and shot.stat().st_size > 10_000


async def test_live_page_updates_while_the_run_is_in_flight(http_server: str,
                                                            scripted: Scripted) -> None:
    import asyncio
    import threading

    answered = threading.Semaphore(0)
    release = threading.Event()

    def staged(req: ChatRequest) -> Reply:
        if req.vote_labels:
            answered.release()
            release.wait(30)  # hold the votes until the test has looked at the page
        return agree(req)

    server = scripted(staged)
    base = http_server.removesuffix("/mcp")
    async with Client(http_server, auth=TOKEN) as client:
        sid = (await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/{m}@{server.base_url}" for m in "ab"]})
               ).structured_content["session_id"]
        for _ in range(2):
            assert await asyncio.to_thread(answered.acquire, True, 30)
        async with httpx.AsyncClient() as http:
            url = f"{base}/sessions/{sid}?token={TOKEN}"
            during = (await http.get(url)).text
            assert 'http-equiv="refresh"' in during and 'id="status">running' in during
            assert during.count("<details") == 2 and 'class="ev vote"' not in during
            release.set()
            for _ in range(50):
                status = (await client.call_tool("get_status", {
                    "session_id": sid, "wait_s": 10})).structured_content
                if status["done"]:
                    break
            after = (await http.get(url)).text
    assert 'id="status">completed' in after and 'class="ev vote"' in after
    assert 'http-equiv="refresh"' not in after


def test_the_coordination_table_shows_its_last_steps_and_says_how_many_it_left_out() -> None:
    """A planted log's thousands of answers would make each of ``show``'s table rows tens of
    thousands of characters wide (issue 57, N6)."""
    from massgen_mcp.core.records import Event, EventType
    from massgen_mcp.render.text import TABLE_STEPS, coordination_table

    events = [Event(seq=n, ts=0.0, type=EventType.ANSWER, agent_id="agent_a", label=f"A{n}")
              for n in range(1, 5_001)]
    table = coordination_table(events, ["agent_a", "agent_b"])
    lines = table.splitlines()
    assert lines[0] == f"(the first {5_000 - TABLE_STEPS:,} steps are not shown)"
    assert lines[1].split()[-1] == "5000" and len(lines[1].split()) == TABLE_STEPS + 2
    assert lines[3].split()[-1] == "A5000"
    assert len(table) < 10 * TABLE_STEPS * 8
