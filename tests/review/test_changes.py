"""What to review: every way of naming it, the secret files dropped, and git that runs
nothing a cloned repository's config names."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.review.changes import collect
from massgen_mcp.review.diff import split_diff
from tests.review.conftest import APP_AFTER, CANARY, git


async def test_the_working_tree_against_head_leaves_the_env_file_out(repo: Path) -> None:
    changes = await collect(repo / "src")  # from a subfolder: the repository's top
    assert changes.root == repo.resolve()
    assert changes.files == ("src/app.py", "src/db.py")
    assert "+    for i in range(len(items) + 1):" in changes.diff
    assert "+    cursor.execute(f\"SELECT * FROM users WHERE name = '{name}'\")" in changes.diff
    assert " def total(items):" in changes.diff  # context lines around the change
    assert CANARY not in changes.diff and ".env" not in changes.diff
    assert changes.left_out == (".env: on the secret-file deny-list (its changes are never "
                                "sent to a model)",)


async def test_staged_base_and_commit(repo: Path) -> None:
    git(repo, "add", "src/app.py")
    staged = await collect(repo, staged=True)
    assert staged.files == ("src/app.py",) and staged.commit is None
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "defects and a secret")
    since = await collect(repo, base="main")
    assert since.files == ("src/app.py", "src/db.py") and CANARY not in since.diff
    assert since.commit == git(repo, "rev-parse", "HEAD").decode().strip()
    (repo / "README.md").write_text("# shop\n\nnow with totals\n")
    git(repo, "commit", "-qam", "readme")
    one = await collect(repo, commit="HEAD~1")
    assert one.files == ("src/app.py", "src/db.py") and one.described == "commit HEAD~1"
    root_commit = await collect(repo, commit="main")  # no parent: against the empty tree
    assert root_commit.files == ("README.md", "src/app.py", "src/db.py")


async def test_a_patch_on_stdin_as_gh_pr_diff_prints_it(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "defects")
    patch = git(repo, "show", "--format=From %H%nSubject: defects%n", "HEAD")
    git(repo, "checkout", "-q", "HEAD~1")  # the patch applies to the parent, as a PR's
    changes = await collect(repo, patch="-", stdin=io.BytesIO(patch))
    assert changes.files == ("src/app.py", "src/db.py")
    assert CANARY not in changes.diff and "Subject: defects" in changes.diff
    assert changes.left_out[0].startswith(".env: on the secret-file deny-list")


async def test_paths_are_reviewed_whole_with_numbered_lines(repo: Path) -> None:
    changes = await collect(repo, paths=["src/app.py", ".env"])
    assert changes.files == ("src/app.py",)
    assert f"@@ -0,0 +1,{len(APP_AFTER.splitlines())} @@" in changes.diff
    assert CANARY not in changes.diff and changes.left_out[0].startswith(".env:")
    (repo / "src" / "link.py").symlink_to(repo / "src" / "app.py")
    git(repo, "add", "src/link.py")
    folder = await collect(repo / "src", paths=["."])
    assert folder.files == ("src/app.py", "src/db.py")
    assert folder.left_out == ("src/link.py: not read (is a link)",)
    for name, why in (("link.py", "is reached through a link; name the file itself"),
                      ("../../outside.py", "is outside the repository"),
                      ("nope.py", "does not exist")):
        (repo.parent / "outside.py").write_text("x = 1\n")
        with pytest.raises(ConfigError, match=f"^paths: '[^']*' {why}"):
            await collect(repo / "src", paths=[name])


def test_a_removed_line_that_reads_like_a_header_stays_in_its_hunk() -> None:
    diff = (b"--- a/x.sql\n+++ b/x.sql\n@@ -1,2 +1,1 @@\n--- a comment\n keep\n"
            b"--- a/y.txt\n+++ b/y.txt\n@@ -1 +1 @@\n-a\n+b\n")
    sections = split_diff(diff, "test")
    assert [(s.old, s.new) for s in sections] == [("x.sql", "x.sql"), ("y.txt", "y.txt")]
    assert b"--- a comment\n" in sections[0].lines


def plant(repo: Path) -> Path:
    """Every program a cloned repository's config can make a read command run, each one
    leaving a file in ``ran/`` when it runs."""
    ran = repo.parent / "ran"
    ran.mkdir()
    script = repo.parent / "evil.sh"
    script.write_text(f'#!/bin/sh\ntouch "{ran}/$1"\ncat\n')
    script.chmod(0o755)
    (repo / ".gitattributes").write_text("*.py filter=evil diff=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    with (repo / ".git" / "config").open("a") as config:
        config.write(f'[core]\n\tfsmonitor = "{script} fsmonitor"\n\tpager = "{script} pager"\n'
                     f'[diff]\n\texternal = "{script} external"\n'
                     f'[diff "evil"]\n\ttextconv = "{script} textconv"\n'
                     f'\tcommand = "{script} command"\n'
                     f'[filter "evil"]\n\tclean = "{script} clean"\n'
                     f'\tsmudge = "{script} smudge"\n[pager]\n\tdiff = "{script} pagerdiff"\n')
    os.utime(repo / "src" / "app.py", (1, 1))  # stat data changed: git diff cleans it again
    return ran


@pytest.mark.skipif(os.name == "nt", reason="the planted programs are shell scripts")
async def test_a_cloned_repositorys_config_runs_nothing(repo: Path) -> None:
    ran = plant(repo)
    changes = await collect(repo)
    assert changes.files == ("src/app.py", "src/db.py")
    assert sorted(os.listdir(ran)) == []
    # The plants work: plain git runs them.
    subprocess.run(["git", "-C", str(repo), "-c", "core.pager=cat", "diff", "HEAD"],
                   capture_output=True, check=False)
    subprocess.run(["git", "-C", str(repo), "diff", "--textconv", "--no-ext-diff", "HEAD"],
                   capture_output=True, check=False)
    assert {"clean", "external", "fsmonitor"} <= set(os.listdir(ran))


@pytest.mark.skipif(sys.platform == "win32", reason="a shell-script plant")
async def test_a_git_planted_in_the_repository_is_never_run(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows looks a bare "git" up in the current folder first, as a "." entry of PATH
    does anywhere: git is resolved on PATH to an absolute path outside the repository."""
    planted = repo / "git"
    planted.write_text(f'#!/bin/sh\ntouch "{repo}/PLANTED-RAN"\nexit 1\n')
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f".{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(repo)
    with pytest.raises(ConfigError) as caught:
        await collect(repo)
    assert "inside" in str(caught.value) and "\n" not in str(caught.value)
    assert not (repo / "PLANTED-RAN").exists()


