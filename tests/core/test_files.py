"""The one safe write and the one safe read (core/files.py, issue 50 step 3): a file is
replaced through no link, at its temporary name or at its own; a planted link, FIFO or
oversized file is refused by the read; a file rewritten in place under a lock (a fence)
refuses a link too."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from massgen_mcp.core.files import (
    UnsafeFileError,
    create_file,
    open_own,
    read_bytes_safely,
    replace_file,
)
from massgen_mcp.pool import fencing

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="links and FIFOs need POSIX")


@posix_only
def test_the_temporary_file_is_not_written_through_a_planted_link(tmp_path: Path) -> None:
    # The temporary name a writer used to pick (dot, name, pid, .tmp) is guessable: a link
    # planted there, to a file of the user's, had the record written into that file.
    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    folder = tmp_path / "record"
    folder.mkdir()
    (folder / f".status.json.{os.getpid()}.tmp").symlink_to(victim)
    replace_file(folder / "status.json", '{"state": "done"}')
    assert victim.read_text() == "mine\n"
    assert (folder / "status.json").read_text() == '{"state": "done"}'
    assert not (folder / "status.json").is_symlink()


@posix_only
def test_a_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    target = tmp_path / "report.html"
    target.symlink_to(victim)
    replace_file(target, b"<html></html>", mode=0o600)
    assert victim.read_text() == "mine\n"
    assert not target.is_symlink() and target.read_bytes() == b"<html></html>"
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bashrc", "report.html"]


@posix_only
def test_a_file_made_new_is_made_once_and_never_through_a_link(tmp_path: Path) -> None:
    """create_file: the first writer wins; a second, or a link (even one to nowhere) at the
    name, gets FileExistsError and changes nothing; no temporary file is left behind."""
    target = tmp_path / "pool-massgen.protected"
    create_file(target, "first\n", mode=0o600)
    with pytest.raises(FileExistsError):
        create_file(target, "second\n")
    assert target.read_text() == "first\n" and target.stat().st_mode & 0o777 == 0o600
    assert target.stat().st_nlink == 1
    dangling = tmp_path / "planted"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        create_file(dangling, "x")
    assert not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["planted", "pool-massgen.protected"]


@posix_only
def test_a_linked_folder_is_refused_when_the_caller_says_so(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    with pytest.raises(OSError):
        replace_file(tmp_path / "linked" / "report.html", "x", folder_may_be_link=False)
    assert list(real.iterdir()) == []
    replace_file(tmp_path / "linked" / "config.json", "{}", durable=True)  # the default: fine
    assert (real / "config.json").read_text() == "{}"


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()  # a folder at the target's name: the rename fails
    with pytest.raises(OSError):
        replace_file(tmp_path / "taken", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]
    assert list((tmp_path / "taken").iterdir()) == []


@posix_only
def test_the_read_refuses_a_link_a_fifo_a_hard_link_and_an_oversized_file(
        tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("KEY")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")  # its open would wait for a writer forever
    os.link(secret, tmp_path / "other-name")
    (tmp_path / "big").write_bytes(b"x" * 101)
    (tmp_path / "small").write_bytes(b"x" * 100)
    for name, reason in [("link", "link"), ("fifo", "not_regular"),
                         ("other-name", "hard_links"), ("big", "too_big")]:
        with pytest.raises(UnsafeFileError) as refused:
            read_bytes_safely(tmp_path / name, 100)
        assert refused.value.reason == reason, name
    assert read_bytes_safely(tmp_path / "small", 100) == b"x" * 100
    with pytest.raises(FileNotFoundError):
        read_bytes_safely(tmp_path / "missing", 100)


@posix_only
def test_a_file_rewritten_in_place_refuses_a_link_and_creates_nothing_through_it(
        tmp_path: Path) -> None:
    missing = tmp_path / "elsewhere" / "new"
    missing.parent.mkdir()
    (tmp_path / "lock").symlink_to(missing)
    with pytest.raises(UnsafeFileError, match="lock is a link"):
        open_own(tmp_path / "lock")
    assert not missing.exists()
    fd = open_own(tmp_path / "state", mode=0o600, max_bytes=10, mine=True)
    os.close(fd)
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o600


@posix_only
def test_a_fence_planted_as_a_link_is_refused_not_written_through(tmp_path: Path) -> None:
    # A repository can carry a session folder whose ``fence`` links to a file of the user's:
    # taking a claim wrote the token into it, and a write of the record locked that file.
    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    folder = tmp_path / "session"
    folder.mkdir()
    (folder / fencing.FENCE_FILE).symlink_to(victim)
    with pytest.raises(OSError, match="fence is a link"):
        fencing.take(folder, 7)
    with pytest.raises(OSError, match="fence is a link"):
        fencing.Fence(folder, 7)
    assert victim.read_text() == "mine\n"
    (folder / fencing.FENCE_FILE).unlink()
    os.mkfifo(folder / fencing.FENCE_FILE)
    with pytest.raises(OSError, match="fence is not a regular file"):
        fencing.take(folder, 7)
    (folder / fencing.FENCE_FILE).unlink()
    assert fencing.take(folder, 7) == 7 and fencing.take(folder, 3) == 8
    fence = fencing.Fence(folder, 8)
    try:
        with fence.hold():
            pass
    finally:
        fence.close()


@posix_only
def test_a_run_lock_planted_as_a_link_or_fifo_is_not_taken(tmp_path: Path) -> None:
    from massgen_mcp.records.liveness import LOCK_FILE, RunLock

    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    folder = tmp_path / "session"
    folder.mkdir()
    (folder / LOCK_FILE).symlink_to(victim)
    assert RunLock.take(folder) is None and victim.read_text() == "mine\n"
    (folder / LOCK_FILE).unlink()
    os.mkfifo(folder / LOCK_FILE)
    assert RunLock.take(folder) is None
    (folder / LOCK_FILE).unlink()
    lock = RunLock.take(folder)
    assert lock is not None
    lock.release()


@posix_only
def test_an_append_log_is_not_appended_through_a_planted_link(tmp_path: Path) -> None:
    from massgen_mcp.core.files import open_append
    from massgen_mcp.providers.cli.provider import _append_log

    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    (tmp_path / "cli.log").symlink_to(victim)
    with pytest.raises(UnsafeFileError):
        open_append(tmp_path / "cli.log")
    _append_log(tmp_path / "cli.log", "agent_a", 1, "stderr of a coding CLI")  # never raises
    assert victim.read_text() == "mine\n"
    fd = open_append(tmp_path / "events.jsonl")
    os.write(fd, b"one\n")
    os.close(fd)
    fd = open_append(tmp_path / "events.jsonl")
    os.write(fd, b"two\n")
    os.close(fd)
    assert (tmp_path / "events.jsonl").read_text() == "one\ntwo\n"


def _unblock_if_waiting(fifo: Path, reader: threading.Thread, within_s: float) -> bool:
    """Whether ``reader`` finished within ``within_s``; if not, open ``fifo`` for writing so
    that an open waiting on it returns and the test can fail instead of hanging."""
    reader.join(within_s)
    if not reader.is_alive():
        return True
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join()
    return False


@posix_only
def test_a_config_swapped_for_a_fifo_is_refused_in_one_line_not_waited_on(
        tmp_path: Path) -> None:
    # N12: a config checked with is_file() and opened after it: swapped for a FIFO in
    # between, the open waited for a writer for ever (the default team's run hung, and the
    # server could not exit at the end of its input). The read itself must not wait.
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.team.massgen_yaml import read_config_file

    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    got: list[BaseException] = []

    def read() -> None:
        try:
            read_config_file(fifo)
        except BaseException as exc:  # what the reader raised, checked below
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert _unblock_if_waiting(fifo, reader, 20), "the config's open waited on a FIFO"
    assert len(got) == 1 and isinstance(got[0], ConfigError)
    assert str(got[0]) == (f"config file {str(fifo)!r} is not a regular file; give the path "
                           "of a YAML file")


@posix_only
def test_a_project_config_that_is_a_fifo_is_refused_for_the_default_team(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default team's look-up reads whatever is at .massgen/config.yaml, rather than
    # checking the name first (the moment in which it can become a FIFO): one line, no wait.
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.team.discover import configured_team

    monkeypatch.delenv("MASSGEN_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".massgen").mkdir()
    os.mkfifo(tmp_path / ".massgen" / "config.yaml")
    with pytest.raises(ConfigError, match=r"config\.yaml' is not a regular file"):
        configured_team()


@posix_only
def test_a_linked_config_is_still_read(tmp_path: Path) -> None:
    # People keep configs in dotfiles repositories: a link to a regular file is followed.
    from massgen_mcp.team.safe_yaml import read_config_text

    real = tmp_path / "dotfiles.yaml"
    real.write_text("agents: []\n")
    (tmp_path / "config.yaml").symlink_to(real)
    os.link(real, tmp_path / "hard.yaml")
    assert read_config_text(tmp_path / "config.yaml") == "agents: []\n"
    assert read_config_text(tmp_path / "hard.yaml") == "agents: []\n"


@pytest.mark.skipif(sys.platform == "win32", reason="a link takes developer mode there")
def test_the_records_folder_ignores_itself_but_never_through_a_link(tmp_path: Path) -> None:
    """Its ``.gitignore`` is written once, when nothing is at that name: a project's own is
    kept, and a planted link is not written through."""
    from massgen_mcp.core.files import RECORDS_GITIGNORE, ignore_for_git

    home = tmp_path / ".massgen"
    home.mkdir()
    ignore_for_git(home)
    assert (home / ".gitignore").read_text() == RECORDS_GITIGNORE
    assert RECORDS_GITIGNORE.splitlines()[-2:] == ["*", "!config.yaml"]
    (home / ".gitignore").write_text("sessions/\n")  # the project's own
    ignore_for_git(home)
    assert (home / ".gitignore").read_text() == "sessions/\n"
    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    (home / ".gitignore").unlink()
    (home / ".gitignore").symlink_to(victim)
    ignore_for_git(home)
    assert victim.read_text() == "mine\n" and (home / ".gitignore").is_symlink()
