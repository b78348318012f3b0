"""Sleepers that try to outlive their run (tests/fixtures/escapees.py): where they write their
pids, who survives, and a stand-in Claude Code that starts them."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.team.massgen_yaml import team_from_mapping
from tests.coding_clis import ANSWER_PROBE
from tests.fixtures import escapees
from tests.helpers import FAST

FIXTURES = Path(__file__).resolve().parent / "fixtures"


SERVER = FIXTURES / "escapees.py"


def written_pids(folder: Path) -> dict[str, int]:
    return {path.stem: int(path.read_text()) for path in folder.glob("*.pid")}


def survivors(pids: dict[str, int], within_s: float = 10.0) -> dict[str, int]:
    """The sleepers still running once ``within_s`` has passed (or none, as soon as none is)."""
    deadline = time.monotonic() + within_s
    while True:
        alive = {kind: pid for kind, pid in pids.items() if escapees.running(pid)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)  # other processes' deaths: polled, with a deadline


async def until_written(folder: Path, within_s: float = 30.0) -> dict[str, int]:
    deadline = time.monotonic() + within_s
    while set(written_pids(folder)) != set(escapees.KINDS):
        assert time.monotonic() < deadline, "the sleepers did not start"
        await asyncio.sleep(0.02)
    return written_pids(folder)


def stand_in_claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: Path,
                    then: str) -> None:
    """A ``claude`` that starts the sleepers, then runs ``then``."""
    script = tmp_path / "claude"
    script.write_text(f"#!{sys.executable}\nimport json, sys, time\nfrom pathlib import Path\n"
                      f"{ANSWER_PROBE}sys.path.insert(0, {str(FIXTURES)!r})\nimport escapees\n"
                      f"escapees.spawn(Path({str(folder)!r}))\n{then}\n")
    script.chmod(0o755)
    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(script))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its version, learned


async def call_claude() -> str | None:
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.providers.cli.provider import CliProvider

    completion = await CliProvider().complete(
        AgentSpec(id="c", model="cli/claude"),
        [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        tools=None, timeout_s=60)
    return completion.content


RESULT = json.dumps({"type": "result", "subtype": "success", "is_error": False,
                     "result": '{"action": "new_answer", "content": "42"}',
                     "usage": {"input_tokens": 3, "output_tokens": 2}})


def team(server_url: str, folder: Path, *flags: str, **backend: Any) -> TeamConfig:
    servers = {"escapees": {"command": sys.executable,
                            "args": [str(SERVER), str(folder), *flags]}}
    built, _ = team_from_mapping({"agents": [
        {"id": "a", "backend": {"type": "chatcompletion", "model": "a", "base_url": server_url,
                                "mcp_servers": servers, **backend}},
        {"id": "b", "backend": {"type": "chatcompletion", "model": "b",
                                "base_url": server_url}}], "options": FAST})
    return built


async def run(the_team: TeamConfig) -> dict[str, Any]:
    runner = LocalExecutor(SessionStore(), ProviderRouter())
    live = await runner.start(RequestRecord(question="q"), the_team)
    return (await live.task).model_dump(mode="json")


