"""Nothing outlives its run: every descendant of a coding-CLI call or of an MCP stdio server,
including ones that call ``setsid`` or daemonize with a double fork, is gone when the call
ends, the run ends or is cancelled, or the server exits by itself.

The processes are real: a stand-in ``claude`` script and a real FastMCP stdio server, both
starting the sleepers of ``tests/fixtures/escapees.py``, which ignore SIGTERM and SIGHUP; each
check is by pid.
"""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.core import children
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, tool_calls
from tests.coding_clis import ANSWER_PROBE_SH
from tests.fixtures import escapees
from tests.helpers import Scripted
from tests.sleepers import (
    RESULT,
    call_claude,
    run,
    stand_in_claude,
    survivors,
    team,
    until_written,
    written_pids,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="descendants are tracked through /proc on Linux")


@pytest.fixture
def pid_folder(tmp_path: Path) -> Iterator[Path]:
    """Where the sleepers write their pids; whatever survives a failed test is killed."""
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    escapees.kill(written_pids(folder))


# -- coding-CLI calls ------------------------------------------------------------------------------


async def test_a_cli_call_that_ends_leaves_no_descendant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pid_folder: Path) -> None:
    stand_in_claude(tmp_path, monkeypatch, pid_folder, f"print({RESULT!r}, flush=True)")
    assert "42" in (await call_claude() or "")
    pids = written_pids(pid_folder)
    assert set(pids) == set(escapees.KINDS)
    assert survivors(pids) == {}


async def test_a_cancelled_cli_call_leaves_no_descendant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pid_folder: Path) -> None:
    stand_in_claude(tmp_path, monkeypatch, pid_folder, "time.sleep(300)")
    call = asyncio.ensure_future(call_claude())
    pids = await until_written(pid_folder)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert survivors(pids) == {}


async def test_a_cli_that_exits_with_an_error_leaves_no_descendant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pid_folder: Path) -> None:
    from massgen_mcp.core.errors import ProviderError

    stand_in_claude(tmp_path, monkeypatch, pid_folder, "sys.exit('no login')")
    with pytest.raises(ProviderError, match="exit status 1"):
        await call_claude()
    assert survivors(written_pids(pid_folder)) == {}


async def test_a_killed_server_process_leaves_no_descendant_of_its_cli_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pid_folder: Path) -> None:
    # Our own process dies (kill -9) in the middle of a CLI call: nothing is left to stop the
    # call, and what the CLI started must go anyway.
    stand_in_claude(tmp_path, monkeypatch, pid_folder, "time.sleep(300)")
    ours = subprocess.Popen([sys.executable, "-c", (
        "import asyncio, os, sys\nfrom pathlib import Path\n"
        "from massgen_mcp.core.supervisor import run_child\n"
        "asyncio.run(run_child([sys.argv[1]], b'', Path(sys.argv[2]), dict(os.environ)))"),
        str(tmp_path / "claude"), str(tmp_path)])
    try:
        pids = await until_written(pid_folder)
        ours.kill()
        assert survivors(pids) == {}
    finally:
        ours.kill()
        ours.wait()


