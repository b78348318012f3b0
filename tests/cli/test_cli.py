"""The headless CLI: output, JSON, exit codes, validate, sessions and show."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, error
from tests.helpers import Scripted, text_of, unused_port


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


@pytest.mark.parametrize(("models", "key"), [
    ("gpt-4o", "OPENAI_API_KEY"), ("gpt-4o-mini", "OPENAI_API_KEY"),
    ("o3-mini", "OPENAI_API_KEY"), ("claude-haiku-4-5", "ANTHROPIC_API_KEY"),
    ("gemini-2.5-flash", "GEMINI_API_KEY or GOOGLE_API_KEY"),
    ("openai/gpt-4o-mini", "OPENAI_API_KEY")])
def test_every_spelling_of_a_model_without_its_key_exits_1_writing_nothing(
        tmp_path: Path, models: str, key: str) -> None:
    """A bare name is checked as its provider/model spelling is (issue 58, item 4): before,
    gpt-4o wrote a session, retried three times and exited 2; gemini-2.5-flash went to
    Vertex AI and failed for want of the google package."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("VERTEX")}
    env["MASSGEN_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "run", "q", "--models", models],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "" and done.stderr == (
        f"massgen-mcp: missing API keys:\nagent 'agent_a' ({models}): set {key}, or use a "
        "self-hosted endpoint (model@http://127.0.0.1:11434/v1, or base_url in a config)\n")
    assert not (home / "sessions").exists()


def test_an_unknown_bare_name_is_refused_with_a_guess(
        capsys: pytest.CaptureFixture[str], nothing_available: None, home: Path) -> None:
    code, out, err = run_cli(capsys, "run", "q", "--models", "gpt4o,claude-haiku-45,grok-3")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "massgen-mcp: models is invalid:",
        "models[0]: cannot tell which provider serves 'gpt4o'; did you mean 'gpt-4o'?",
        "models[1]: cannot tell which provider serves 'claude-haiku-45'; "
        "did you mean 'claude-haiku-4-5'?",
        "models[2]: cannot tell which provider serves 'grok-3'; did you mean 'xai/grok-3'?"]
    assert not (home / "sessions").exists()


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


def running_with_every_call_open(scripted: Scripted) -> subprocess.Popen[str]:
    """A `run` of three agents in its own process, returned once each agent's first call has
    reached the model server, which holds them all open (30 s)."""
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
    except BaseException:
        proc.kill()
        raise
    return proc


def test_sigint_cancels_and_exits_4(scripted: Scripted, home: Path) -> None:
    proc = running_with_every_call_open(scripted)
    try:
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


