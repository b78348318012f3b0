"""Trust, round 3 (issue 47, items 1-4, 6 and 10): no project file leaves through
``context_files`` without consent, token shapes are masked, records are read as untrusted
input, a run's status always ends final, and no file in the working folder configures the
server but the project config.

The "foreign" endpoint is ``FOREIGN_URL`` of :mod:`tests.helpers`: a host that resolves nowhere,
reached through a scripted server acting as a proxy, so that every refusal is shown by the
requests that server did *not* get.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from mcp import Client as SdkClient
from mcp.client.stdio import StdioServerParameters

from massgen_mcp.core.errors import ConfigError, UntrustedConfigError
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.executors import inbox
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ChatRequest, Policy, Reply, ScriptedServer, agree
from massgen_mcp.tools.workspace import WorkspaceTools, is_denied
from tests.helpers import FOREIGN_URL, Gate, Scripted, can_mount_tmpfs, text_of
from tests.servers import RawStdio

GH_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
DB_PASSWORD = "Sup3r-s3cret-db-pw-9182"


def repo_with_secrets(tmp_path: Path) -> Path:
    """A project whose .git/config carries a token in its remote URL and whose ordinary
    config file carries a database password (the two files of the report)."""
    repo = tmp_path / "project"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(
        f'[remote "origin"]\n\turl = https://{GH_TOKEN}@github.com/o/r.git\n')
    (repo / ".git" / "credentials").write_text(f"https://u:{GH_TOKEN}@github.com\n")
    (repo / "config").mkdir()
    (repo / "config" / "database.yml").write_text(f"password: {DB_PASSWORD}\n")
    (repo / "README.md").write_text(f"Clone with https://{GH_TOKEN}@github.com/o/r\n")
    return repo


# -- 1. context_files ---------------------------------------------------------------------------

@pytest.mark.parametrize("files", [["config/database.yml"], ["README.md"]])
async def test_a_call_cannot_send_context_files_to_a_foreign_endpoint(
        tmp_path: Path, home: Path, files: list[str]) -> None:
    service = ConsensusService.local(home, Workspace(repo_with_secrets(tmp_path)))
    spec = RunSpec(question="q", models=[f"openai/a@{FOREIGN_URL}", "openai/b"],
                   context_files=files)
    with pytest.raises(UntrustedConfigError) as refused:
        await service.start(spec)
    assert f"agent 'agent_a' at {FOREIGN_URL} would receive the project's files " \
           "(context_files)" in str(refused.value)
    # The same through the call's base_url for every agent.
    via_base = RunSpec(question="q", models=["openai/a"], base_url=FOREIGN_URL,
                       context_files=files)
    with pytest.raises(UntrustedConfigError):
        await service.start(via_base)
    await service.aclose()


@pytest.mark.parametrize("name", [".git/config", ".git/credentials", ".git/HEAD",
                                  "sub/../.git/config", "./.git/config"])
def test_git_internals_are_never_context_files_of_a_call(tmp_path: Path, name: str) -> None:
    repo = repo_with_secrets(tmp_path)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "sub").mkdir()
    with pytest.raises(ConfigError, match="may hold secrets"):
        Workspace(repo).read_context_files([name])


def test_a_symlink_to_git_config_is_refused_by_what_it_leads_to(tmp_path: Path) -> None:
    repo = repo_with_secrets(tmp_path)
    (repo / "notes.txt").symlink_to(repo / ".git" / "config")
    with pytest.raises(ConfigError, match="may hold secrets"):
        Workspace(repo).read_context_files(["notes.txt"])


def test_a_hard_link_is_no_context_file_of_a_call(tmp_path: Path) -> None:
    repo = repo_with_secrets(tmp_path)
    os.link(repo / ".git" / "config", repo / "notes.txt")
    with pytest.raises(ConfigError, match="hard links"):
        Workspace(repo).read_context_files(["notes.txt"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_context_file_that_became_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """The name was a file when it was checked and is a FIFO when it is read (a race a
    cloned repository's script can win): the read decides on the open file, so it refuses
    at once instead of waiting for a writer forever."""
    os.mkfifo(tmp_path / "notes.txt")
    with pytest.raises(ConfigError, match=r"is not read: notes\.txt is not a regular file"):
        Workspace(tmp_path)._read("notes.txt", tmp_path / "notes.txt")
    own = tmp_path / "own.txt"  # the user's own command still shares a hard-linked file
    own.write_text("shared")
    os.link(own, tmp_path / "other-name.txt")
    assert Workspace(tmp_path, confined=False).read_context_files(["own.txt"]).count(
        "shared") == 1


def test_a_hard_linked_answer_is_not_read(tmp_path: Path, home: Path) -> None:
    from massgen_mcp.core.errors import SessionStateError
    from massgen_mcp.records.store import SessionStore

    store = SessionStore(home)
    sid = "01KAAAAAAAAAAAAAAAAAAAAAAA"
    (store.sessions_dir / sid / "answers").mkdir(parents=True)
    secret = store.sessions_dir / "id_rsa"
    secret.write_text(SSH_KEY)
    os.link(secret, store.sessions_dir / sid / "answers" / "A1.md")
    with pytest.raises(SessionStateError, match="hard links"):
        store.read_answer(sid, "A1")


async def test_context_files_reach_a_loopback_team_with_tokens_masked(
        scripted: Scripted, tmp_path: Path, home: Path) -> None:
    server = scripted()
    service = ConsensusService.local(home, Workspace(repo_with_secrets(tmp_path)))
    spec = RunSpec(question="q", models=[f"openai/a@{server.base_url}"],
                   context_files=["README.md"])
    started = await service.start(spec)
    await service.wait(started.session_id, 30)
    await service.aclose()
    sent = "\n".join(json.dumps(r.body) for r in server.requests)
    assert "Clone with https://***@github.com/o/r" in sent and GH_TOKEN not in sent


@pytest.mark.parametrize("name", ["env.local", "wp-config.php", "appsettings.json",
                                  "appsettings.Production.json", "WP-CONFIG.PHP",
                                  "site/wp-config.php.bak", ".git/config", ".GIT/Config",
                                  "vendor/lib/.git/config", ".git/credentials",
                                  ".git/modules/sub/config"])
def test_the_deny_list_knows_the_leftover_names(name: str) -> None:
    assert is_denied(PurePosixPath(name)), name


@pytest.mark.parametrize("name", ["environment.local.md", "wp-config-sample.php",
                                  "appsettings.py", "docs/appsettings.md", "config",
                                  "src/config/app.yaml", "git/config", "local.env.md"])
def test_look_alikes_of_the_leftover_names_stay_readable(name: str) -> None:
    assert not is_denied(PurePosixPath(name)), name


def test_workspace_tools_do_not_read_the_leftover_names(tmp_path: Path) -> None:
    for name in ("env.local", "wp-config.php", "appsettings.json"):
        (tmp_path / name).write_text(f"DB_PASSWORD={DB_PASSWORD}\n")
    tools = WorkspaceTools(tmp_path)
    for name in ("env.local", "wp-config.php", "appsettings.json"):
        assert tools.run("read_file", {"path": name}).startswith("error: "), name
    assert DB_PASSWORD not in tools.run("search_text", {"pattern": "DB_PASSWORD"})


# -- 1. token shapes ----------------------------------------------------------------------------

TOKENS = [
    GH_TOKEN,
    "gho_" + "x" * 36, "ghu_" + "Y1" * 18, "ghs_" + "z9" * 18, "ghr_" + "Q" * 36,
    "github_pat_11ABCDEFG0123456789_" + "abcdefghij" * 5,
    "glpat-" + "Ab3_-x" * 4,
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxp-1234567890-abcdefghijkl",
    "AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A",
    "AIzaSyD-" + "k9" * 15,  # Google: no separator after the prefix
    "hf_" + "h" * 34, "npm_" + "n" * 36,
]


@pytest.mark.parametrize("token", TOKENS)
def test_well_known_token_shapes_are_masked(token: str) -> None:
    for text in (f"token={token}", f'{{"t": "{token}"}}', f"{token}\n", f"({token})"):
        assert token not in redact(text), text


@pytest.mark.parametrize("token", TOKENS)
def test_a_token_after_an_escaped_newline_or_tab_is_masked(token: str) -> None:
    """Model output is redacted as it arrives, as the JSON of its tool call's arguments, where
    a token at the start of a line follows the two characters ``\\n``: the shapes' ``\\b``
    saw a letter (``n``) before it and left it whole, so a review's evidence quoting a token
    on its own line reached the peers and every record (red team, round 5)."""
    for text in (json.dumps({"content": f"line\n{token}"}), json.dumps(f"a\t{token}\r\n"),
                 json.dumps(json.dumps(f"x\n{token}"))):
        assert token not in redact(text), text
    assert redact(json.dumps("x\nsk_not_a_key")) == json.dumps("x\nsk_not_a_key")


@pytest.mark.parametrize(("url", "shown"), [
    (f"https://{GH_TOKEN}@github.com/o/r.git", "https://***@github.com/o/r.git"),
    ("https://0123456789abcdef0123456789abcdef@gitlab.example.com/x",
     "https://***@gitlab.example.com/x"),
    ("https://deadbeefcafe0123456789abcdef00112233:x-oauth-basic@github.com",
     "https://***@github.com"),
    ("https://x-access-token:s3cr3t-value@github.com/o", "https://x-access-token:***@github.com/o"),
    ("HTTPS://user:p%40ss@host/x", "HTTPS://user:***@host/x"),
    ("https://tok%3Avalue%40x@host/x", "https://***@host/x"),
    ("http://admin:S3c@r3t@10.0.0.5:8000/v1", "http://admin:***@10.0.0.5:8000/v1"),
    ("https:\\/\\/tok123456789012345678@host/x", "https:\\/\\/***@host/x"),  # JSON-escaped
])
def test_url_userinfo_is_masked_with_or_without_a_password(url: str, shown: str) -> None:
    assert redact(f"remote {url} end") == f"remote {shown} end"


def test_ordinary_text_keeps_its_at_signs_and_hashes() -> None:
    text = ("mail bob@example.com; see https://example.com/a?q=x@y; commit "
            "0123456789abcdef0123456789abcdef01234567; AKIA is a prefix; task-1234567890ab")
    assert redact(text) == text


# -- 2, 3. records are read as untrusted input --------------------------------------------------

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA-canary\n"


async def recorded_run(scripted: Scripted, home: Path, runs: int = 1) -> list[str]:
    """``runs`` real, completed runs recorded under ``home`` (the project's .massgen)."""
    server = scripted()
    service = ConsensusService.local(home, Workspace(home.parent))
    ids = []
    for _ in range(runs):
        started = await service.start(RunSpec(question="What is 6*7?", models=[
            f"openai/a@{server.base_url}", f"openai/b@{server.base_url}"]))
        await service.wait(started.session_id, 30)
        ids.append(started.session_id)
    await service.aclose()
    return ids


# A reader that reads a planted /dev/zero without bound (as before this fix) fails at this
# cap with a MemoryError instead of taking the machine's memory.
MEMORY_CAP_KIB = 4 * 1024 * 1024


def capped(*command: str) -> list[str]:
    """``command`` run with its address space capped (POSIX ``ulimit -v``)."""
    return ["sh", "-c", f'ulimit -v {MEMORY_CAP_KIB} && exec "$@"', "capped", *command]


def stdio_params(cwd: Path) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "MASSGEN_HOME"}
    command = capped(sys.executable, "-m", "massgen_mcp") if sys.platform != "win32" else [
        sys.executable, "-m", "massgen_mcp"]
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(cwd))


