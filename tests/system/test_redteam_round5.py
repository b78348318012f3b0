"""Red team, round 5 (issue 65): the pool token's strength (R5) and the rows the first pass
could not reach, each attacked with the input an attacker controls and held here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.settings import MAKE_SECRET, secret_weakness
from massgen_mcp.review.changes import collect
from massgen_mcp.review.diff import split_diff
from massgen_mcp.testing.scripted import ChatRequest, Reply, converge, raw, tool_calls
from massgen_mcp.tools.snapshot import snapshot
from tests.helpers import Scripted
from tests.review.conftest import git
from tests.review.conftest import repo as repo  # the fixture: a repository with changes
from tests.servers import TOKEN, free_port, server_env
from tests.system.test_redteam_round4b import _planted_program

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="shell-script plants")

WEAK_TOKEN = "abc"
STRONG = "Vq3x-9LmZr_T8wKc2YhP0dNf"  # 24 characters of the url-safe alphabet


def _serve(home: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(free_port()),
         *extra], env=server_env(home, **env), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("token", [WEAK_TOKEN, "a" * 40, "1234567890123456"])
def test_a_weak_token_is_refused_at_start_in_one_line(home: Path, token: str) -> None:
    """R5: the token's PBKDF2 fingerprint sits in the pool's Redis, so a short or repetitive
    token falls to an offline search: serve refuses it, naming the variable and how to make
    a good one, and never prints the token."""
    proc = _serve(home, MASSGEN_MCP_TOKEN=token)
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("massgen-mcp: MASSGEN_MCP_TOKEN is too "), proc.stderr
    assert MAKE_SECRET in line
    assert token not in proc.stderr


def test_a_pool_front_ends_weak_tasks_key_is_refused(home: Path) -> None:
    """R5, the same rule for the pool's other secret: the tasks key's fingerprint (and the
    ciphertexts it makes) sit in Redis too. Refused before Redis is reached."""
    proc = _serve(home, "--redis", f"redis://127.0.0.1:{free_port()}/0",
                  MASSGEN_MCP_TOKEN=TOKEN, FASTMCP_TASKS_ENCRYPTION_KEY="key")
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert "FASTMCP_TASKS_ENCRYPTION_KEY is too short (3 characters" in line, proc.stderr
    assert "'key'" not in proc.stderr


def test_doctor_says_a_weak_token_will_be_refused(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.cli.main import main

    monkeypatch.setenv("MASSGEN_MCP_TOKEN", WEAK_TOKEN)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert ("HTTP token:    REFUSED: MASSGEN_MCP_TOKEN is too short (3 characters; at least "
            "16)") in out
    monkeypatch.setenv("MASSGEN_MCP_TOKEN", STRONG)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "HTTP token:    set" in out and STRONG not in out


def test_generated_secrets_pass_and_patterns_do_not() -> None:
    """What the rule accepts: what the docs tell people to run (and the suite's tokens)."""
    import secrets

    for _ in range(200):
        assert secret_weakness(secrets.token_urlsafe(32)) is None
        assert secret_weakness(secrets.token_hex(16)) is None
        assert secret_weakness(secrets.token_hex(32)) is None
    assert secret_weakness(TOKEN) is None and secret_weakness(STRONG) is None
    for weak in ("abc", "x" * 64, "ab" * 20, "0" * 15 + "1", "2024202420242024"):
        assert secret_weakness(weak) is not None, weak


# -- git-config plants: the review's git runs no program a repository's config names -------

async def _review_every_way(repo: Path, cwd: Path | None = None) -> None:
    """The working tree, one commit, a base and both snapshots: every git call a review
    makes (a refusal in one line counts as holding too)."""
    for given in ({}, {"commit": "HEAD"}, {"base": "HEAD~1"}):
        try:
            await collect(cwd or repo, **given)  # type: ignore[arg-type]
        except ConfigError as exc:
            assert "\n" not in str(exc)
    for commit in (None, "HEAD"):
        async with snapshot(repo, commit):
            pass


def _commit_attributes(repo: Path, text: str) -> None:
    (repo / ".gitattributes").write_text(text)
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    os.utime(repo / "src" / "app.py", (1, 1))  # stat data changed: git diff cleans it


@posix_only
async def test_worktree_config_and_conditional_includes_run_nothing(repo: Path,
                                                                    tmp_path: Path) -> None:
    """Config a plain ``git diff`` obeys, from the two places beside ``.git/config``: the
    worktree's own (``extensions.worktreeConfig``) and an ``includeIf`` (plain git ran
    every one of these programs)."""
    names = ("wtclean", "wtfsmonitor", "wttextconv", "incprocess")
    scripts = {name: _planted_program(tmp_path, name)[1] for name in names}
    _commit_attributes(repo, "*.py filter=wt diff=wtd\n*.md filter=inc\n")
    git(repo, "config", "extensions.worktreeConfig", "true")
    git(repo, "config", "--worktree", "filter.wt.clean", scripts["wtclean"])
    git(repo, "config", "--worktree", "core.fsmonitor", scripts["wtfsmonitor"])
    git(repo, "config", "--worktree", "diff.wtd.textconv", scripts["wttextconv"])
    included = tmp_path / "included.cfg"
    included.write_text(f'[filter "inc"]\n\tprocess = {scripts["incprocess"]}\n')
    git(repo, "config", "includeIf.onbranch:main.path", str(included))
    (repo / "README.md").write_text("# shop, changed\n")
    git(repo, "commit", "-qam", "second")
    (repo / "src" / "app.py").write_text("changed again\n")
    for mark in (tmp_path / "ran").iterdir():  # what the test's own git commit ran
        mark.unlink()
    await _review_every_way(repo)
    assert not list((tmp_path / "ran").iterdir())


@posix_only
async def test_a_linked_worktrees_own_config_runs_nothing(repo: Path, tmp_path: Path) -> None:
    ran, script = _planted_program(tmp_path, "linkedclean")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked), "-b", "side")
    _commit_attributes(linked, "*.py filter=lw diff=lw\n")
    git(linked, "config", "extensions.worktreeConfig", "true")
    git(linked, "config", "--worktree", "filter.lw.clean", script)
    git(linked, "config", "--worktree", "diff.lw.textconv", script)
    (linked / "src" / "app.py").write_text("changed in the linked worktree\n")
    await _review_every_way(linked)
    assert not (ran / "linkedclean").exists()


