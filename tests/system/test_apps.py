"""The MCP Apps view of get_result, in a real host setup: the official TypeScript SDK client
and the official ext-apps AppBridge (``tests/clients/apps_host.mjs``) against a real server
process, with the view running in headless Chromium in a sandboxed iframe under a strict CSP.

Needs the npm clients and Debian's chromium (both installed by ``.ci/run``, which sets
MASSGEN_REQUIRE_CLIENTS and MASSGEN_REQUIRE_BROWSER so that their absence fails).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, answer
from tests.helpers import hostile
from tests.npm_clients import CHROMIUM, CLIENTS, PLAYWRIGHT, stdio_command
from tests.servers import server_env

pytestmark = [
    pytest.mark.skipif(not PLAYWRIGHT.exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
                       reason="run 'npm ci' in tests/clients to test the MCP Apps view"),
    pytest.mark.skipif(CHROMIUM is None and not os.environ.get("MASSGEN_REQUIRE_BROWSER"),
                       reason="install Debian's chromium to test the MCP Apps view"),
]

XSS = '<script>window.pwned=true</script><img src=x onerror="window.pwned=true">'
WORDS = 60  # each first answer: "w000 ... w059"


@pytest.mark.slow
def test_get_result_view_follows_a_live_run_and_renders_safely(home: Path,
                                                               tmp_path: Path) -> None:
    release = threading.Event()
    answer_with_xss = hostile(XSS)

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels:
            release.wait(60)  # hold the votes until the view has shown the run in flight
        elif not req.is_final:  # numbered words, streamed slowly: a draft shows part of them
            words = " ".join(f"w{i:03d}" for i in range(WORDS))
            return answer(words + (f" {XSS}" if req.model == "b" else ""))
        return answer_with_xss(req)

    with ScriptedServer(policy, chunk_delay_s=0.05) as server:
        run_the_host(server, home, tmp_path, release)


def run_the_host(server: ScriptedServer, home: Path, tmp_path: Path,
                 release: threading.Event) -> None:
    models = [f"openai/{m}@{server.base_url}" for m in "abc"]
    shot = tmp_path / "apps-view.png"  # kept as this test run's artifact
    proc = subprocess.Popen(
        ["node", str(CLIENTS / "apps_host.mjs"), stdio_command(), json.dumps(models),
         f"Why? {XSS}", str(shot)],
        cwd=CLIENTS, env=server_env(home, CHROMIUM=CHROMIUM or "chromium"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline().strip()
        release.set()
        rest, err = proc.communicate(timeout=120)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert first == "running", (first, err[-3000:])
    assert proc.returncode == 0, err[-3000:]
    out = json.loads(rest.strip().removeprefix("result "))

    assert out["viewUri"] == "ui://massgen/session.html"
    assert out["mimeType"] == "text/html;profile=mcp-app"
    assert out["earlyIsError"] is True  # get_result before the end: the view must follow

    during, after, summary = out["during"], out["after"], out["summary"]
    drafting = out["drafting"]  # the view showed part of an answer while it was written
    assert drafting["boxes"] and drafting["answers"] < 3
    shown = [[int(w) for w in re.findall(r"\bw(\d{3})\b", box["text"])]
             for box in drafting["boxes"]]
    # Part of an answer (a box may show every word while the reply's JSON still ends).
    assert any(words and max(words) < WORDS - 1 for words in shown), drafting["boxes"]
    assert all("tokens" in box["stats"] for box in drafting["boxes"])
    assert drafting["liveMarkup"] == 0 and drafting["pwned"] is False
    assert during["status"] == "running" and during["lanes"] == 3
    assert during["answers"] == 3 and during["votes"] == 0 and "Winner" not in during["text"]
    assert after["status"] == "completed" and after["lanes"] == 3 and after["votes"] == 3
    assert after["winner"].startswith("Winner ")
    assert "<script>window.pwned=true</script>" in after["text"]  # shown as text
    assert "tools/call get_status" in out["liveRequests"]
    assert "tools/call get_result" in out["liveRequests"]
    assert "resources/read" in out["liveRequests"]

    # A host that proxies tools but not resources: a progress table, then the summary.
    progress, done = out["progress"], out["progressDone"]
    assert progress["state"] == "running" and progress["status"] == "running"
    assert sorted(row[0] for row in progress["rows"]) == ["agent_a", "agent_b", "agent_c"]
    assert all(row[3] == "1" and row[4] == "" for row in progress["rows"])  # answered, no votes
    assert done["state"] == "done" and done["winner"].startswith("Winner ") and done["lanes"] == 0
    assert "resources/read" not in out["toolsOnlyRequests"]
    assert "tools/call get_status" in out["toolsOnlyRequests"]

    # A host that gives the view no server access: the summary comes from the result alone.
    assert summary["state"] == "done" and summary["lanes"] == 0
    assert summary["winner"].startswith("Winner ") and summary["status"] == "completed"
    assert "**42** <script>window.pwned=true</script>" in summary["finalAnswer"]
    assert not any(m.startswith(("tools/", "resources/")) for m in out["summaryRequests"])

    for view in (during, after, progress, done, summary):
        assert view["scripts"] == 0 and view["handlers"] == 0 and view["pwned"] is False
        assert view["theme"] == "dark"  # the host's theme wins over the OS preference
        assert view["background"] == "rgb(15, 17, 23)"
    assert out["problems"] == [] and out["blocked"] == []
    assert shot.stat().st_size > 10_000
