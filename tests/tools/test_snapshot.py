"""The read-only snapshot of the reviewed side: tracked files only, no secret files, no links,
size-capped, read-only, and gone after its ``with`` block."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from massgen_mcp.tools import snapshot as snapshots
from massgen_mcp.tools.snapshot import snapshot
from tests.review.conftest import APP_AFTER, APP_BEFORE, CANARY, git
from tests.review.conftest import repo as repo  # the fixture: a repository with changes


def every_file(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


async def test_the_working_tree_snapshot(repo: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not the repository's\n")
    (repo / "link.txt").symlink_to(outside)
    (repo / "big.bin").write_bytes(b"x" * 2_000)
    (repo / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (repo / "untracked.py").write_text("print('not tracked')\n")
    git(repo, "add", "link.txt", "big.bin", "deploy.pem")
    monkeypatch.setattr(snapshots, "MAX_FILE_BYTES", 1_000)
    async with snapshot(repo) as built:
        files = every_file(built.path)
        assert files == {"README.md": b"# shop\n", "src/app.py": APP_AFTER.encode(),
                         "src/db.py": (repo / "src" / "db.py").read_bytes()}
        assert dict(built.left_out) == {
            ".env": "on the secret-file deny-list", "big.bin": "over 1,000 bytes",
            "deploy.pem": "on the secret-file deny-list", "link.txt": "a link"}
        assert not any(CANARY.encode() in data for data in files.values())
        mode = (built.path / "src" / "app.py").stat().st_mode
        assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        if os.name != "nt" and os.geteuid() != 0:  # root writes anywhere
            with pytest.raises(PermissionError):
                (built.path / "src" / "new.py").write_text("x")
        folder = built.path
    assert not folder.exists()


async def test_a_commits_snapshot_reads_the_commit_not_the_working_tree(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD").decode().strip()
    (repo / "src" / "app.py").unlink()  # the working tree no longer matters
    async with snapshot(repo, head) as built:
        files = every_file(built.path)
    assert files["src/app.py"] == APP_BEFORE.encode()
    assert ".env" not in files and dict(built.left_out)[".env"] == "on the secret-file deny-list"


@pytest.mark.parametrize("commit", [False, True])
async def test_no_coding_clis_project_settings_in_the_copy(repo: Path, commit: bool) -> None:
    """A CLI member works in the copy: the reviewed code's own settings for the CLIs (hooks,
    MCP servers, a discovery command) must not be there for it to load."""
    planted = {".gemini/settings.json": '{"tools": {"discoveryCommand": "touch ran"}}',
               ".claude/settings.json": '{"hooks": {}}', ".codex/config.toml": "",
               ".agents/skills/x.md": "", ".mcp.json": '{"mcpServers": {}}',
               "docs/.Gemini/settings.json": "{}"}
    for name, text in planted.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", *planted)
    git(repo, "commit", "-qm", "settings")
    head = git(repo, "rev-parse", "HEAD").decode().strip() if commit else None
    async with snapshot(repo, head) as built:
        files = every_file(built.path)
    assert not set(planted) & set(files)
    assert {name: why for name, why in built.left_out if name in planted} == dict.fromkeys(
        planted, "a coding CLI's project settings")
    assert "src/app.py" in files


async def test_a_working_tree_in_the_middle_of_a_merge_is_copied_once(repo: Path) -> None:
    """A conflicted merge lists a path once per stage (1, 2, 3) in the index: the copy holds
    the working tree's file once, not a crash on the second stage (red team, round 5)."""
    git(repo, "add", "src")
    git(repo, "commit", "-qm", "defects")
    git(repo, "checkout", "-qb", "other", "HEAD~1")
    (repo / "src" / "app.py").write_text("def total(items):\n    return sum(items)\n")
    git(repo, "commit", "-qam", "other")
    git(repo, "checkout", "-q", "main")
    with pytest.raises(subprocess.CalledProcessError):  # the conflict
        git(repo, "merge", "-q", "other")
    assert git(repo, "ls-files", "-s", "src/app.py").count(b"\n") == 3
    async with snapshot(repo) as built:
        files = every_file(built.path)
    assert files["src/app.py"] == (repo / "src" / "app.py").read_bytes()
    assert not dict(built.left_out).get("src/app.py")


def crafted_commit(repo: Path, entries: list[tuple[str, str, str]]) -> str:
    """A commit whose top tree holds ``entries`` (mode, object id, name) as given: a tree
    ``git mktree --missing`` writes without checking names twice or objects present."""
    listing = "".join(f"{mode} {'tree' if mode == '040000' else 'blob'} {oid}\t{name}\n"
                      for mode, oid, name in entries)
    tree = git(repo, "mktree", "--missing", input=listing.encode()).decode().strip()
    return git(repo, "commit-tree", tree, "-m", "crafted").decode().strip()


async def test_a_crafted_commit_s_clashing_or_missing_entries_are_left_out(repo: Path) -> None:
    """A tree object can name one path twice, a file and a folder under one name, or a blob
    that is not in the repository (a partial clone): each is left out with why, and the
    rest is copied (it was a FileExistsError, or int('BAD'), and no snapshot at all)."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"kept\n").decode().strip()
    other = git(repo, "hash-object", "-w", "--stdin", input=b"second\n").decode().strip()
    inner = git(repo, "mktree", input=f"100644 blob {other}\tb\n".encode()).decode().strip()
    commit = crafted_commit(repo, [
        ("100644", blob, "a"), ("040000", inner, "a"),  # a file and a folder named "a"
        ("100644", blob, "kept.txt"), ("100644", other, "twice"), ("100644", blob, "twice"),
        ("100644", "1" * 40, "missing.txt")])
    async with snapshot(repo, commit) as built:
        files = every_file(built.path)
    assert files["kept.txt"] == b"kept\n"
    assert files["a"] == b"kept\n" and files["twice"] == b"second\n"  # the first of each
    assert dict(built.left_out) == {
        "a/b": snapshots.LISTED_TWICE, "twice": snapshots.LISTED_TWICE,
        "missing.txt": "not in the repository (a partial clone's missing object)"}
