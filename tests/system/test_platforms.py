"""macOS and Windows paths, run here on Linux (docs/platforms.md says what each platform gives).

* The CLI's run, the stdio server and a coding-CLI call work in a Python where the modules
  Windows lacks (fcntl, resource, termios, pwd, grp) cannot be imported: a ``sitecustomize``
  on ``PYTHONPATH`` makes each import of them fail, as on Windows.
* The child cleanup macOS gets (no reaper: the process group, then the call's marker) is
  forced here and leaves nothing of a cancelled coding-CLI call.
* ``install`` writes each host's config where that host looks for it on macOS and Windows.
* A CLI that SIGKILLs its own reaper does not free what it started (issue 47, item 8).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from massgen_mcp.cli.install import HOSTS, install
from massgen_mcp.core import children, portable
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.testing.scripted import agree
from tests.coding_clis import ANSWER_PROBE
from tests.fixtures import escapees
from tests.helpers import Scripted
from tests.servers import RawStdio, server_env
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

WINDOWS_LACKS = ("fcntl", "resource", "termios", "pwd", "grp")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the sleepers are checked through /proc")


# The MCP SDK's stdio server imports fcntl behind `sys.platform != "win32"`, so on Windows it
# never does; so does core/portable.py, the one module of ours that holds both branches (mypy
# --platform win32 checks that its fcntl sits in the POSIX branch). They alone are let through.
EXEMPT = ("mcp.server.stdio", "massgen_mcp.core.portable")
SHIM = """import builtins

_import = builtins.__import__


def _as_on_windows(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {{}}).get("__name__", "")
    if level == 0 and name.partition(".")[0] in {lacks!r} and importer not in {exempt!r}:
        raise ModuleNotFoundError(f"No module named {{name!r}} (as on Windows)", name=name)
    return _import(name, globals, locals, fromlist, level)


builtins.__import__ = _as_on_windows
"""


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[Path]:
    """Where the sleepers write their pids (tests/core/test_descendants.py); whatever survives a
    failed test is killed."""
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    escapees.kill(written_pids(folder))


@pytest.fixture
def windows_modules(tmp_path: Path) -> dict[str, str]:
    """The environment of a Python that cannot import :data:`WINDOWS_LACKS`; checked to be
    so before it is handed out."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM.format(lacks=WINDOWS_LACKS, exempt=EXEMPT))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    for name in WINDOWS_LACKS:
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr, name
    return env


# -- without the modules Windows lacks ----------------------------------------------------------

def test_every_module_imports_without_the_posix_only_modules(
        windows_modules: dict[str, str]) -> None:
    walk = ("import importlib, pkgutil, massgen_mcp\n"
            "for found in pkgutil.walk_packages(massgen_mcp.__path__, 'massgen_mcp.'):\n"
            "    importlib.import_module(found.name)\n")
    done = subprocess.run([sys.executable, "-c", walk], env=windows_modules,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_cli_runs_a_team_without_the_posix_only_modules(
        scripted: Scripted, windows_modules: dict[str, str], home: Path) -> None:
    server = scripted(agree)
    done = subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "run", "What is 6*7?", "--models",
         "openai/a,openai/b,openai/c", "--base-url", server.base_url],
        env=windows_modules | {"MASSGEN_HOME": str(home)}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Final: The answer from ")
    assert "finished: completed" in done.stderr and "Traceback" not in done.stderr