async def test_the_cli_gets_its_environment_and_gives_its_status_as_without_a_reaper(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.core.errors import ProviderError
    from massgen_mcp.providers.cli.catalog import CLIS
    from massgen_mcp.providers.cli.environment import child_env

    for name in ("LANG", "LC_ALL", "LC_CTYPE"):  # the C locale: Python's start-up coerces it
        monkeypatch.delenv(name, raising=False)
    dump = tmp_path / "environ"
    script = tmp_path / "claude"
    script.write_text(f"#!/bin/sh\n{ANSWER_PROBE_SH}cat /proc/$$/environ > {dump}\n"
                      f"echo '{RESULT}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(script))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its version, learned
    assert "42" in (await call_claude() or "")
    got = dict(item.split("=", 1) for item in dump.read_text().split("\0") if item)
    marker = got.pop(children.MARKER_ENV)  # what a call's last-resort sweep looks for
    assert len(marker) == 24
    assert got == child_env(CLIS["claude"], AgentSpec(id="c", model="cli/claude"))

    script.write_text("#!/bin/sh\nkill -9 $$\n")
    with pytest.raises(ProviderError, match=r"exit status -9"):
        await call_claude()


def _eof_within(fd: int, within_s: float) -> bytes | None:
    """What the pipe ``fd`` gives next (b"" at end of file: every writer is gone), or None
    if nothing comes within ``within_s``."""
    deadline = time.monotonic() + within_s
    while (left := deadline - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            return os.read(fd, 1)
    return None


@pytest.mark.parametrize("how", ["reaper-killed", "reaper-alive", "macos-path"])
async def test_a_daemon_that_forks_and_exits_again_and_again_does_not_outlive_its_call(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # It keeps the call's marker, but each pid a scan of /proc finds has forked and exited
    # by the time it is signalled: the sweep stops what it finds before anything is killed,
    # and scans until no process carries the marker. Every generation holds the pipe: end
    # of file says that none is left. "macos-path": no reaper, and the sweep through psutil.
    if how == "macos-path":
        monkeypatch.setattr(children, "PLATFORM", "darwin")
    kill_reaper = how == "reaper-killed"
    read, write = os.pipe()
    argv = [sys.executable, "-c", escapees.HOPPER_COMMAND, str(write),
            *(["--kill-parent"] if kill_reaper else [])]
    spawn = children.command(argv, dict(os.environ))
    try:
        proc = await asyncio.create_subprocess_exec(
            *spawn.argv, env=spawn.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True, pass_fds=[write])
    finally:
        os.close(write)
    try:
        assert await asyncio.to_thread(_eof_within, read, 30) == b"h"  # it hops
        if kill_reaper:
            await proc.wait()
        await children.stop(proc, spawn.marker)
        assert await asyncio.to_thread(_eof_within, read, 30) == b"", "a hopper outlived"
    finally:
        os.close(read)


# -- MCP stdio servers as agent tools ------------------------------------------------------------


async def test_a_server_that_exits_by_itself_at_the_end_of_a_run_leaves_no_descendant(
        scripted: Scripted, pid_folder: Path) -> None:
    # At the end of the run the client closes the server's stdin and the server exits on
    # its own: nothing is left to signal its process group.
    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels or req.is_final or req.model != "a":
            return agree(req)
        if not [m for m in req.messages if m["role"] == "tool"]:
            return tool_calls(("mcp__escapees__lookup", '{"term": "x"}'))
        return answer("done")

    result = await run(team(scripted(policy).base_url, pid_folder))
    assert result["status"] == "completed"
    pids = written_pids(pid_folder)
    assert set(pids) == set(escapees.KINDS)
    assert survivors(pids) == {}


async def test_a_server_that_exits_only_on_sigterm_gets_to_save_and_leaves_no_descendant(
        scripted: Scripted, pid_folder: Path) -> None:
    # The MCP SDK's shutdown: stdin closed, then SIGTERM to the group, SIGKILL 2 s later. The
    # server still gets its SIGTERM and a moment to act on it before everything is killed.
    result = await run(team(scripted(agree).base_url, pid_folder, "--linger"))
    assert result["status"] == "completed"
    assert (pid_folder / "terminated").read_text() == "saved"
    assert survivors(written_pids(pid_folder)) == {}


async def test_a_server_that_dies_mid_run_leaves_no_descendant(scripted: Scripted,
                                                               pid_folder: Path) -> None:
    def policy(req: ChatRequest) -> Reply:
        if req.vote_labels or req.is_final or req.model != "a":
            return agree(req)
        got = [m["content"] for m in req.messages if m["role"] == "tool"]
        if not got:
            return tool_calls(("mcp__escapees__crash", "{}"))
        return answer(f"The tool said: {got[-1]}")

    result = await run(team(scripted(policy).base_url, pid_folder,
                            allowed_tools=["crash", "lookup"]))
    assert result["status"] == "completed"
    assert survivors(written_pids(pid_folder)) == {}


async def test_a_cancelled_run_leaves_no_server_descendant(scripted: Scripted,
                                                           pid_folder: Path) -> None:
    asked = threading.Event()

    def policy(req: ChatRequest) -> Reply:
        asked.set()
        return Reply("text", delay_s=30)

    runner = LocalExecutor(SessionStore(), ProviderRouter())
    try:
        live = await runner.start(RequestRecord(question="q"),
                                  team(scripted(policy).base_url, pid_folder))
        assert await asyncio.to_thread(asked.wait, 30)
        pids = await until_written(pid_folder)
        assert await runner.cancel(live.session_id)
        assert survivors(pids) == {}
    finally:
        await runner.aclose()