@posix_only
async def test_a_submodules_config_runs_nothing_even_asked_to_diff_it(
        repo: Path, tmp_path: Path) -> None:
    """``diff.submodule=diff`` and ``submodule.recurse`` in the repository's config ask git
    to run a diff inside the submodule, whose config names a filter process, a textconv, a
    diff command and an fsmonitor (plain git ran three of them)."""
    ran = tmp_path / "ran"
    source = tmp_path / "vendor-source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    (source / ".gitattributes").write_text("*.txt filter=sf diff=sd\n")
    (source / "s.txt").write_text("s\n")
    git(source, "add", ".")
    git(source, "commit", "-qm", "s")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source),
        "vendor")
    git(repo, "commit", "-qam", "a submodule")
    vendor = repo / "vendor"
    for key, name in (("filter.sf.process", "subprocess"), ("diff.sd.textconv", "subconv"),
                      ("diff.sd.command", "subcommand"), ("core.fsmonitor", "subfsmonitor")):
        git(vendor, "config", key, _planted_program(tmp_path, name)[1])
    git(repo, "config", "diff.submodule", "diff")
    git(repo, "config", "submodule.recurse", "true")
    (vendor / "s.txt").write_text("changed\n")
    os.utime(vendor / "s.txt", (1, 1))
    await _review_every_way(repo)
    assert not list(ran.iterdir())


# -- huge and binary files, and names with newlines or terminal escapes --------------------

ODD_NAMES = ("src/new\nline.py", "src/\x1b]0;PWNED\x07title.py", "src/\x1b[2J\x1b[Hclear.py",
             "src/\u202eyp.txt", "src/tab\there.py", 'src/quo"te.py', "src/back\\slash.py")


