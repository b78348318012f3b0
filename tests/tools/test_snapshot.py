"""The read-only snapshot of the reviewed side: tracked files only, no secret files, no links,
size-capped, read-only, and gone after its ``with`` block."""

from __future__ import annotations

import os
import stat
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
