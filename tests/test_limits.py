"""Bounds on what outsiders put into our calls and onto the user's terminal: MCP servers' tool
lists are capped per server, per tool and per call; model output printed by the CLI has its
control sequences neutralised."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_mcp_tools import offered, run, team
from test_transports import server_env

from massgen_mcp.scripted import agree

FLOOD = Path(__file__).resolve().parent / "fixtures" / "flood_server.py"
FLOOD_SERVER = {"flood": {"type": "stdio", "command": sys.executable, "args": [str(FLOOD)]}}


async def test_a_flooding_mcp_server_cannot_bloat_every_call(scripted) -> None:
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
        assert len(json.dumps(req.body)) < 150_000  # was 5.2 MB per call
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
    probed = subprocess.run([sys.executable, "-m", "massgen_mcp", "validate", str(config),
                             "--servers"], capture_output=True, text=True,
                            env=server_env(home), timeout=120)
    assert probed.returncode == 0, probed.stderr
    assert "warning: MCP server flood: 1 tool(s) dropped" in probed.stdout
    assert "warning: MCP server flood: 2000 tools; only the first 100" in probed.stdout