async def test_the_stdio_server_serves_without_the_posix_only_modules(
        windows_modules: dict[str, str], home: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=windows_modules | server_env(home) | {"PYTHONPATH": windows_modules["PYTHONPATH"]})
    raw = RawStdio(proc)
    try:
        hello = await raw.send("initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "platform-test", "version": "1"}})
        assert hello is not None and hello["result"]["serverInfo"]["name"] == "massgen"
        await raw.send("notifications/initialized", notify=True)
        listed = await raw.send("tools/list", {})
        assert listed is not None, "no reply to tools/list"
        names = {tool["name"] for tool in listed["result"]["tools"]}
        assert {"run_consensus", "get_status", "get_result"} <= names
    finally:
        proc.terminate()
        _, stderr = await proc.communicate()
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")


def test_a_coding_cli_call_runs_without_the_posix_only_modules(
        tmp_path: Path, windows_modules: dict[str, str]) -> None:
    script = tmp_path / "claude"
    script.write_text(f"#!{sys.executable}\nimport sys\n{ANSWER_PROBE}print({RESULT!r})\n")
    script.chmod(0o755)
    call = ("import asyncio\n"
            "from massgen_mcp.core.spec import AgentSpec\n"
            "from massgen_mcp.providers.cli.provider import CliProvider\n"
            "done = asyncio.run(CliProvider().complete(AgentSpec(id='c', model='cli/claude'), "
            "[{'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'q'}], "
            "tools=None, timeout_s=60))\n"
            "print(done.content)\n")
    done = subprocess.run(
        [sys.executable, "-c", call], capture_output=True, text=True, timeout=120,
        env=windows_modules | {"MASSGEN_CLAUDE_PATH": str(script),
                               "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "42" in done.stdout


# -- the macOS child cleanup, forced on Linux ---------------------------------------------------

@linux_only
async def test_a_cancelled_cli_call_leaves_nothing_on_the_macos_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleepers: Path) -> None:
    # No reaper: the CLI leads its own process group, which stop() kills; what left the
    # group (setsid, a daemon) is found by the call's marker.
    monkeypatch.setattr(children, "PLATFORM", "darwin")
    assert not children.tracked()
    stand_in_claude(tmp_path, monkeypatch, sleepers, "time.sleep(300)")
    call = asyncio.ensure_future(call_claude())
    pids = await until_written(sleepers)
    assert os.getpgid(pids["child"]) != os.getpgrp()  # in the CLI's group, not ours
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert survivors(pids) == {}


@linux_only
async def test_the_marker_sweep_kills_what_carries_it_and_nothing_else(
        tmp_path: Path) -> None:
    spawn = children.command([sys.executable, "-c", "import time; time.sleep(300)"],
                             dict(os.environ))
    marked = subprocess.Popen(spawn.argv, env=spawn.env, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             env=dict(os.environ) | {children.MARKER_ENV: "another-call"})
    try:
        await asyncio.to_thread(children.sweep, spawn.marker)
        assert marked.wait(10) == -signal.SIGKILL  # the reaper was killed with it
        assert other.poll() is None
    finally:
        for proc in (marked, other):
            proc.kill()
            proc.wait()


# -- install: where each host looks on macOS and Windows ----------------------------------------

APP_FILES = {"vscode": ("Code", "User", "mcp.json"),
             "claude-desktop": ("Claude", "claude_desktop_config.json")}
HOME_FILES = {"claude-code": (".claude.json",), "cursor": (".cursor", "mcp.json"),
              "codex": (".codex", "config.toml"), "gemini-cli": (".gemini", "settings.json")}


@pytest.mark.parametrize("platform", ["darwin", "win32"])
@pytest.mark.parametrize("host_id", list(HOSTS))
def test_install_writes_where_each_host_looks_on_macos_and_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_id: str,
        platform: Literal["darwin", "win32"]) -> None:
    home, appdata = tmp_path / "home", tmp_path / "home" / "AppData" / "Roaming"
    monkeypatch.setenv("APPDATA", str(appdata))
    apps = {"darwin": home / "Library" / "Application Support", "win32": appdata}[platform]
    expected = (apps.joinpath(*APP_FILES[host_id]) if host_id in APP_FILES
                else home.joinpath(*HOME_FILES[host_id]))
    done = install(host_id, scope="user", project=tmp_path, home=home, platform=platform)
    assert done.path == expected and expected.is_file()
    assert "massgen" in expected.read_text()


def test_install_on_windows_without_appdata_uses_the_roaming_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPDATA", raising=False)
    done = install("claude-desktop", scope="user", home=tmp_path, platform="win32",
                   dry_run=True)
    assert done.path == tmp_path / "AppData" / "Roaming" / "Claude" / "claude_desktop_config.json"


# -- a child that kills its reaper (issue 47, item 8) -------------------------------------------

KILL_REAPER = "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(300)"


@linux_only
async def test_a_cli_that_kills_its_reaper_frees_nothing_and_holds_no_pipe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleepers: Path) -> None:
    # The CLI starts the sleepers (one in its group, one after setsid, a double-fork daemon;
    # two hold its stdout), then SIGKILLs its parent, the reaper, which therefore kills
    # nothing. The call still ends at once (not at its 60 s timeout), and nothing is left.
    stand_in_claude(tmp_path, monkeypatch, sleepers,
                    f"import os, signal\n{KILL_REAPER}")
    with pytest.raises(ProviderError, match=r"exit status -9"):
        await call_claude()
    pids = written_pids(sleepers)
    assert set(pids) == set(escapees.KINDS)
    assert survivors(pids, within_s=0) == {}  # stop() returned: they are gone already