def test_git_gets_no_credential_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Git runs in a repository nobody vetted, and reads no key: the hardening keeps its
    config from running a program, and should one slip through (a git version's new
    setting), it finds no API key, token or password in its environment: the credentials a
    coding CLI child loses, by name and by shape (red team, round 5: git got them all)."""
    from massgen_mcp.tools.git import environment

    planted = {"OPENAI_API_KEY": "sk-test-CANARY0123456789abcdef",
               "LLM_CRED": "whatever-it-is-0123", "SOME_VAR": "ghp_" + "A1b2C3d4" * 5,
               "DATABASE_URL": "postgres://app:hunter2-pw@db/x",
               # what a coding CLI's child loses beyond those (providers/cli/environment)
               "REDISCLI_AUTH": "plain-words", "DEPLOY_HOOK": "Bearer abcdef0123456789xyz",
               "SESSION_JWT_X": "eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl"}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EDITOR_THEME", "dark")
    env = environment()
    assert not set(planted) & set(env)
    assert not any(value in " ".join(env.values()) for value in planted.values())
    assert env["EDITOR_THEME"] == "dark" and env["PATH"] == os.environ["PATH"]
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"


@pytest.mark.skipif(os.name == "nt", reason="a FIFO")
async def test_files_a_cloned_repositorys_config_names_for_git_to_read_are_not_read(
        repo: Path, tmp_path: Path) -> None:
    """``diff.orderFile`` and ``core.attributesFile`` in ``.git/config``, and the git
    folder's ``info/attributes``, ``objects/info/alternates`` and ``commondir``, are files
    git reads whole (or line by line, a line as long as it is): ``/dev/zero`` there took
    git's memory until it failed ("Out of memory, realloc failed": gigabytes a second), a
    FIFO held it to the 30 s timeout. The config's two are overridden (``-O/dev/null``,
    ``core.attributesFile=``); a git folder's file that is not a small regular file is
    refused in one line before git runs (red team, round 5)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    git(repo, "config", "diff.orderFile", str(fifo))
    git(repo, "config", "core.attributesFile", str(fifo))
    changes = await collect(repo)
    assert changes.files == ("src/app.py", "src/db.py")
    for name in ("info/attributes", "objects/info/alternates", "commondir"):
        planted = repo / ".git" / name
        planted.parent.mkdir(exist_ok=True)
        planted.symlink_to("/dev/zero")
        with pytest.raises(ConfigError) as caught:
            await collect(repo)  # git read commondir and alternates whole: rev-parse too
        said = str(caught.value)
        assert said.startswith(f"repository: {planted} is not a regular file") and (
            "\n" not in said)
        planted.unlink()