def killed_mid_vote(scripted: Scripted, home: Path,
                    team: Callable[[ScriptedServer], list[str]] = models_args,
                    ) -> tuple[str, ScriptedServer]:
    """A `run` in its own process on the team ``team`` gives for a scripted server, killed
    (SIGKILL) once two agents have answered and are deciding how to vote: its record is
    left running, with nobody running it. Later votes go through."""
    voting = threading.Semaphore(0)
    state = {"hang_votes": True}

    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels and state["hang_votes"]:
            voting.release()
            return Reply("text", delay_s=60)
        return agree(req)

    server = scripted(policy)
    proc = subprocess.Popen([sys.executable, "-m", "massgen_mcp", "run", "q", *team(server)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2):
            assert voting.acquire(timeout=60), proc.stderr
        proc.kill()  # SIGKILL: no handler, no last status write
        proc.wait(30)
    finally:
        proc.kill()
    [folder] = (home / "sessions").iterdir()
    state["hang_votes"] = False
    return folder.name, server


def test_every_way_on_from_a_killed_run_names_resume(
        scripted: Scripted, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After kill -9, show, steer and continue (CLI and MCP) name resume, the one way on
    (issue 58, item 5): before, steer said to continue, continue refused with no way on, and
    show said "interrupted, done"."""
    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    sid, _ = killed_mid_vote(scripted, home)
    resume = f"massgen-mcp resume {sid}"
    code, out, _ = run_cli(capsys, "show", sid)
    assert code == 0
    assert "outcome  interrupted\n" in out and resume in out and "done" not in out
    code, _, err = run_cli(capsys, "steer", sid, "be brief")
    assert code == 1 and resume in err and "continue" not in err
    code, _, err = run_cli(capsys, "continue", sid, "and then?")
    assert code == 1 and resume in err

    async def over_mcp() -> None:
        async with Client(create_server()) as client:
            for tool, args in (("steer_session", {"message": "be brief"}),
                               ("continue_session", {"follow_up": "and then?"}),
                               ("get_result", {})):
                failed = await client.call_tool(tool, {"session_id": sid, **args},
                                                raise_on_error=False)
                assert failed.is_error, tool
                assert "resume_session" in text_of(failed.content[0]), tool
            status = await client.call_tool("get_status", {"session_id": sid})
            head = text_of(status.content[0]).splitlines()[0]
            assert f"Session {sid}: interrupted," in head and "done" not in head

    asyncio.run(over_mcp())
    assert [f.name for f in (home / "sessions").iterdir()] == [sid]  # nothing else started
    code, out, _ = run_cli(capsys, "resume", sid)
    assert code == 0 and out.startswith("Final: ")


def test_a_config_with_inline_keys_resumes_and_continues_and_its_key_is_never_stored(
        scripted: Scripted, home: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Inline api_keys are read again from the config file while it is unchanged, or from
    the one --config gives for the same agents (issue 58, item 5): before, resume and
    continue refused ("not stored; start a new run") though the file had not changed."""
    key = "sk-inline-canary-" + "7" * 24
    config = tmp_path / "team.yaml"

    def write(path: Path, url: str, ids: str = "abc") -> Path:
        path.write_text("agents:\n" + "".join(
            f"  - id: {n}\n    backend: {{type: chatcompletion, model: {n}, base_url: "
            f"'{url}', api_key: '{key}'}}\n" for n in ids))
        return path

    sid, server = killed_mid_vote(
        scripted, home, lambda server: ["--config", str(write(config, server.base_url))])
    before = len(server.requests)
    code, out, err = run_cli(capsys, "resume", sid)
    assert code == 0 and out.startswith("Final: "), err
    sent = [q.headers.get("authorization") for q in server.requests[before:]]
    assert sent and set(sent) == {f"Bearer {key}"}  # the file's key, not a placeholder
    code, out, err = run_cli(capsys, "continue", sid, "and then?")
    assert code == 0, err
    child = next(f.name for f in (home / "sessions").iterdir() if f.name != sid)

    config.write_text(config.read_text() + "# edited\n")  # now it may hold other keys
    code, _, err = run_cli(capsys, "continue", child, "and then?")
    assert code == 1 and "--config FILE" in err
    other = write(tmp_path / "other.yaml", server.base_url, ids="ab")
    code, _, err = run_cli(capsys, "continue", child, "and then?", "--config", str(other))
    assert code == 1 and "does not describe the agents it ran with" in err
    moved = write(tmp_path / "moved.yaml", server.base_url)
    code, _, err = run_cli(capsys, "continue", child, "and then?", "--config", str(moved))
    assert code == 0, err

    written = [p for p in home.rglob("*") if p.is_file()]
    assert len([p for p in written if p.name == "config.json"]) == 3
    assert not [p for p in written if key.encode() in p.read_bytes()]


async def test_eval_samples_a_member_whose_config_had_its_key_inline(
        scripted: Scripted, home: Path, tmp_path: Path) -> None:
    """eval's self-consistency samples of a recorded session's member (no team given again)
    take its inline key from the unchanged config file, as continue does (issue 58, item 5)."""
    from massgen_mcp.core.spec import RunSpec
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    key = "sk-inline-canary-" + "8" * 24
    server = scripted(agree)
    (tmp_path / "team.yaml").write_text("agents:\n" + "".join(
        f"  - id: {n}\n    backend: {{type: chatcompletion, model: {n}, base_url: "
        f"'{server.base_url}', api_key: '{key}'}}\n" for n in "ab"))
    service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
    try:
        started = await service.start(RunSpec(question="q", config="team.yaml"))
        assert (await service.wait(started.session_id, None)).status == "completed"
        before = len(server.requests)
        sampled = await service.sample_member(started.session_id, "b", 2, "q")
        await service.wait(sampled.session_id, None)
    finally:
        await service.aclose()
    sent = {q.headers.get("authorization") for q in server.requests[before:]}
    assert sent == {f"Bearer {key}"}
    assert not [p for p in home.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


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
    proc = running_with_every_call_open(scripted)
    try:
        code, out, _ = run_cli(capsys, "show", "latest")
        html_code, html_path, _ = run_cli(capsys, "show", "latest", "--html")
        report = Path(html_path.strip()).read_text()  # before the run's end rewrites it
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=15)
        proc.kill()
    assert code == 0 and "outcome  running" in out
    assert "cost not known yet (no model call has finished)" in out and "$0.0000" not in out
    assert html_code == 0 and "cost not known yet (no model call has finished)" in report
    assert "$0.0000" not in report  # the report says it as show does


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


def test_validate_says_what_every_provider_row_checks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """validate asks the provider rows' checks, as a run's preflight does: a check a new row
    brings is said by both, with no line of validate's own (a warning when the environment
    fixes it, an error when the file is wrong)."""
    from massgen_mcp.core.errors import Refusal
    from massgen_mcp.core.spec import TeamConfig, build_team
    from massgen_mcp.providers import preflight
    from massgen_mcp.providers.kinds import KINDS, Check, Kind

    async def closed(team: TeamConfig, unreachable: object) -> list[Refusal]:
        return [Refusal(f"agent {a.id!r}: the acme gateway is closed today")
                for a in team.agents]

    async def renamed(team: TeamConfig) -> list[str]:
        return [f"agent {a.id!r}: acme renamed this model" for a in team.agents]

    monkeypatch.setattr(preflight, "KINDS", (*KINDS, Kind("acme", checks=(
        Check(closed), Check(closed, per_agent=renamed, fixable=False)))))
    config = tmp_path / "team.yaml"
    config.write_text("agents:\n  - id: a\n    backend: {type: openai, model: m, "
                      f"base_url: 'http://127.0.0.1:{unused_port()}/v1'}}\n")
    refused = asyncio.run(preflight.here(build_team({"agents": [
        {"id": "a", "model": "openai/m", "base_url": "http://127.0.0.1:9/v1"}]})))
    assert "agent 'a': the acme gateway is closed today" in [r.text for r in refused]
    code, out, err = run_cli(capsys, "validate", str(config))
    assert code == 1
    assert "  warning: agent 'a': the acme gateway is closed today" in out.splitlines()
    assert f"massgen-mcp: {config}: agent 'a': acme renamed this model" in err.splitlines()
