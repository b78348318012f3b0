"""The CLI a person expects (issue 31 §3, §6): ids by prefix and ``latest``, a readable
``sessions``, ties and dropped agents said in every view, each face's own words for a missing
session, help with defaults and exit codes, a prompt Ctrl-C that still names the session, a
report that names each answer's author and clips no mark, a live page that says it is running,
start-up lines that name the live pages, and one line for a missing pool extra.

Every command runs as the real binary (``python -m massgen_mcp``) against the scripted server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from massgen_mcp.cli.output import (
    EXIT_CANCELLED,
    EXIT_DROPPED,
    EXIT_INPUT,
    EXIT_LISTEN,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
)
from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, error, vote
from tests.coding_clis import alive, marked_processes, needs_clis
from tests.helpers import Scripted, by_model, run_team, team_for, text_of, unused_port
from tests.npm_clients import chromium, needs_browser
from tests.servers import TOKEN, cli, server_env

MODELS = "openai/a,openai/b,openai/c"


def team_args(server: ScriptedServer) -> list[str]:
    return ["--models", MODELS, "--base-url", server.base_url]


def own_answer(req: ChatRequest) -> Reply:
    """Every agent votes for its own answer: a three-way tie, 1 vote each."""
    if req.vote_labels:
        return vote(req.label_of(f"from {req.model} "), "mine is best")
    return agree(req)


# -- ids: latest, prefixes, the listing ---------------------------------------------------------

async def test_show_latest_unique_prefixes_and_a_sessions_header(scripted: Scripted,
                                                                 home: Path) -> None:
    server = scripted(agree)
    first = await run_team(team_for(server), question="What is 6*7?")
    second = await run_team(team_for(server), question="What is the largest planet?\nSay why.")
    older, newer = first.result["session_id"], second.result["session_id"]

    latest = cli(home, "show", "latest")
    assert latest.returncode == EXIT_OK, latest.stderr
    assert latest.stdout.startswith(f"session  {newer}  (started today ")
    assert "question What is the largest planet?" in latest.stdout

    shared = next(older[:i] for i in range(len(older), -1, -1) if newer.startswith(older[:i]))
    assert shared, "ULIDs made seconds apart share their time prefix"
    unique = older[:len(shared) + 1].lower()  # case does not matter
    shown = cli(home, "show", unique)
    assert shown.returncode == EXIT_OK, shown.stderr
    assert shown.stdout.startswith(f"session  {older}  ")

    ambiguous = cli(home, "show", shared)
    assert ambiguous.returncode == EXIT_INPUT
    assert ambiguous.stderr.strip() == (
        f"massgen-mcp: {shared} is the start of 2 session ids ({newer}, {older}); give more "
        "characters")

    listed = cli(home, "sessions")
    listing = listed.stdout.splitlines()  # the list only: a hint would break `| tail -n +2`
    assert re.fullmatch(r"SESSION +STARTED +STATUS +WINNER +QUESTION", listing[0])
    assert re.fullmatch(rf"{newer}  today \d\d:\d\d +completed +[A-H]1 +What is the largest "
                        r"planet\? Say why\.", listing[1]), listing[1]
    assert listing[2].startswith(f"{older}  today ") and len(listing) == 3
    assert "show ID" in listed.stderr and "'latest'" in listed.stderr


async def test_a_missing_session_names_each_faces_own_command(home: Path) -> None:
    missing = "01M811FXDYM8XNC5FE75XV7FF6"
    shown = cli(home, "show", missing)
    assert shown.returncode == EXIT_INPUT
    assert shown.stderr.strip() == (
        f"massgen-mcp: no session id starts with {missing} in {home.resolve()}/sessions; "
        "'massgen-mcp sessions' lists them")
    bad = cli(home, "show", "../../etc").stderr
    assert "is not a session id" in bad and "'massgen-mcp sessions' lists them" in bad
    for said in (shown.stderr, bad):
        assert "list_sessions" not in said and "get_" not in said  # no MCP tool names

    async with Client(create_server()) as client:  # the MCP face names its own tool
        failed = await client.call_tool("get_result", {"session_id": missing},
                                        raise_on_error=False)
    assert failed.is_error
    said = text_of(failed.content[0])
    assert said.endswith("; list_sessions shows the ids") and "massgen-mcp" not in said


# -- how a run ended: ties, dropped agents ------------------------------------------------------

def test_a_three_way_tie_is_named_in_progress_json_show_and_the_report(scripted: Scripted,
                                                                        home: Path) -> None:
    server = scripted(own_answer)
    done = cli(home, "run", "What is 6*7?", *team_args(server), "--json")
    assert done.returncode == EXIT_OK, done.stderr
    data = json.loads(done.stdout)
    assert data["tie_broken"] is True and data["tally"] == dict.fromkeys(data["tied"], 1)
    assert len(data["tied"]) == 3 and data["dropped"] == {}
    winner, tied = data["winner"], ", ".join(data["tied"])
    assert winner["agent_id"] == "agent_a", "the agent listed first wins a tie"
    tie_line = (f"{winner['label']} by agent_a (openai/a) by tie-break among {tied} (1 vote "
                "each; the agent listed first in the team wins a tie)")
    assert f"consensus: every agent voted; a tie among {tied} (1 vote each)" in done.stderr
    assert done.stderr.rstrip().endswith(f"massgen-mcp: completed; winner {tie_line}")

    sid = data["session_id"]
    shown = cli(home, "show", sid[:20])
    assert f"outcome  completed; winner {tie_line}\n" in shown.stdout
    assert json.loads(cli(home, "show", sid, "--json").stdout)["tied"] == data["tied"]
    page = (Path(data["session_dir"]) / "report.html").read_text()
    assert f"by tie-break among {tied} (1 vote each" in page


def test_dropped_agents_change_the_status_line_json_and_exit_code(scripted: Scripted,
                                                                   home: Path) -> None:
    server = scripted(by_model(c=lambda req: error(400, "model c does not exist")))
    done = cli(home, "run", "What is 6*7?", *team_args(server), "--json", "--quiet")
    assert done.returncode == EXIT_DROPPED == 7, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "completed" and list(data["dropped"]) == ["agent_c"]
    assert "model c does not exist" in data["dropped"]["agent_c"]
    [line] = done.stderr.splitlines()  # --quiet: only the problem
    assert line.startswith("massgen-mcp: completed with 1 of 3 agents dropped: agent_c "
                           "(openai/c): ")
    assert "model c does not exist" in line and f"record: {data['session_dir']}" in line
    shown = cli(home, "show", "latest").stdout
    assert "outcome  completed with 1 of 3 agents dropped: agent_c (openai/c)" in shown
    page = (Path(data["session_dir"]) / "report.html").read_text()
    assert '<span class="problems">1 of 3 agents dropped: agent_c (openai/c)' in page


# -- Ctrl-C -------------------------------------------------------------------------------------

def start_run(home: Path, *argv: str) -> subprocess.Popen[str]:
    """``massgen-mcp run q ARGV --json`` in the background, as a person starts it."""
    return subprocess.Popen([sys.executable, "-m", "massgen_mcp", "run", "q", *argv, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env(home))


def press_ctrl_c(proc: subprocess.Popen[str]) -> tuple[str, str, float]:
    """Ctrl-C once: what the run printed, and how long it took to end."""
    pressed = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    return out, err, time.monotonic() - pressed


def test_ctrl_c_stops_within_a_second_and_json_names_the_session(scripted: Scripted,
                                                                  home: Path) -> None:
    arrived = threading.Semaphore(0)

    def hang(req: ChatRequest) -> Reply:
        arrived.release()
        return Reply("text", delay_s=30)

    proc = start_run(home, *team_args(scripted(hang)))
    try:
        for _ in range(3):  # every agent's call is in flight
            assert arrived.acquire(timeout=60)
        out, err, took = press_ctrl_c(proc)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_CANCELLED, err
    assert took < 1.0, f"Ctrl-C took {took:.2f} s"
    data = json.loads(out)
    [folder] = (home / "sessions").iterdir()
    assert data["session_id"] == folder.name and data["status"] == "cancelled"
    assert json.loads((folder / "status.json").read_text())["status"] == "cancelled"
    assert "massgen-mcp: cancelled; " in err


@needs_clis
def test_ctrl_c_stops_the_coding_cli_agents_too(scripted: Scripted, home: Path,
                                                user: dict[str, Any]) -> None:
    waiting: set[str] = set()
    both = threading.Event()

    def hang(req: ChatRequest) -> Reply:
        waiting.add(req.model)
        if len(waiting) == 2:
            both.set()
        return Reply("text", content="never", delay_s=30)

    server = scripted(hang)
    team = user["project"] / "clis.yaml"
    team.write_text("agents:\n" + "".join(
        f"  - id: {name}\n    backend: {{type: {backend}, model: scripted-{name}, "
        f"base_url: '{server.base_url}'}}\n"
        for name, backend in (("claude", "claude_code"), ("codex", "codex"))))
    proc = start_run(home, "--config", str(team))
    try:
        if not both.wait(60):
            proc.kill()
            pytest.fail(f"the CLIs did not both call the model: {proc.communicate()[1]}")
        assert len(alive(user["mark"])) >= 2
        out, err, took = press_ctrl_c(proc)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_CANCELLED, err
    assert took < 1.0, f"Ctrl-C took {took:.2f} s"
    assert json.loads(out)["status"] == "cancelled"
    assert marked_processes(user["mark"]) == []  # no CLI left, alive or zombie


# -- help, exit codes, start-up lines, the pool extra -------------------------------------------

def test_help_shows_the_exit_codes_and_serves_defaults(home: Path) -> None:
    top = cli(home, "--help").stdout
    codes = {int(n): text for n, text in re.findall(r"^  (\d)  (.+)$", top, re.MULTILINE)}
    assert sorted(codes) == list(range(10))
    assert "timed out" in codes[EXIT_TIMEOUT] and "command line" in codes[EXIT_USAGE]
    assert "review --fail-on" in codes[8] and "inconclusive" in codes[9]
    assert "agents were dropped" in codes[EXIT_DROPPED] and "listen" in codes[EXIT_LISTEN]
    assert "massgen-mcp show latest" in top and "massgen-mcp doctor" in top
    serve = " ".join(cli(home, "serve", "--help").stdout.split())
    assert "(default 127.0.0.1, this machine only" in serve
    assert "(default 8765)" in serve and "(default /mcp)" in serve and "/sessions" in serve
    assert "ID a session id, its first characters" in " ".join(
        cli(home, "show", "--help").stdout.split())
    usage = cli(home, "run", "q", "--no-such-flag")
    assert usage.returncode == EXIT_USAGE != EXIT_TIMEOUT
    assert "unrecognized arguments: --no-such-flag" in usage.stderr


def test_the_start_up_lines_name_the_live_pages(home: Path) -> None:
    stdio = subprocess.run([sys.executable, "-m", "massgen_mcp"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60, env=server_env(home))
    assert stdio.returncode == 0 and stdio.stdout == "", "stdout is the protocol"
    assert (f"serving MCP on stdio; records and each run's report.html in "
            f"{home.resolve()}/sessions; live session pages: massgen-mcp serve --http, then "
            "http://127.0.0.1:8765/sessions") in stdio.stderr

    port = unused_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env=server_env(home, MASSGEN_MCP_TOKEN=TOKEN))
    assert proc.stderr is not None
    try:
        seen = ""
        for line in proc.stderr:  # ends if the server exits
            seen += line
            if "live session pages" in line:
                break
    finally:
        proc.terminate()
        proc.wait(10)
    assert (f"serving MCP at /mcp and /v1 on http://127.0.0.1:{port} (token required; runs "
            f"in this process); live session pages: http://127.0.0.1:{port}/sessions"
            "?token=<MASSGEN_MCP_TOKEN>") in seen


NO_POOL_EXTRA = '''
import sys
from importlib.abc import MetaPathFinder


class NotInstalled(MetaPathFinder):
    """As if 'pip install massgen-mcp' had been run without [pool]."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("docket", "redis", "fastmcp_tasks"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