async def test_a_folder_named_like_a_pathspec_is_that_folder(repo: Path) -> None:
    """Git reads a path after ``--`` as a pathspec: a folder named ``*`` (or ``:(top)``)
    listed every tracked file instead of its own. Paths are literal (red team, round 5)."""
    for name in ("*", ":(exclude)x"):
        (repo / name).mkdir()
        (repo / name / "in.py").write_text("x = 1\n")
    git(repo, "add", "--", "*/in.py", ":(literal):(exclude)x/in.py")
    for name in ("*", ":(exclude)x"):
        changes = await collect(repo, paths=[name])
        assert changes.files == (f"{name}/in.py",), name


async def test_nothing_staged_is_said_plainly(repo: Path) -> None:
    """The working tree has changes, none staged: not "nothing to review: the staged
    changes changes no file that can be sent"."""
    with pytest.raises(ConfigError) as refused:
        await collect(repo, staged=True)
    assert str(refused.value) == ("--staged: nothing is staged; stage what to review (git add "
                                  "PATH), or review the working tree's changes (no option)")


async def test_a_too_large_review_is_told_only_ways_that_fit_it(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --commit review was told to "review one commit (--commit SHA)"; each kind now gets
    only the ways that narrow it. (A diff over one run is reviewed in parts; only one over
    what a review takes in all, 8 MiB, is refused: lowered here so the file stays small.)"""
    monkeypatch.setattr("massgen_mcp.review.changes.MAX_REVIEW_BYTES", 180_000)
    (repo / "big.txt").write_text("".join(f"line {n} of a large file\n" for n in range(9_000)))
    with pytest.raises(ConfigError) as worktree:
        await collect(repo, paths=["big.txt"])
    assert str(worktree.value).endswith("narrow it: name fewer files")
    git(repo, "add", "big.txt")
    git(repo, "commit", "-qm", "a large file")
    with pytest.raises(ConfigError) as commit:
        await collect(repo, commit="HEAD")
    said = str(commit.value)
    assert "--commit" not in said and "split the patch" not in said
    assert said.endswith("narrow it: review its files a few at a time as they are "
                         "(massgen-mcp review PATH ...), or split the commit")
    with pytest.raises(ConfigError) as base:
        await collect(repo, base="HEAD~1")
    assert str(base.value).endswith("narrow it: review one commit at a time (--commit SHA), "
                                    "or give a nearer --base")