async def test_a_linked_answer_is_not_served_by_the_resources(scripted: Scripted,
                                                              tmp_path: Path) -> None:
    repo = tmp_path / "cloned"
    [sid] = await recorded_run(scripted, repo / ".massgen")
    secret = tmp_path / "id_rsa"
    secret.write_text(SSH_KEY)
    answer = repo / ".massgen" / "sessions" / sid / "answers" / "A1.md"
    answer.unlink()
    answer.symlink_to(secret)
    async with SdkClient(stdio_params(repo), mode="legacy") as client:
        for uri in (f"massgen://sessions/{sid}/answers/A1", f"massgen://sessions/{sid}/report"):
            try:
                served = (await client.read_resource(uri)).model_dump_json()
            except Exception as exc:  # refused: what the error says must not carry it either
                served = str(exc)
            assert "canary" not in served and "PRIVATE KEY" not in served, (uri, served)
            assert "cannot be read" in served, served  # refused, and says why
        listed = await client.call_tool("list_sessions", {})
        assert "canary" not in json.dumps(listed.structured_content)


def test_a_linked_answers_folder_is_not_followed(tmp_path: Path, home: Path) -> None:
    from massgen_mcp.records.store import SessionStore

    store = SessionStore(home)
    sid = "01KAAAAAAAAAAAAAAAAAAAAAAA"
    folder = store.sessions_dir / sid
    folder.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "A1.md").write_text(SSH_KEY)
    (folder / "answers").symlink_to(elsewhere)
    from massgen_mcp.core.errors import SessionNotFoundError

    with pytest.raises(SessionNotFoundError):
        store.read_answer(sid, "A1")


def plant_bad_status(folder: Path, kind: str) -> None:
    status = folder / "status.json"
    status.unlink()
    if kind == "dev-zero":
        status.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(status)
    elif kind == "sparse":
        with status.open("wb") as handle:
            handle.truncate(8 * 1024 ** 3)  # 8 GiB, no blocks used
    elif kind == "deep":
        status.write_text("[" * 100_000)


BAD_KINDS = ["dev-zero", "fifo", "sparse", "deep"]


@pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")
async def test_bad_status_files_neither_stop_the_cli_nor_the_stdio_server(
        scripted: Scripted, tmp_path: Path) -> None:
    repo = tmp_path / "cloned"
    ids = await recorded_run(scripted, repo / ".massgen", runs=len(BAD_KINDS) + 1)
    sane, planted = ids[0], ids[1:]  # the sane run is the oldest: latest must skip the rest
    for sid, kind in zip(planted, BAD_KINDS, strict=True):
        plant_bad_status(repo / ".massgen" / "sessions" / sid, kind)
    env = {k: v for k, v in os.environ.items() if k != "MASSGEN_HOME"}
    for args in (["sessions"], ["sessions", "--json"], ["show", "latest"]):
        done = subprocess.run(capped(sys.executable, "-m", "massgen_mcp", *args), cwd=repo,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert sane in done.stdout and "Traceback" not in done.stderr, done.stderr
        assert not any(sid in done.stdout for sid in planted), done.stdout
        warnings = [line for line in done.stderr.splitlines() if "corrupt" in line]
        assert len(warnings) == len(planted), done.stderr  # one line per bad record
    async with SdkClient(stdio_params(repo), mode="legacy") as client:
        listed = await client.call_tool("list_sessions", {})
        shown = [s["session_id"] for s in listed.structured_content["sessions"]]
        assert shown == [sane]
        bad = await client.call_tool("get_status", {"session_id": planted[0]})
        assert bad.is_error and "cannot be read" in text_of(bad.content[0])


def test_a_planted_events_file_is_streamed_not_swallowed(tmp_path: Path, home: Path) -> None:
    from massgen_mcp.core.errors import SessionStateError
    from massgen_mcp.records.store import SessionStore

    store = SessionStore(home)
    sid = "01KAAAAAAAAAAAAAAAAAAAAAAA"
    folder = store.sessions_dir / sid
    folder.mkdir(parents=True)
    secret = tmp_path / "id_rsa"
    secret.write_text(SSH_KEY)
    (folder / "events.jsonl").symlink_to(secret)
    with pytest.raises(SessionStateError, match=r"events\.jsonl"):
        store.read_events(sid)
    (folder / "events.jsonl").unlink()
    with (folder / "events.jsonl").open("wb") as handle:  # one endless line, sparse
        handle.truncate(64 * 1024 ** 2)
    with pytest.raises(SessionStateError, match=r"events\.jsonl"):
        store.read_events(sid)


# -- 4, 10. a run's status always ends final ----------------------------------------------------

@pytest.fixture
def gate() -> Iterator[Gate]:
    held = Gate()
    yield held
    held.release.set()  # never leave a server thread waiting


def run_cli(home: Path, server: ScriptedServer, *extra: str) -> subprocess.Popen[str]:
    """``massgen-mcp run`` in its own process (the agents a, b, c of ``server``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "run", "What is 6*7?", "--models",
         ",".join(f"openai/{m}@{server.base_url}" for m in "abc"), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "MASSGEN_HOME": str(home)})


def on_disk(home: Path) -> tuple[str, dict[str, object]]:
    [folder] = (home / "sessions").iterdir()
    return folder.name, json.loads((folder / "status.json").read_text())


@pytest.mark.skipif(sys.platform == "win32", reason="kill -9 is POSIX")
async def test_a_killed_run_shows_interrupted_to_every_reader(
        scripted: Scripted, home: Path, gate: Gate) -> None:
    server = scripted(gate.policy)
    proc = run_cli(home, server, "--quiet")
    try:
        await gate.held()
    finally:
        proc.kill()  # SIGKILL: no handler, no last status write
        proc.communicate(timeout=60)
        gate.release.set()
    sid, status = on_disk(home)
    assert status["status"] == "running"  # as the killed process left it
    env = {**os.environ, "MASSGEN_HOME": str(home)}
    listed = subprocess.run([sys.executable, "-m", "massgen_mcp", "sessions", "--json"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert [s["status"] for s in json.loads(listed.stdout)] == ["interrupted"], listed.stdout
    shown = subprocess.run([sys.executable, "-m", "massgen_mcp", "show", sid],
                           capture_output=True, text=True, env=env, timeout=60)
    assert "outcome  interrupted" in shown.stdout, shown.stdout
    service = ConsensusService.local(home)  # a reader that starts no server
    assert (await service.status(sid)).status is RunStatus.INTERRUPTED
    assert [s.status for s in service.list_sessions()[0]] == [RunStatus.INTERRUPTED]
    await service.aclose()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
async def test_a_closed_terminal_cancels_a_cli_run_like_sigterm(
        scripted: Scripted, home: Path, gate: Gate) -> None:
    server = scripted(gate.policy)
    proc = run_cli(home, server, "--quiet")
    try:
        await gate.held()
        proc.send_signal(signal.SIGHUP)
        gate.release.set()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        gate.release.set()
    assert proc.returncode == 4, err  # cancelled
    assert on_disk(home)[1]["status"] == "cancelled"


async def test_a_note_that_is_not_text_is_refused_and_the_run_ends_final(
        scripted: Scripted, home: Path, gate: Gate) -> None:
    """A lone surrogate in a session's inbox file (written by anyone who can write there;
    ``massgen-mcp steer`` refuses one itself) is refused like any bad note."""
    server = scripted(gate.policy)
    running = ConsensusService.local(home)
    run = await running.start(RunSpec(question="What is 6*7?", models=[
        f"openai/{m}@{server.base_url}" for m in "abc"]))
    await gate.held()
    folder = running.record_folder(run.session_id)
    name = inbox.post(folder, "use \ud800 units")  # JSON-escaped: the file itself is ASCII
    reply = await inbox.reply_to(folder, name, 30)
    gate.release.set()
    final = await running.wait(run.session_id, 60)
    await running.aclose()
    assert reply is not None and not reply.ok and "message:" in reply.message, reply
    assert final.status is RunStatus.COMPLETED
    assert json.loads((folder / "status.json").read_text())["status"] == "completed"


def fills_the_disk(where: list[Path]) -> Policy:
    """Agree, but first fill the record folder's disk (``where[0]``, set once the process that
    mounted it runs), so that no later record write, the final status included, fits."""
    def policy(req: ChatRequest) -> Reply:
        fill = where[0] / "fill"
        if not fill.exists():
            with contextlib.suppress(OSError), fill.open("wb") as out:
                while True:
                    out.write(b"\0" * 4096)
                    out.flush()
        return agree(req)
    return policy


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare -rm to mount a small tmpfs")
def test_a_run_whose_final_status_the_full_disk_refused_reads_failed(
        scripted: Scripted, home: Path) -> None:
    """MASSGEN_HOME on a real 600 KB tmpfs that the model's first reply fills: the run's
    last status cannot be written, and a reader (``sessions`` after the run, in the same
    mount) must not show it running."""
    where: list[Path] = []
    server = scripted(fills_the_disk(where))
    home.mkdir(parents=True)
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "ab")
    proc = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c",
         f"mount -t tmpfs -o size=600k tmpfs '{home}' && "
         f"'{sys.executable}' -m massgen_mcp run q --quiet --models {models}; echo ---; "
         f"'{sys.executable}' -m massgen_mcp sessions --json; echo ---; "
         f"cat '{home}'/sessions/*/status.json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "MASSGEN_HOME": str(home)})
    where.append(Path(f"/proc/{proc.pid}/root") / str(home).lstrip("/"))
    out, err = proc.communicate(timeout=120)
    _, listed, status = out.split("---\n")
    assert "no space left" in err, err
    assert [s["status"] for s in json.loads(listed)] == ["failed"], (listed, err)
    assert json.loads(status)["status"] == "running"  # what the disk kept: readers know better


# -- 6. no file in the working folder configures the server -------------------------------------

async def test_a_projects_dotenv_does_not_configure_fastmcp(tmp_path: Path, home: Path) -> None:
    """fastmcp reads FASTMCP_* from a .env in the working folder unless told not to; with
    FASTMCP_LOG_LEVEL=DEBUG it logs every tool call's arguments."""
    repo = tmp_path / "cloned"
    repo.mkdir()
    (repo / ".env").write_text("FASTMCP_LOG_LEVEL=DEBUG\nFASTMCP_LOG_ENABLED=true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMCP_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "massgen_mcp", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**env, "MASSGEN_HOME": str(home)}, cwd=repo)
    raw = RawStdio(proc)
    await raw.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "raw-test", "version": "1"}})
    await raw.send("notifications/initialized", notify=True)
    await raw.call("get_status", session_id="CANARY-ARGUMENT-7781")
    raw.stdin.close()
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert b"CANARY-ARGUMENT-7781" not in err, err.decode()
    assert b" DEBUG " not in err, err.decode()


def test_the_start_up_sweep_writes_the_final_status_the_disk_refused(home: Path) -> None:
    """Once there is space, the next server start writes what readers already showed."""
    from massgen_mcp.core.records import FinishReason, Phase
    from massgen_mcp.core.run_state import StatusRecord
    from massgen_mcp.records.liveness import RunLock
    from massgen_mcp.records.store import SessionStore

    store = SessionStore(home)
    sid = "01KAAAAAAAAAAAAAAAAAAAAAAA"
    folder = store.sessions_dir / sid
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(StatusRecord(
        session_id=sid, status=RunStatus.RUNNING, phase=Phase.ANSWERING, question="q",
        started_at=1.0, updated_at=1.0, agents={}).model_dump_json())
    lock = RunLock.take(folder)
    assert lock is not None
    assert store.read_status(sid).status is RunStatus.RUNNING  # held: it runs
    lock.failed()
    lock.release()  # the process ended with its final status unwritten
    assert store.read_status(sid).finish_reason is FinishReason.RECORD_WRITE_FAILED
    assert store.mark_interrupted(lambda pid: True) == [sid]
    on_disk = json.loads((folder / "status.json").read_text())
    assert (on_disk["status"], on_disk["finish_reason"]) == ("failed", "record_write_failed")
