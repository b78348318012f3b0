"""The headless CLI: output, JSON, exit codes, validate, sessions and show."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, error
from tests.helpers import Scripted, unused_port


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def models_args(server: ScriptedServer) -> list[str]:
    return ["--models", "openai/a,openai/b,openai/c", "--base-url", server.base_url]


def test_run_prints_final_answer_and_progress(scripted: Scripted,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(agree)
    code, out, err = run_cli(capsys, "run", "What is 6*7?", *models_args(server))
    assert code == 0
    assert out.startswith("Final: The answer from ") and out.count("\n") == 1
    assert "answered" in err and "voted for" in err and "finished: completed" in err


def test_run_json(scripted: Scripted, capsys: pytest.CaptureFixture[str], home: Path) -> None:
    server = scripted(agree)
    code, out, _ = run_cli(capsys, "run", "What is 6*7?", *models_args(server), "--json")
    assert code == 0
    data = json.loads(out)
    assert {"session_id", "status", "winner", "final_answer", "usage", "cost",
            "session_dir"} <= set(data)
    assert data["status"] == "completed" and data["cost"] is None
    assert Path(data["session_dir"]).parent == home.resolve() / "sessions"
    assert (Path(data["session_dir"]) / "result.json").is_file()


def test_input_errors_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                             nothing_available: None) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "agents:\n  - id: a\n    backend: {type: openai, model: gpt-4o, temprature: 1}\n")
    code, _, err = run_cli(capsys, "run", "q", "--config", str(bad))
    assert code == 1
    assert "agents[0].backend.temprature: unknown key; did you mean 'temperature'?" in err
    code, _, err = run_cli(capsys, "run", "  ", "--models", "openai/x")
    assert code == 1 and "question: empty" in err
    code, _, err = run_cli(capsys, "run", "q")
    assert code == 1 and "no team given" in err
    code, _, err = run_cli(capsys, "run", "q", "--models", "openai/gpt-4o-mini")
    assert code == 1 and "set OPENAI_API_KEY" in err


def test_all_agents_failing_exits_2(scripted: Scripted, capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(lambda req: error(400, "model does not exist"))
    code, out, err = run_cli(capsys, "run", "q", *models_args(server))
    assert code == 2 and out == ""
    assert "all_agents_failed" in err and "request rejected" in err


def test_timeout_exits_3_with_best_answer(scripted: Scripted,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    def stall(req: ChatRequest) -> Reply:
        return Reply("text", delay_s=5) if req.vote_labels else agree(req)

    server = scripted(stall)
    code, out, err = run_cli(capsys, "run", "q", *models_args(server), "--timeout", "1")
    assert code == 3
    assert out.startswith("The answer from "), "best available answer still printed"
    assert "timed_out" in err


def test_sigint_cancels_and_exits_4(scripted: Scripted, home: Path) -> None:
    arrived = threading.Semaphore(0)

    def hang(req: ChatRequest) -> Reply:
        arrived.release()
        return Reply("text", delay_s=30)

    server = scripted(hang)
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "run", "q", *models_args(server), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for _ in range(3):
            assert arrived.acquire(timeout=30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 4, err
    [folder] = (home / "sessions").iterdir()
    status = json.loads((folder / "status.json").read_text())
    assert status["status"] == "cancelled"


def test_validate_prints_team_and_names_bad_keys(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret-value-123456")
    good = tmp_path / "team.yaml"
    good.write_text(
        "agents:\n"
        "  - id: local\n"
        "    backend: {type: chatcompletion, model: qwen, base_url: 'http://127.0.0.1:9/v1',"
        " api_key: '${MY_KEY}', tool_calling: false}\n"
        "    system_message: You are terse.\n"
        "  - id: gpt\n"
        "    backend: {type: openai, model: gpt-4o-mini, enable_web_search: true}\n"
        "orchestrator: {max_new_answers_per_agent: 2, snapshot_storage: snaps}\n"
        "timeout_settings: {orchestrator_timeout_seconds: 120}\n"
    )
    code, out, _ = run_cli(capsys, "validate", str(good))
    assert code == 0
    assert "local: openai/qwen base_url=http://127.0.0.1:9/v1 json-fallback persona" in out
    assert "gpt: openai/gpt-4o-mini web-search" in out
    assert "max_answers_per_agent=2" in out and "timeout_s=120.0" in out
    assert "sk-secret-value-123456" not in out
    good.write_text("agents: []\n")
    code, _, err = run_cli(capsys, "validate", str(good))
    assert code == 1 and "agents: required" in err


def test_sessions_and_show(scripted: Scripted, capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(agree)
    run_cli(capsys, "run", "What is 6*7?", *models_args(server), "--json")
    code, out, _ = run_cli(capsys, "sessions", "--json")
    [session] = json.loads(out)
    assert code == 0 and session["status"] == "completed"
    code, out, _ = run_cli(capsys, "show", session["session_id"])
    assert code == 0
    assert "winner" in out and "agent_a |" in out and "FINAL" in out and "→" in out
    code, _, err = run_cli(capsys, "show", "../../etc")
    assert code == 1 and "is not a session id" in err


def test_sessions_hints_filter_and_follow_ups(scripted: Scripted,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The hint under the list is a command to type, not "massgen-mcp: massgen-mcp show";
    an empty filtered list names the filter; a follow-up names its parent in text too."""
    code, _, err = run_cli(capsys, "sessions", "--status", "running")
    assert code == 0 and "no running sessions in " in err and "--status running" in err
    server = scripted(agree)
    run_cli(capsys, "run", "What is 6*7?", *models_args(server), "--json")
    code, out, _ = run_cli(capsys, "sessions", "--json")
    [parent] = json.loads(out)
    code, _, _ = run_cli(capsys, "continue", parent["session_id"], "And 7*8?", "--json")
    assert code == 0
    code, out, err = run_cli(capsys, "sessions")
    assert code == 0 and "massgen-mcp: massgen-mcp" not in err
    assert "'massgen-mcp show ID' shows one" in err
    [follow_line] = [line for line in out.splitlines() if "And 7*8?" in line]
    assert follow_line.endswith(f"(follow-up of {parent['session_id']})")
    code, out, _ = run_cli(capsys, "show", "latest")
    assert code == 0 and f"follow-up of {parent['session_id']}" in out.splitlines()[0]
    assert "cost unknown (a model's price is not known)" in out


