"""Bounds on what outsiders put into our calls and onto the user's terminal: MCP servers' tool
lists are capped per server, per tool and per call; model output printed by the CLI has its
control sequences neutralised."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from massgen_mcp.testing.scripted import agree
from tests.helpers import Scripted
from tests.mcp_servers import offered, run, team
from tests.servers import server_env

FLOOD = Path(__file__).resolve().parents[1] / "fixtures" / "flood_server.py"
FLOOD_SERVER = {"flood": {"type": "stdio", "command": sys.executable, "args": [str(FLOOD)]}}


async def test_a_flooding_mcp_server_cannot_bloat_every_call(scripted: Scripted) -> None:
    server = scripted(agree)
    result, events = await run(team(server.base_url, [
        {"id": "a", "backend": {"mcp_servers": {**FLOOD_SERVER, "more": FLOOD_SERVER["flood"]}}},
        {"id": "b"}]))
    assert result["status"] == "completed", result["errors"]
    calls = [r for r in server.requests if r.model == "a" and r.tools]
    assert calls
    for req in calls:
        mcp_tools = [n for n in offered(req) if n.startswith("mcp__")]
        assert 0 < len(mcp_tools) <= 100 and "mcp__flood__huge" not in mcp_tools
        assert len(json.dumps(req.body)) < 150_000  # uncut, every call would carry the whole flood
    cut = [e["detail"] for e in events if e["type"] == "tools_cut"]
    assert any("1 tool(s) dropped" in c and "mcp__flood__huge" in c for c in cut), cut
    assert any("2000 tools; only the first 100" in c for c in cut), cut
    assert any("100 of 200 MCP tools left out of each call" in c for c in cut), cut
    assert len(cut) == len(set(cut))  # said once per run, not once per call


def test_validate_servers_warns_about_what_the_caps_cut(tmp_path: Path, home: Path) -> None:
    config = tmp_path / "team.yaml"
    config.write_text(json.dumps({"agents": [{"id": "a", "backend": {
        "type": "chatcompletion", "model": "a", "base_url": "http://127.0.0.1:9/v1",
        "mcp_servers": FLOOD_SERVER}}]}))
    plain = subprocess.run([sys.executable, "-m", "massgen_mcp", "validate", str(config)],
                           capture_output=True, text=True, env=server_env(home), timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "validate --servers" in plain.stdout and "warning: MCP server" not in plain.stdout
    subprocess.run([sys.executable, "-m", "massgen_mcp", "trust", str(config)], check=True,
                   capture_output=True, env=server_env(home), timeout=120)  # it starts a command
    probed = subprocess.run([sys.executable, "-m", "massgen_mcp", "validate", str(config),
                             "--servers"], capture_output=True, text=True,
                            env=server_env(home), timeout=120)
    assert probed.returncode == 0, probed.stderr
    assert "warning: MCP server flood: 1 tool(s) dropped" in probed.stdout
    assert "warning: MCP server flood: 2000 tools; only the first 100" in probed.stdout


# -- model output on a terminal ----------------------------------------------------------------

PAYLOAD = "\x1b]0;evil\x07 \x1b[2J \x9b31m \x1b[1A\rfake \u202eevil\u202c \x00\x7f"
OBEYED = ("\x1b", "\x07", "\x9b", "\r", "\u202e", "\x00", "\x7f")


def test_control_sequences_in_model_output_are_shown_not_obeyed(scripted: Scripted,
                                                                home: Path) -> None:
    from tests.helpers import hostile

    server = scripted(hostile(PAYLOAD))
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "abc")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "massgen_mcp", *args],
                              capture_output=True, text=True, env=server_env(home),
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    ran = cli("run", "What is 6*7?", "--models", models)
    as_json = cli("run", "What is 6*7?", "--models", models, "--json", "--quiet")
    session_id = json.loads(as_json.stdout)["session_id"]
    assert PAYLOAD in json.loads(as_json.stdout)["final_answer"]  # the data is kept
    shown = cli("show", session_id)
    shown_json = cli("show", session_id, "--json")
    listed = cli("sessions")
    for out in (ran.stdout, ran.stderr, as_json.stdout, shown.stdout, shown_json.stdout,
                listed.stdout):
        for char in OBEYED:
            assert char not in out, (char, out)
    assert "\\x1b]0;evil\\x07" in ran.stdout and "\\x1b[2J" in ran.stdout
    assert "\\x9b31m" in shown.stdout and "\\u202eevil" in shown.stdout
    assert "\\x1b]0;evil" in ran.stderr  # the progress line of b's answer


HOSTILE = "\x1b]0;PWNED\x07\x1b[2J"


def test_no_command_lets_a_control_sequence_reach_the_terminal(
        scripted: Scripted, home: Path, tmp_path: Path) -> None:
    """Record fields (winner, agent ids, models, tally, table rows) and config fields a cloned
    project or a planted record carries go through the CLI's one output helper; a URL or a
    command with control characters in it is refused at validation, naming the field."""
    server = scripted(agree)
    project = tmp_path / "project"
    project.mkdir()
    config = home / "config.yaml"  # the project's config (MASSGEN_HOME is its .massgen)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "massgen_mcp", *args], cwd=project,
                              capture_output=True, text=True, env=server_env(home),
                              timeout=120)
        for out in (done.stdout, done.stderr):
            assert "\x1b" not in out and "\x07" not in out, (args, out)
        return done

    models = ",".join(f"openai/{m}@{server.base_url}" for m in "abc")
    ran = cli("run", "What is 6*7?", "--models", models, "--json", "--quiet")
    session_id = json.loads(ran.stdout)["session_id"]
    planted = json.dumps(HOSTILE)[1:-1]
    for path in (home / "sessions" / session_id).iterdir():  # a record someone wrote
        if path.suffix in (".json", ".jsonl"):
            path.write_text(path.read_text().replace("agent_a", "agent_a" + planted)
                            .replace('"openai/a"', f'"openai/a{planted}"'))
    shown = cli("show", session_id)
    assert shown.returncode == 0 and "agent_a\\x1b]0;PWNED\\x07" in shown.stdout, shown.stderr
    assert cli("sessions").returncode == 0

    # A cloned project's names and the config fields validation lets text through.
    hostile = tmp_path / f"clone{HOSTILE}"
    hostile.mkdir()
    (hostile / "team.yaml").write_text(json.dumps({
        "agents": [{"id": "a", "backend": {"type": "chatcompletion", "model": "a",
                                           "base_url": "http://evil.example/v1"}}],
        "orchestrator": {"context_paths": [f"/tmp/notes{HOSTILE}"]}}))
    for command in (["validate", str(hostile / "team.yaml")], ["trust", str(hostile / "team.yaml")],
                    ["--home", str(hostile), "doctor"]):
        done = cli(*command)
        assert done.returncode == 0 and "PWNED" in done.stdout, done.stderr
    # And where it has no business at all, the field is named and nothing starts.
    for field, backend in (
            ("base_url", {"base_url": f"http://evil.example/v1{HOSTILE}"}),
            ("command", {"base_url": server.base_url,
                         "mcp_servers": {"h": {"type": "stdio", "command": f"./h{HOSTILE}"}}}),
            ("args", {"base_url": server.base_url,
                      "mcp_servers": {"h": {"type": "stdio", "command": "sh",
                                            "args": [f"x{HOSTILE}"]}}})):
        config.write_text(json.dumps({"agents": [
            {"id": "a", "backend": {"type": "chatcompletion", "model": "a", **backend}}]}))
        for command in (["validate", str(config)], ["trust"]):
            refused = cli(*command)
            assert refused.returncode != 0 and field in refused.stderr, refused.stderr
            assert "control character" in refused.stderr or "http(s) URL" in refused.stderr


def test_the_cli_writes_only_through_its_output_helpers() -> None:
    """So that no command can forget: a ``print`` anywhere else in the cli package is a way
    round."""
    import ast

    import massgen_mcp.cli

    writers = set()
    for source in Path(massgen_mcp.cli.__file__).parent.glob("*.py"):
        tree = ast.parse(source.read_text())
        writers |= {
            f"{source.stem}.{node.name}" for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            and any(isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id == "print" for call in ast.walk(node))}
    assert writers == {"output.say", "output.say_json"}
