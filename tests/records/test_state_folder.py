"""The records folder is checked before anything is written into it (issue 57, N7): a
``.massgen`` linked to a folder another local user owns had the user's questions and answers
written there, readable by everyone. Real runs, against the scripted model server."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from massgen_mcp.core.errors import RecordWriteError
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.testing.scripted import agree
from tests.helpers import Scripted, team_for

pytestmark = pytest.mark.skipif(sys.platform == "win32",
                                reason="owners and mode bits are POSIX (see check_state_folder)")
NOBODY = 65534
as_root = pytest.mark.skipif(sys.platform == "win32" or os.getuid() != 0,
                             reason="another user's folder is made with chown, as root")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder, the working directory, whose records go to its ./.massgen."""
    folder = tmp_path / "project"
    folder.mkdir(mode=0o755)
    monkeypatch.delenv("MASSGEN_HOME", raising=False)
    monkeypatch.chdir(folder)
    return folder


async def _run(scripted: Scripted) -> str:
    """A whole run of a secret question, in the project's records; its status."""
    runner = LocalExecutor(SessionStore(), ProviderRouter())
    try:
        run = await runner.start(RequestRecord(question="my secret question"),
                                 team_for(scripted(agree)))
        return (await run.task).status.value
    finally:
        await runner.aclose()


def _refusal(folder: Path, why: str) -> str:
    return (f"records are not written into {folder}: {why}; use a folder of your own (or set "
            "MASSGEN_HOME to one)")


async def test_a_massgen_linked_to_another_users_folder_gets_nothing_written(
        project: Path, tmp_path: Path, scripted: Scripted) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)  # they let anyone write it, to read what lands there
    if os.getuid() == 0:
        os.chown(theirs, NOBODY, NOBODY)
    (project / ".massgen").symlink_to(theirs, target_is_directory=True)
    with pytest.raises(RecordWriteError) as refused:
        await _run(scripted)
    assert str(refused.value) == _refusal(project / ".massgen", "it is a link")
    assert list(theirs.iterdir()) == []


@as_root
async def test_a_massgen_another_user_owns_gets_nothing_written(
        project: Path, scripted: Scripted) -> None:
    home = project / ".massgen"
    home.mkdir(mode=0o755)
    os.chown(home, NOBODY, NOBODY)
    with pytest.raises(RecordWriteError) as refused:
        await _run(scripted)
    assert str(refused.value) == _refusal(home, f"it belongs to another user (uid {NOBODY})")
    assert list(home.iterdir()) == []


@as_root
async def test_a_sessions_folder_another_user_owns_gets_nothing_written(
        project: Path, scripted: Scripted) -> None:
    (project / ".massgen").mkdir(mode=0o755)
    sessions = project / ".massgen" / "sessions"
    sessions.mkdir(mode=0o755)
    os.chown(sessions, NOBODY, NOBODY)
    with pytest.raises(RecordWriteError, match="belongs to another user"):
        await _run(scripted)
    assert list(sessions.iterdir()) == []


async def test_a_massgen_others_may_write_gets_nothing_written(
        project: Path, scripted: Scripted) -> None:
    home = project / ".massgen"
    home.mkdir()
    home.chmod(0o777)
    with pytest.raises(RecordWriteError) as refused:
        await _run(scripted)
    assert str(refused.value) == _refusal(home, f"other users may write it (mode 777); run: "
                                                f"chmod go-w {home}")
    assert list(home.iterdir()) == []


async def test_a_project_others_may_write_is_refused_unless_sticky(
        project: Path, scripted: Scripted) -> None:
    # Anyone who may write the project folder may rename .massgen and put theirs there; a
    # sticky folder (/tmp) lets no one rename another's entry.
    project.chmod(0o777)
    with pytest.raises(RecordWriteError, match=f"other users may write {project} "):
        await _run(scripted)
    assert not (project / ".massgen").exists()
    project.chmod(0o777 | stat.S_ISVTX)
    assert await _run(scripted) == "completed"


async def test_the_folders_a_run_makes_pass_the_check_under_a_group_writable_umask(
        project: Path, scripted: Scripted) -> None:
    old = os.umask(0o002)  # Ubuntu's for users: the folders made must not be group-writable
    try:
        assert await _run(scripted) == "completed"
        assert await _run(scripted) == "completed"
    finally:
        os.umask(old)
    sessions = project / ".massgen" / "sessions"
    runs = list(sessions.iterdir())
    assert len(runs) == 2
    for folder in (project / ".massgen", sessions, *runs, *(run / "answers" for run in runs)):
        assert folder.stat().st_mode & 0o777 == 0o755, folder


_PLANT_AT: list[Path] = []  # where the audit hook below makes another user's folder, once


def _plant_before_mkdir(event: str, args: tuple[object, ...]) -> None:
    """Another user wins the race: the moment this process makes ``_PLANT_AT``, theirs is
    made there first (an audit hook lasts for the process: it acts only while armed)."""
    if event == "os.mkdir" and _PLANT_AT and Path(str(args[0])) == _PLANT_AT[0]:
        folder = _PLANT_AT.pop()
        os.mkdir(folder, 0o755)
        os.chown(folder, NOBODY, NOBODY)


@as_root
async def test_a_sessions_folder_another_user_makes_after_the_check_gets_nothing_written(
        project: Path, scripted: Scripted) -> None:
    """`sessions/` is missing when the records folder is checked, and another user (in a
    home others may add to, a sticky one) makes theirs before this process makes its own:
    the check after making it refuses it."""
    (project / ".massgen").mkdir(mode=0o755)
    sessions = project / ".massgen" / "sessions"
    if not getattr(_plant_before_mkdir, "added", False):
        sys.addaudithook(_plant_before_mkdir)
        _plant_before_mkdir.added = True  # type: ignore[attr-defined]
    _PLANT_AT[:] = [sessions]
    try:
        with pytest.raises(RecordWriteError, match="belongs to another user"):
            await _run(scripted)
    finally:
        _PLANT_AT.clear()
    assert sessions.stat().st_uid == NOBODY
    assert list(sessions.iterdir()) == []