@linux_only
async def test_an_mcp_server_that_kills_its_reaper_leaves_no_descendant(
        scripted: Scripted, sleepers: Path) -> None:
    result = await run(team(scripted(agree).base_url, sleepers, "--kill-parent"))
    assert result["status"] == "completed"
    pids = written_pids(sleepers)
    assert set(pids) == set(escapees.KINDS)
    assert survivors(pids) == {}


# -- the pool's fencing needs file locks --------------------------------------------------------

def test_locks_work_in_a_local_folder_and_a_lock_excludes_another_holder(
        tmp_path: Path) -> None:
    assert portable.locks_work(tmp_path) is None
    path = tmp_path / "lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT)
    second = os.open(path, os.O_RDWR)
    try:
        assert portable.lock(first, wait=False)
        assert not portable.lock(second, wait=False)  # another open file: another holder
        portable.unlock(first)
        assert portable.lock(second, wait=False)
    finally:
        os.close(first)
        os.close(second)


def test_a_pool_whose_home_cannot_be_fenced_refuses_to_start_in_one_line(
        tmp_path: Path) -> None:
    # A home the pool cannot lock files in (here: one that cannot even be made, as a file
    # system without locks cannot be mounted in a test) stops the worker before it takes a run.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "--home", str(blocker / "home"), "worker",
         "--redis", "redis://127.0.0.1:1/0"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"the pool cannot fence its records on {sys.platform}" in done.stderr
    assert "run without --redis" in done.stderr


def test_asking_whether_a_records_pid_is_alive_never_signals_it_on_windows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On Windows ``os.kill(pid, 0)`` is TerminateProcess: the start-up sweep of records left
    ``running`` asked so of each record's pid, and a record is a project file (a cloned
    repository can plant one naming any pid). There the question goes to psutil; 0 and -1,
    which name groups of processes, are no process."""
    import psutil  # loaded before the platform is changed below

    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        def no_signal(pid: int, signum: int) -> None:
            raise AssertionError(f"os.kill({pid}, {signum}) on Windows ends that process")

        with monkeypatch.context() as windows:
            windows.setattr(sys, "platform", "win32")
            windows.setattr(os, "kill", no_signal)
            # psutil's Windows build opens the process; its Linux build here signals it
            windows.setattr(psutil, "pid_exists", lambda pid: pid == sleeper.pid)
            assert portable.pid_alive(sleeper.pid) and not portable.pid_alive(sleeper.pid + 1)
            assert not portable.pid_alive(0) and not portable.pid_alive(-1)
        assert sleeper.poll() is None  # asked about, still running
        assert portable.pid_alive(sleeper.pid) and not portable.pid_alive(-1)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not portable.pid_alive(sleeper.pid)


# "darwin" on Linux only: on Windows pid_alive would then ask with os.kill, TerminateProcess
@pytest.mark.parametrize("platform", [sys.platform, *(["darwin"] if sys.platform == "linux"
                                                     else [])])
def test_a_process_is_told_apart_from_a_later_one_with_its_pid(
        platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot's builder is named by its pid and start (tools/snapshot.py): the start is
    read the same way each time, and a pid whose start differs, or that has ended, is not
    the process recorded. ``darwin`` runs the psutil path that macOS and Windows take."""
    monkeypatch.setattr(sys, "platform", platform)
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        started = portable.process_started(sleeper.pid)
        assert started is not None and started == portable.process_started(sleeper.pid)
        assert portable.still_running(sleeper.pid, started)
        assert portable.still_running(sleeper.pid, None)
        assert not portable.still_running(sleeper.pid, started + 1)  # its pid, used again
    finally:
        sleeper.kill()
        sleeper.wait()
    assert portable.process_started(sleeper.pid) is None
    assert not portable.still_running(sleeper.pid, started)
    assert portable.process_started(0) is None and portable.process_started(-1) is None