def test_show_a_running_run_says_its_cost_is_not_known_yet(scripted: Scripted,
                                                           capsys: pytest.CaptureFixture[str],
                                                           home: Path) -> None:
    """Before any call has finished, a running run's record holds $0: that is no price, and
    the same run ends with its cost unknown, so show says so rather than "$0.0000"."""
    arrived = threading.Semaphore(0)

    def hang(req: ChatRequest) -> Reply:
        arrived.release()
        return Reply("text", delay_s=30)

    server = scripted(hang)
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "run", "q", *models_args(server), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3):
            assert arrived.acquire(timeout=30)
        code, out, _ = run_cli(capsys, "show", "latest")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=15)
        proc.kill()
    assert code == 0 and "outcome  running" in out
    assert "cost not known yet (no model call has finished)" in out and "$0.0000" not in out


def test_ctrl_c_on_serve_http_is_one_line_and_exit_4(home: Path) -> None:
    """uvicorn stops on Ctrl-C and raises it again: the person gets the prompt back with one
    line, and the exit code the table gives Ctrl-C, not 35 lines of stack."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(unused_port())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the server's log says when it serves
            seen.append(line)
            if "Application startup complete" in line:
                break
        else:
            raise AssertionError("".join(seen))
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert rest.rstrip().endswith("massgen-mcp: serve stopped (Ctrl-C)")


def test_serve_http_on_a_busy_port_says_so_before_loading_the_server(home: Path) -> None:
    """The port is bound before the server's imports (seconds on a busy machine), so a busy
    port is one line at once: the process ends without having loaded them."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        probe = ("import sys; from massgen_mcp.cli.main import main; "
                 f"code = main(['serve', '--http', '--port', '{port}']); "
                 "print([m for m in ('massgen_mcp.server.app', 'fastmcp', 'uvicorn') "
                 "if m in sys.modules]); sys.exit(code)")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 6, done.stderr
    assert done.stdout.strip() == "[]"
    assert done.stderr.splitlines() == [
        f"massgen-mcp: port {port} on 127.0.0.1 is already in use (another server, perhaps "
        "massgen-mcp itself); stop it or choose another with --port"]


def test_an_empty_context_paths_gives_no_file_access(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    """MassGen's quickstart writes `context_paths: []` (no path, no access); the workspace
    tools with no paths would see the whole project, so an empty list leaves them off, and
    a list of paths turns them on narrowed to those (docs/config.md)."""
    config = tmp_path / "team.yaml"
    team = ("agents:\n  - id: a\n"
            "    backend: {type: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}\n")
    config.write_text(team + "orchestrator: {context_paths: []}\n")
    code, out, _ = run_cli(capsys, "validate", str(config))
    assert code == 0 and "workspace_tools=False" in out and " tools=" not in out
    config.write_text(team + "orchestrator: {context_paths: [{path: src, permission: read}]}\n")
    code, out, _ = run_cli(capsys, "validate", str(config))
    assert code == 0 and "workspace_tools=True" in out and "context_paths=['src']" in out
