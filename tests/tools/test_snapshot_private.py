"""Where the review's snapshot lives (red team, round 5, R1): it was ``massgen-review-<hex>``
straight in the shared temporary folder with files ``0444`` and folders ``0555``, so another
local user could read a private repository's source while a review ran, and a builder killed
with ``kill -9`` left it there for ever. Now it is its user's alone, under a private folder
that a planted one cannot stand in for, and the next build removes what a dead builder left.

Each test points the temporary folder at its own (``tempfile.tempdir``; ``TMPDIR`` for a
child process), so the real ``/tmp`` is not touched."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.core import portable
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.tools import snapshot as snapshots
from massgen_mcp.tools.snapshot import snapshot
from tests.review.conftest import APP_AFTER
from tests.review.conftest import repo as repo  # the fixture: a repository with changes

POSIX_MODES = pytest.mark.skipif(os.name == "nt", reason="Windows has no mode bits to check: "
                                 "the folder is private by the ACL of the user's own temp")

# A child that builds a snapshot, prints where, and removes it when its stdin closes.
BUILDER = """\
import asyncio, sys
from pathlib import Path
from massgen_mcp.tools import snapshot
built = asyncio.run(snapshot.build(Path(sys.argv[1])))
print(built.path, flush=True)
sys.stdin.read()
snapshot.remove(built.path)
"""


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "temp"
    folder.mkdir(mode=0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def builder(repo: Path, temp: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Another process that has built a snapshot of ``repo`` in ``temp`` and is holding it."""
    env = {**os.environ, "TMPDIR": str(temp), "TEMP": str(temp), "TMP": str(temp)}
    child = subprocess.Popen([sys.executable, "-c", BUILDER, str(repo)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def its_copy(child: subprocess.Popen[bytes]) -> Path:
    assert child.stdout is not None
    line = child.stdout.readline().decode().strip()
    assert line, f"the builder printed nothing (exit status {child.poll()})"
    return Path(line)


@POSIX_MODES
async def test_the_copy_is_its_users_alone_whatever_the_umask(repo: Path, temp: Path) -> None:
    """Under a umask of 022 no folder between the shared temporary folder and the copy, and
    nothing in the copy, is open to group or others: the copy is in a private (0700) folder
    of the user's, its files are 0400 and its folders 0500."""
    umask = os.umask(0o022)
    try:
        async with snapshot(repo) as built:
            above = [folder for folder in built.path.parents if temp in folder.parents]
            inside = list(built.path.rglob("*"))
            modes = {path: os.lstat(path).st_mode for path in [built.path, *above, *inside]}
    finally:
        os.umask(umask)
    assert above, "the copy is straight in the shared temporary folder"
    assert {path: oct(mode & 0o777) for path, mode in modes.items() if mode & 0o077} == {}
    assert above[-1] == temp / f"massgen-mcp-{os.getuid()}"
    assert stat.S_IMODE(modes[above[-1]]) == 0o700
    assert {stat.S_IMODE(mode) for path, mode in modes.items() if stat.S_ISREG(mode)} == {0o400}
    assert {stat.S_IMODE(modes[path]) for path in [built.path, *inside]
            if stat.S_ISDIR(modes[path])} == {0o500}


async def test_a_copy_whose_builder_was_killed_is_removed_by_the_next_build(
        repo: Path, temp: Path, builder: subprocess.Popen[bytes]) -> None:
    orphan = its_copy(builder)
    assert (orphan / "src" / "app.py").read_text() == APP_AFTER
    builder.send_signal(portable.KILL)  # SIGKILL: it removes nothing
    builder.wait()
    assert orphan.is_dir()
    async with snapshot(repo) as built:
        assert not orphan.exists()
        assert not orphan.parent.exists() or orphan.parent == temp  # its builder's folder too
        assert (built.path / "src" / "app.py").read_text() == APP_AFTER


async def test_a_live_builders_copy_is_left_alone(repo: Path, temp: Path,
                                                  builder: subprocess.Popen[bytes]) -> None:
    theirs = its_copy(builder)
    async with snapshot(repo) as built:
        assert built.path.parent != theirs.parent  # each builder has its own folder
        assert (theirs / "src" / "app.py").read_text() == APP_AFTER
    assert (theirs / "src" / "app.py").read_text() == APP_AFTER  # removing ours left it
    assert builder.stdin is not None
    builder.stdin.close()  # it removes its own
    assert builder.wait() == 0
    assert not theirs.exists() and not theirs.parent.exists()


async def test_a_copy_under_a_pid_now_anothers_is_removed(repo: Path, temp: Path) -> None:
    """Pids are used again: a builder's folder names its start too, and one whose pid now
    runs a process that started at another time (here: this test's own pid) is swept; this
    process's own folder, and what is not a builder's, are left alone."""
    pid = os.getpid()
    started = portable.process_started(pid)
    if started is None:
        pytest.skip("this platform tells no start time here")
    parent = snapshots.private_parent()
    reused = parent / f"{pid}-{started + 1}" / "massgen-review-0123456789ab"
    (reused / "src").mkdir(parents=True)
    (reused / "src" / "app.py").write_text("left by a process long gone\n")
    other = parent / "notes"
    other.mkdir()
    async with snapshot(repo) as built:
        assert built.path.parent == parent / f"{pid}-{started}"
        assert not reused.parent.exists()
        assert other.is_dir()


@POSIX_MODES
@pytest.mark.parametrize("plant", ["a link", "open to others", "another user's",
                                   "in a folder others may write"])
async def test_a_planted_private_folder_is_not_used(repo: Path, temp: Path, tmp_path: Path,
                                                     plant: str) -> None:
    """Another local user makes ``massgen-mcp-<uid>`` first (the name can be guessed), to
    read the copies put in it: the build is refused, in one line naming why, and nothing of
    the repository is written."""
    parent = temp / f"massgen-mcp-{os.getuid()}"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    if plant == "a link":
        parent.symlink_to(theirs)
        why = "is a link"
    elif plant == "open to others":
        parent.mkdir()
        os.chmod(parent, 0o755)
        why = "chmod 700"
    elif plant == "another user's":
        if os.geteuid() != 0:
            pytest.skip("only root can give a folder to another user")
        parent.mkdir(mode=0o700)
        os.chown(parent, 65534, 65534)
        why = "belongs to another user"
    else:  # anyone may rename the private folder away and put theirs in its place
        os.chmod(temp, 0o777)
        why = "not sticky"
    with pytest.raises(ConfigError, match=why) as refused:
        await snapshots.build(repo)
    assert "\n" not in str(refused.value)
    assert list(theirs.iterdir()) == []
    assert not parent.is_dir() or list(parent.iterdir()) == []