@posix_only
async def test_odd_file_names_stay_one_quoted_header_line_every_way(repo: Path) -> None:
    """A named file (``paths``) had its header written with the raw name: a newline in it
    made a line of its own in the diff the model reads, an escape sequence went raw. Now it
    is quoted as git quotes it, and the sections read back to the same names."""
    for name in ODD_NAMES:
        (repo / name).write_text("print(1)\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "odd names")
    for name in ODD_NAMES:
        (repo / name).write_text("print(2)\n")
    for given in ({}, {"commit": "HEAD"}, {"paths": ["src"]}):
        changes = await collect(repo, **given)
        assert set(ODD_NAMES) <= set(changes.files), given
        assert not any(c in changes.diff for c in "\x1b\x07\u202e"), given
        for line in changes.diff.splitlines():
            assert line[:1] in ("+", "-", " ", "@", "d", "n", "i"), (given, line)
        read_back = split_diff(changes.diff.encode(), "the diff")
        assert {s.path for s in read_back} == set(changes.files), given


async def test_a_huge_change_is_refused_in_one_line_and_binary_is_left_out(
        repo: Path) -> None:
    """A 9 MB text change: refused, never cut, in one line, with git stopped at the cap; a
    binary file beside a text change is left out and named."""
    (repo / "src" / "huge.txt").write_text("a line of a generated file\n" * 350_000)
    git(repo, "add", "-N", "src/huge.txt")
    with pytest.raises(ConfigError) as caught:
        await collect(repo)
    assert "more than" in str(caught.value) and "\n" not in str(caught.value)
    git(repo, "rm", "-q", "--cached", "src/huge.txt")
    (repo / "src" / "huge.txt").unlink()
    (repo / "src" / "blob.bin").write_bytes(bytes(range(256)) * 4000)
    git(repo, "add", "-N", "src/blob.bin")
    changes = await collect(repo)
    assert "src/blob.bin" not in changes.files
    assert any(note.startswith("src/blob.bin: binary") for note in changes.left_out)


# -- depth: auto with members whose every reply is malformed JSON -------------------------

MALFORMED: dict[str, Callable[[ChatRequest], Reply]] = {
    "a body that is not JSON": lambda req: raw('{"choices": [ {"message": '),
    "tool arguments that are not JSON": lambda req: tool_calls(
        ("new_answer", '{"content": "x'), ("vote", "{oops")),
    "JSON nested 100,000 deep": lambda req: tool_calls(("new_answer", "[" * 100_000)),
}


@pytest.mark.parametrize("malformed", list(MALFORMED))
@pytest.mark.parametrize("bad", ["ab", "abc"])
def test_depth_auto_ends_when_members_answer_malformed_json_every_time(
        scripted: Scripted, home: Path, malformed: str, bad: str) -> None:
    """The opening pair (or the whole team) replies malformed JSON at every turn: each such
    member is retried a bounded number of times and dropped, the reserve is called in, and
    the run ends with a final status: completed by the rest, or failed when none is left."""
    def policy(req: ChatRequest) -> Reply:
        return MALFORMED[malformed](req) if req.model in bad else converge(req)

    server = scripted(policy)
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "abc")
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "run", "What is 6*7?",
                           "--models", models, "--depth", "auto", "--json", "--quiet"],
                          capture_output=True, text=True, env=server_env(home), timeout=300)
    result = json.loads(done.stdout)
    if bad == "abc":
        assert (result["status"], result["finish_reason"]) == ("failed", "all_agents_failed")
    else:
        assert result["status"] == "completed" and done.returncode == 7  # agents dropped
    calls = server.calls_by_model()
    assert all(calls[m] <= 4 for m in bad), calls  # one call and at most three retries


# -- terminal escapes on stderr -----------------------------------------------------------

PWNED = "\x1b]0;PWNED\x07\x1b[2J"


