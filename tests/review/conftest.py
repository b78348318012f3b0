"""A fixture repository with planted defects (an off-by-one, an SQL injection) and a secret
(``.env`` holding :data:`CANARY`) that must never reach a model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CANARY = "sk-review-canary-5eb0c7d1a2"
APP_BEFORE = """\
def total(items):
    result = 0
    for i in range(len(items)):
        result += items[i]
    return result
"""
APP_AFTER = """\
def total(items):
    result = 0
    for i in range(len(items) + 1):
        result += items[i]
    return result
"""
DB_BEFORE = """\
def find_user(cursor, name):
    cursor.execute("SELECT * FROM users WHERE name = ?", (name,))
    return cursor.fetchone()
"""
DB_AFTER = """\
def find_user(cursor, name):
    cursor.execute(f"SELECT * FROM users WHERE name = '{name}'")
    return cursor.fetchone()
"""


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """Git as a test's author runs it (an identity, no user config of this machine)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          input=input, env=env).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose working tree plants the two defects (unstaged) and changes the
    committed ``.env``; ``main`` holds the clean versions."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "src" / "app.py").write_text(APP_BEFORE)
    (root / "src" / "db.py").write_text(DB_BEFORE)
    (root / "README.md").write_text("# shop\n")
    (root / ".env").write_text("DATABASE_URL=postgres://localhost/shop\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "clean versions")
    (root / "src" / "app.py").write_text(APP_AFTER)
    (root / "src" / "db.py").write_text(DB_AFTER)
    (root / ".env").write_text(f"DATABASE_URL=postgres://localhost/shop\nAPI_KEY={CANARY}\n")
    return root