'''


@pytest.mark.parametrize("argv", [["serve", "--http"], ["worker"]])
def test_redis_without_the_pool_extra_is_one_line(argv: list[str], home: Path,
                                                  tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_POOL_EXTRA)
    done = cli(home, *argv, "--redis", f"redis://127.0.0.1:{unused_port()}/0",
               PYTHONPATH=str(shim))
    assert done.returncode == EXIT_INPUT
    assert done.stderr.splitlines() == [
        "massgen-mcp: --redis (or MASSGEN_REDIS_URL): a worker pool needs docket, redis, "
        "fastmcp_tasks, which this install lacks; install them with: pip install "
        "'massgen-mcp[pool]'"]


# -- the report and the live page in a real browser ---------------------------------------------

# Appended to a copy of a report: lays the page out and writes each lane's box and the box of
# its last mark into the DOM, which --dump-dom prints.
PROBE = """<script>
const boxes = [...document.querySelectorAll(".lane")].map((lane) => {
  const marks = lane.querySelectorAll(".ev"), last = marks[marks.length - 1];
  const box = (el) => { const r = el.getBoundingClientRect();
                        return [r.left, r.top, r.right, r.bottom]; };
  return { lane: box(lane), who: box(lane.querySelector(".who")), last: box(last) };
});
const out = document.createElement("pre");
out.id = "probe";
out.textContent = JSON.stringify(boxes);
document.body.append(out);
</script>"""


@needs_browser
@pytest.mark.parametrize("width", [1200, 480])
async def test_the_report_names_authors_and_clips_no_timeline_mark(
        scripted: Scripted, tmp_path: Path, width: int) -> None:
    out = await run_team(team_for(scripted(agree)))
    report = (out.folder / "report.html").read_text()
    for answer in out.result["answers"]:
        model = answer["model"]
        assert (f"<summary>{answer['label']} by {answer['agent_id']} ({model})"
                in report)
    probed = tmp_path / "probed.html"
    probed.write_text(report.replace("</body>", PROBE + "</body>"))
    dom = chromium("--dump-dom", f"--window-size={width},1600", probed.as_uri(), tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout)
    assert found is not None, dom.stdout[-2000:]
    lanes = json.loads(found.group(1).replace("&quot;", '"'))
    assert len(lanes) == 3
    for lane in lanes:
        left, top, right, bottom = lane["last"]
        assert lane["who"][2] <= left, "no mark over the agent's name"
        assert right <= lane["lane"][2] and right <= width, lane  # the last mark is whole
        assert lane["lane"][1] <= top and bottom <= lane["lane"][3], lane


@needs_browser
async def test_the_live_page_says_running_while_the_run_goes_on(
        http_server: str, scripted: Scripted, tmp_path: Path) -> None:
    import asyncio

    answered = threading.Semaphore(0)
    release = threading.Event()

    def staged(req: ChatRequest) -> Reply:
        if req.vote_labels:
            answered.release()
            release.wait(60)  # hold the votes until the browser has looked at the page
        return agree(req)

    server = scripted(staged)
    try:
        async with Client(http_server, auth=TOKEN) as client:
            sid = (await client.call_tool("run_consensus", {
                "question": "q", "models": [f"openai/{m}@{server.base_url}" for m in "ab"]})
                   ).structured_content["session_id"]
            for _ in range(2):
                assert await asyncio.to_thread(answered.acquire, True, 60)
            url = f"{http_server.removesuffix('/mcp')}/sessions/{sid}?token={TOKEN}"
            during = await asyncio.to_thread(chromium, "--dump-dom", url, tmp=tmp_path)
            release.set()
            await client.call_tool("get_status", {"session_id": sid, "wait_s": 30})
    finally:
        release.set()
    assert during.returncode == 0, during.stderr[-2000:]
    winner = re.search(r'<p id="winner">(.*?)</p>', during.stdout)
    assert winner is not None and winner.group(1) == "Running (voting): no winner yet."
    assert "No winner" not in during.stdout


def test_doctor_needs_no_pool_extra_without_redis(home: Path, tmp_path: Path) -> None:
    """doctor without --redis surveys this machine; it imported redis regardless (a traceback
    on an install without [pool])."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_POOL_EXTRA)
    done = cli(home, "doctor", PYTHONPATH=str(shim), MASSGEN_CLIS="none")
    assert done.returncode == EXIT_OK, done.stderr
    assert "default team:" in done.stdout and "Traceback" not in done.stderr


async def test_get_result_names_the_tie_and_the_dropped_agents(scripted: Scripted,
                                                               home: Path) -> None:
    """The MCP face says what the CLI says: who tied, who was dropped."""
    server = scripted(by_model(c=lambda req: error(400, "model c does not exist"),
                               default=own_answer))
    done = cli(home, "run", "What is 6*7?", *team_args(server), "--json", "--quiet")
    sid = json.loads(done.stdout)["session_id"]
    async with Client(create_server()) as client:
        got = await client.call_tool("get_result", {"session_id": sid})
    result = got.structured_content
    assert result is not None
    assert result["tie_broken"] is True and len(result["tied"]) == 2
    assert list(result["dropped"]) == ["agent_c"]
    assert "model c does not exist" in result["dropped"]["agent_c"]
    shown = text_of(got.content[0])  # what a host that shows only text gets
    assert "a tie between" in shown and "Dropped: agent_c (" in shown


def test_a_closed_pipe_ends_the_output_without_a_traceback(home: Path) -> None:
    """`massgen-mcp sessions | head -1`: the reader leaving is no error worth a traceback."""
    read, write = os.pipe()
    os.close(read)  # every write to stdout now fails: a reader that has gone
    try:
        done = subprocess.run([sys.executable, "-m", "massgen_mcp", "models", "list"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60,
                              env=server_env(home))
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr
