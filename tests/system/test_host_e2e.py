"""The real hosts, headless, through the entry `massgen-mcp install` writes: Claude Code
(`claude -p`), Codex (`codex exec`) and Gemini CLI (`gemini -p`), each driven by a scripted
model API of ours on 127.0.0.1 (massgen_mcp/testing/host_model.py) that calls run_consensus
with wait_s=50 on a scripted team. The team's answer must come back in the host's final output,
and the host's first model request must already carry our tools and our instructions (a host
that starts without them answers without us, with no error). Nothing reaches the network."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.cli.install import install
from massgen_mcp.testing.host_model import NOT_OFFERED, HostModel
from massgen_mcp.testing.scripted import ScriptedServer, agree
from tests.coding_clis import BIN, needs_clis

pytestmark = [needs_clis, pytest.mark.slow]

QUESTION = "What is 6*7? Ask the massgen team."
ONE_CALL = "run_consensus(question, wait_s=50)"  # how the instructions begin our part


def host_argv(host: str, model: HostModel) -> tuple[list[str], dict[str, str]]:
    """The headless command line of ``host`` pointed at ``model``, and its environment."""
    if host == "claude-code":
        return ([str(BIN["claude"]), "-p", QUESTION, "--allowedTools", "mcp__massgen",
                 "--model", "scripted"],
                {"ANTHROPIC_API_KEY": "sk-ant-scripted", "ANTHROPIC_BASE_URL": model.base_url,
                 "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    if host == "codex":
        provider = "model_providers.scripted"
        return (["node", str(BIN["codex"]), "exec", "--skip-git-repo-check",
                 "-c", "model_provider=scripted", "-c", f"{provider}.name=scripted",
                 "-c", f'{provider}.base_url="{model.base_url}/v1"',
                 "-c", f"{provider}.env_key=SCRIPTED_KEY",
                 "-c", f'{provider}.wire_api="responses"', "--model", "scripted", QUESTION],
                {"SCRIPTED_KEY": "sk-scripted"})
    return (["node", str(BIN["gemini"]), "-p", QUESTION, "--model", "scripted"],
            {"GEMINI_API_KEY": "scripted", "GOOGLE_GEMINI_BASE_URL": model.base_url,
             "GEMINI_CLI_TRUST_WORKSPACE": "true"})  # as hosts.md says for CI


def user_home(tmp_path: Path, host: str) -> Path:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".gemini").mkdir()
    if host == "gemini-cli":  # how Gemini CLI takes a key for a custom endpoint
        (home / ".gemini" / "settings.json").write_text(json.dumps(
            {"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    return home


@pytest.mark.parametrize(("host", "approve"), [
    ("claude-code", False), ("codex", True), ("gemini-cli", True)])
def test_the_host_calls_run_consensus_and_shows_the_teams_answer(
        tmp_path: Path, host: str, approve: bool) -> None:
    """Claude Code takes --allowedTools mcp__massgen on its command line (hosts.md); Codex
    and Gemini CLI get their approval from `install --approve-tools`."""
    home, project = user_home(tmp_path, host), tmp_path / "project"
    project.mkdir()
    install(host, scope="user", home=home, project=project, approve_tools=approve)
    with ScriptedServer(agree) as team:
        arguments = {"question": "What is 6*7?", "wait_s": 50,
                     "models": [f"openai/{m}@{team.base_url}" for m in "abc"]}
        with HostModel("run_consensus", arguments) as model:
            argv, extra = host_argv(host, model)
            env = {"PATH": os.environ["PATH"], "HOME": str(home),
                   "CODEX_HOME": str(home / ".codex"), "XDG_CACHE_HOME": str(home / ".cache"),
                   **extra}
            done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                                  timeout=90, stdin=subprocess.DEVNULL)
            asked = model.conversation_requests()
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = (project / ".massgen" / "sessions").glob("*/result.json")
    final = json.loads(result.read_text())["final_answer"]
    assert final and final in done.stdout, done.stdout[-3000:]
    assert NOT_OFFERED not in done.stdout
    first = json.dumps(asked[0])
    assert "run_consensus" in first, "the first model request did not list our tools"
    assert ONE_CALL in first, "nor our instructions"
    assert any(model.name_in(body) for body in asked[:3])


def test_codex_without_approval_refuses_as_the_install_note_warns(tmp_path: Path) -> None:
    """The entry as `install codex` writes it without --approve-tools: codex exec waits for
    our tools (required = true) but may not call run_consensus; the note says so."""
    home, project = user_home(tmp_path, "codex"), tmp_path / "project"
    project.mkdir()
    note = install("codex", scope="user", home=home, project=project).note
    assert "--approve-tools" in note
    arguments: dict[str, Any] = {"question": "q", "wait_s": 0}
    with HostModel("run_consensus", arguments) as model:
        argv, extra = host_argv("codex", model)
        env = {"PATH": os.environ["PATH"], "HOME": str(home),
               "CODEX_HOME": str(home / ".codex"), **extra}
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                              timeout=90, stdin=subprocess.DEVNULL)
        asked = model.conversation_requests()
    assert model.name_in(asked[0]) is not None, "required = true: listed before the first"
    assert "requires approval" in done.stdout + done.stderr
    assert not (project / ".massgen" / "sessions").exists()