def test_an_mcp_servers_stderr_reaches_ours_escaped_and_redacted(
        scripted: Scripted, home: Path, tmp_path: Path) -> None:
    """A stdio MCP server inherited our stderr: what it printed (a page it fetched, a key its
    env holds) reached the terminal raw, escape sequences obeyed and keys unmasked. Its lines
    now pass through a relay that shows control characters as escapes and redacts."""
    key = "sk-proj-" + "Q7" * 20
    server_script = tmp_path / "noisy_server.py"
    server_script.write_text(
        "import os, sys\n"
        f"sys.stderr.write({PWNED!r} + ' fetched; key ' + os.environ['NOISY_KEY'] + '\\n')\n"
        "sys.stderr.write('x' * 100000 + '\\n')\n"  # a line over the relay's cap
        "sys.stderr.flush()\n")
    server = scripted(converge)
    config = tmp_path / "team.yaml"
    config.write_text(json.dumps({"agents": [
        {"id": m, "backend": {"type": "chatcompletion", "model": m, "base_url": server.base_url,
                              "mcp_servers": {"noisy": {
                                  "type": "stdio", "command": sys.executable,
                                  "args": [str(server_script)],
                                  "env": {"NOISY_KEY": "${NOISY_KEY}"}}}}}
        for m in "ab"]}))
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "run", "What is 6*7?",
                           "--config", str(config)], capture_output=True, text=True,
                          env=server_env(home, NOISY_KEY=key), timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\\x1b]0;PWNED\\x07\\x1b[2J fetched; key " in done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert key not in done.stderr
    assert max(len(line) for line in done.stderr.splitlines()) < 10_000


def test_a_log_line_quoting_hostile_text_is_terminal_safe() -> None:
    """Every log handler's formatter (stderr, server.log) escapes control characters as it
    redacts: a log line may quote a file name, a model's or a server's words."""
    import logging

    from massgen_mcp.core.secrets import RedactingFormatter

    record = logging.LogRecord("massgen_mcp.x", logging.WARNING, __file__, 1,
                               "MCP server %s did not start: %s", ("h", PWNED + "refused"),
                               None)
    line = RedactingFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert line == "WARNING massgen_mcp.x: MCP server h did not start: " \
                   "\\x1b]0;PWNED\\x07\\x1b[2Jrefused"


# -- files still written by path ------------------------------------------------------------

@posix_only
def test_links_planted_at_a_resumed_runs_lock_report_and_inbox_redirect_no_write(
        scripted: Scripted, home: Path, tmp_path: Path) -> None:
    """A session folder someone else wrote (a cloned repository's ``.massgen``) with links at
    ``running.lock``, ``report.html``, ``final.md`` and the ``inbox`` folder: resuming it and
    writing its report leave the links' targets as they were."""
    server = scripted(converge)
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "ab")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "massgen_mcp", *args], capture_output=True,
                              text=True, env=server_env(home), timeout=120)

    ran = cli("run", "What is 6*7?", "--models", models, "--json", "--quiet")
    session_id = json.loads(ran.stdout)["session_id"]
    folder = home / "sessions" / session_id
    status = json.loads((folder / "status.json").read_text())
    (folder / "status.json").write_text(json.dumps({**status, "status": "interrupted"}))
    (folder / "result.json").unlink()
    target, target_folder = tmp_path / "bashrc", tmp_path / "elsewhere"
    target.write_text("untouched\n")
    target_folder.mkdir()
    for name in ("running.lock", "report.html", "final.md"):
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)
    (folder / "inbox").symlink_to(target_folder, target_is_directory=True)
    resumed = cli("resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert cli("show", session_id, "--html").returncode == 0
    assert target.read_text() == "untouched\n" and not list(target_folder.iterdir())


@posix_only
def test_a_reply_is_never_written_through_an_inbox_swapped_for_a_link(tmp_path: Path) -> None:
    """The running process answers a note it took from a real inbox; swapped for a link
    meanwhile (by whoever writes the session folder), the reply went where the link led."""
    from massgen_mcp.core.errors import SteerRefusedError
    from massgen_mcp.executors import inbox
    from massgen_mcp.executors.notes import NoteReply

    folder, elsewhere = tmp_path / "session", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / inbox.INBOX).symlink_to(elsewhere, target_is_directory=True)
    inbox.answer(folder, "note-1", NoteReply(ok=True))
    with pytest.raises(SteerRefusedError):  # a link there when it looks: refused
        inbox.post(folder, "a note")
    assert not list(elsewhere.iterdir())


# -- the sweep signalling by pid ------------------------------------------------------------

NEXT_PID = Path("/proc/sys/kernel/ns_last_pid")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and pidfds")
def test_a_swept_process_whose_pid_is_used_again_is_not_the_one_killed() -> None:
    """The sweep stops each marked process it finds and kills it at the end. Killed by
    something else meanwhile, its pid was free, and the process that got it was killed in its
    place: the sweep signalled a number. It signals a pidfd now, taken before the process was
    read. The pid is handed on by setting the next pid (root only)."""
    import secrets

    from massgen_mcp.core import children

    if not os.access(NEXT_PID, os.W_OK):
        pytest.skip("setting the next pid needs root")
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    marker = secrets.token_hex(8)
    marked = subprocess.Popen(sleeper, env={**os.environ, children.MARKER_ENV: marker})
    seen: set[tuple[int, float]] = set()
    stopped: dict[int, Callable[[], None]] = {}
    children._proc_scan(marker, seen, stopped)  # the sweep's scan: it stops what it finds
    assert list(stopped) == [marked.pid]
    marked.kill()  # something else ends it, and its pid is free
    marked.wait()
    for _ in range(50):  # another process may take the pid first: try again
        NEXT_PID.write_text(str(marked.pid - 1))
        other = subprocess.Popen(sleeper)
        if other.pid == marked.pid:
            break
        other.kill()
        other.wait()
    else:
        pytest.skip("the pid went to another process every time")
    stopped[marked.pid]()  # the sweep's kill, at its end
    other.terminate()
    assert other.wait() == -15  # ended by our SIGTERM, not by the sweep's SIGKILL
