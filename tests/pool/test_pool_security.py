"""The pool against someone who can write to its Redis: nothing they put there runs.

Real redis-server, front end and worker processes (the helpers of ``test_pool.py``); the
attacker is this test, writing Docket's streams and keys with a Redis client the way
``redis-cli XADD`` would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docket
import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError
from redis import Redis
from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.pool import payloads
from massgen_mcp.pool.frontends import GATE_MESSAGE, TTL_S
from massgen_mcp.pool.live import PoolConfig
from massgen_mcp.testing.scripted import agree
from tests.coding_clis import ANSWER_PROBE
from tests.helpers import data
from tests.pool_harness import REDIS, Pool, follow, free_port, models, start

pytestmark = pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                                reason="redis-server is not installed")


@pytest.fixture
def pool(tmp_path: Path, home: Path) -> Iterator[Pool]:
    running = Pool(tmp_path, home)
    yield running
    running.close()


class Command:
    """A pickle that runs a shell command when loaded (what an attacker would write)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


Fields = dict[FieldT, EncodableT]  # a Redis stream message


def evil(marker: Path) -> bytes:
    return pickle.dumps((Command(f"touch {marker}"),))


def run_message(marker: Path, key: str, function: str) -> Fields:
    """A stream message as Docket writes one, with a command as the task's arguments."""
    return {"key": key, "when": "2026-01-01T00:00:00+00:00", "function": function,
            "args": evil(marker), "kwargs": pickle.dumps({}), "attempt": "1",
            "generation": "0"}


def strike_message(marker: Path) -> Fields:
    return {"direction": "strike", "function": "massgen.run_session",
            "parameter": "session_id", "operator": "==", "value": evil(marker)}


def logs(pool: Pool) -> str:
    return "".join(p.read_text(errors="replace") for p in pool.tmp.glob("*.log"))


async def test_no_pickle_from_redis_runs_on_a_worker_or_front_end(
        pool: Pool, scripted: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastmcp.client import extension_hooks
    from fastmcp_tasks.client import _build_tasks_client_extension, call_tool_task

    monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])

    server = scripted(agree)
    front = pool.front_end()
    worker = pool.worker()
    pool.wait_workers(1)
    redis = Redis.from_url(pool.url)
    markers = {name: tmp_path / f"pwned-{name}" for name in (
        "run-stream", "tasks-stream", "strikes", "tasks-strikes", "result", "stored-task")}
    redis.xadd("massgen:stream", run_message(markers["run-stream"], "evil-1",
                                             "massgen.run_session"))
    redis.xadd("massgen-tasks:stream", run_message(markers["tasks-stream"], "evil-2",
                                                   "run_consensus"))
    redis.xadd("massgen:strikes", strike_message(markers["strikes"]))
    redis.xadd("massgen-tasks:strikes", strike_message(markers["tasks-strikes"]))

    # Both still run sessions: a plain run, then an MCP task whose stored result and
    # stored arguments are swapped for commands before the client reads them.
    sid = await start(front, server)
    assert (await follow(front, sid))["status"] == "completed"
    extension_hooks.register_internal_client_extension_factory(_build_tasks_client_extension)
    try:
        async with Client(f"{front}/mcp") as client:
            task = await call_tool_task(client, "run_consensus", {
                "question": "What is 6*7?", "models": models(server)})
            assert data(await task.result())["status"] == "completed"
            results = [k for k in redis.scan_iter("massgen-tasks:results:*")]
            assert results, "no stored task result to tamper with"
            for key in results:  # py-key-value's entry; Docket's own value inside
                stored = redis.get(key)
                assert stored is not None
                entry = json.loads(stored)
                entry["value"]["data"] = base64.b64encode(evil(markers["result"])).decode()
                redis.set(key, json.dumps(entry))
            with pytest.raises(MCPError):
                await task.status()
            runs = [k for k in redis.scan_iter("massgen-tasks:runs:*")
                    if redis.hget(k, "args")]
            assert runs, "no stored task to tamper with"
            for key in runs:
                redis.hset(key, "args", evil(markers["stored-task"]))
            with pytest.raises(MCPError):
                await task.status()
    finally:
        monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])

    assert [name for name, marker in markers.items() if marker.exists()] == []
    text = logs(pool)
    assert len(re.findall(r"refused a payload read from the pool's Redis: it names "
                          r"posix\.system", text)) >= 6, text[-3000:]
    assert "dropped task 'evil-1'" in text and "dropped task 'evil-2'" in text
    assert text.count("dropped a strike instruction") >= 2
    # Dropped, not left pending for redelivery, and nobody stopped.
    for group_stream in ("massgen:stream", "massgen-tasks:stream"):
        for group in redis.xinfo_groups(group_stream):
            assert group["pending"] == 0, (group_stream, group)
    assert worker.poll() is None and pool.procs[0].poll() is None
    sid = await start(front, server, "after the attack")
    assert (await follow(front, sid))["status"] == "completed"


def test_the_guard_is_checked_against_this_pydocket() -> None:
    """The guard replaces ``cloudpickle.loads`` and wraps the two ``from_message``: a new
    pydocket must be checked again (guard_docket refuses any other version)."""
    from importlib import metadata

    assert payloads.supported(metadata.version("pydocket"))
    root = Path(docket.__file__).parent
    sites = {}
    for source in sorted(root.rglob("*.py")):
        text = source.read_text()
        assert not re.search(r"\bimport pickle\b|\bfrom (cloud)?pickle import\b|\bmarshal\b",
                             text), source
        found = len(re.findall(r"\bloads\(", text)) - len(re.findall(r"json\.loads\(", text))
        if found:
            sites[str(source.relative_to(root))] = (
                found, len(re.findall(r"\bcloudpickle\.loads\(", text)))
    assert sites == {"execution.py": (4, 4), "strikelist.py": (1, 1), "docket.py": (2, 2)}


def test_the_pydocket_range_checked_at_start_is_the_one_declared() -> None:
    """What the guard accepts at run time and what the resolver is told are one range: with
    pydocket 0.28.0 on the index and only 0.27.0 accepted, every pool test failed and no worker
    started, instead of the resolver choosing a pydocket the guard knows."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    for extra in ("pool", "test"):
        assert f"pydocket{payloads.PYDOCKET}" in extras[extra], extra
    assert [payloads.supported(v) for v in ("0.26.2", "0.27.0", "0.27.2", "0.28.0")] == [
        False, True, True, True]
    assert not any(payloads.supported(v) for v in ("0.29.0", "1.0", "0.28.1rc1", "0.28.0+local"))


def test_only_plain_data_and_our_records_load() -> None:
    from massgen_mcp.core.options import RunOptions

    payloads.guard_docket()
    plain = ("s", 1, 2.5, None, [1], {"a": (1, 2)}, {3}, frozenset({4}), b"x",
             RunOptions(timeout_s=30), ConfigError("bad"), ValueError("x"))
    loaded = payloads.loads(pickle.dumps(plain))
    assert loaded[:9] == plain[:9] and loaded[9] == plain[9]
    assert isinstance(loaded[10], ConfigError) and str(loaded[10]) == "bad"
    for hostile in (Command("true"), eval, Path, pickle.Unpickler, Client, SystemExit(0),
                    KeyboardInterrupt()):
        with pytest.raises(payloads.UnsafePayloadError):
            payloads.loads(pickle.dumps(hostile))


# Only allow-listed names, but BUILD sets attributes: on an enum member that a value lookup
# returns (RunStatus.COMPLETED now says "failed"), or on a class (its __hash__ gone).
RETAG_COMPLETED = (b"\x80\x04cmassgen_mcp.core.records\nRunStatus\n(Vcompleted\ntR"
                   b"}(V_value_\nVfailed\nub.")
UNHASH_CLASS = b"\x80\x04cmassgen_mcp.core.records\nRunStatus\nN}(V__hash__\nNu\x86b."


def test_a_pickle_changes_no_object_it_did_not_make() -> None:
    from massgen_mcp.core.records import RunStatus

    payloads.guard_docket()
    for hostile in (RETAG_COMPLETED, UNHASH_CLASS):
        with pytest.raises(payloads.UnsafePayloadError, match="sets attributes"):
            payloads.loads(hostile)
    assert RunStatus.COMPLETED.value == "completed" and hash(RunStatus.COMPLETED)


async def test_a_pickle_cannot_change_a_worker_s_enums(pool: Pool, scripted: Any) -> None:
    server = scripted(agree)
    front = pool.front_end()
    worker = pool.worker()
    pool.wait_workers(1)
    redis = Redis.from_url(pool.url)
    redis.xadd("massgen:stream", {
        "key": "retag", "when": "2026-01-01T00:00:00+00:00", "function": "massgen.run_session",
        "args": RETAG_COMPLETED, "kwargs": pickle.dumps({}), "attempt": "1",
        "generation": "0"})
    sid = await start(front, server)
    assert (await follow(front, sid))["status"] == "completed"
    assert "sets attributes on RunStatus" in logs(pool)
    assert worker.poll() is None


def this_host() -> str:
    """An address of this machine that is not loopback (the one its default route uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a documentation address: nothing is sent
        except OSError:
            pytest.skip("this machine has no address but loopback")
        return str(probe.getsockname()[0])


def massgen(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MASSGEN_HOME": str(home)}
    env.pop("MASSGEN_REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "massgen_mcp", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_an_open_redis_on_another_host_is_refused_unless_the_user_accepts_it(
        tmp_path: Path, home: Path) -> None:
    assert REDIS is not None
    host, port = this_host(), free_port()
    subprocess.run([REDIS, "--port", str(port), "--bind", host, "--protected-mode", "no",
                    "--save", "", "--dir", str(tmp_path), "--daemonize", "yes"], check=True,
                   capture_output=True)
    redis = Redis(host=host, port=port)
    try:
        Pool._until(lambda: _answers(redis), "redis did not start")
        url = f"redis://{host}:{port}/0"
        for command in (["doctor"], ["worker"], ["serve", "--http", "--port", "0"]):
            refused = massgen(*command, "--redis", url, home=home)
            assert refused.returncode != 0
            message = refused.stderr.strip().splitlines()[-1]
            assert "no password" in message and "--insecure-redis" in message, refused.stderr
        accepted = massgen("doctor", "--redis", url, "--insecure-redis", home=home)
        assert f"on the worker pool at {url}; 0 worker(s) live" in accepted.stdout, (
            accepted.stderr)
        redis.config_set("requirepass", "s3cret")
        secured = massgen("doctor", "--redis", f"redis://:s3cret@{host}:{port}/0", home=home)
        assert f"on the worker pool at redis://:***@{host}:{port}/0" in secured.stdout, (
            secured.stderr)
        assert "s3cret" not in secured.stdout + secured.stderr
        # redis-py reads the password from the query too: masked the same way.
        queried = massgen("doctor", "--redis", f"redis://{host}:{port}/0?password=s3cret",
                          home=home)
        assert f"on the worker pool at redis://{host}:{port}/0?password=***" in queried.stdout, (
            queried.stderr)
        assert "s3cret" not in queried.stdout + queried.stderr
    finally:
        with contextlib.suppress(RedisError):
            Redis(host=host, port=port, password="s3cret").shutdown(nosave=True)
        with contextlib.suppress(RedisError):
            redis.shutdown(nosave=True)


def _answers(redis: Redis) -> bool:
    try:
        return bool(redis.ping())
    except RedisError:
        return False


def test_which_redis_counts_as_protected() -> None:
    for url in ("redis://127.0.0.1:6379/0", "redis://localhost/0", "redis://[::1]/0",
                "unix:///run/redis.sock", "redis://:pw@10.0.0.5/0", "rediss://u:pw@h/0",
                "redis://10.0.0.5/0?password=pw",
                "rediss://h/0?ssl_certfile=/c.pem&ssl_keyfile=/k.pem"):
        assert PoolConfig(url).url == url
    for url in ("redis://10.0.0.5:6379/0", "rediss://redis.internal/0", "redis://u@h/0"):
        with pytest.raises(ConfigError, match="--insecure-redis"):
            PoolConfig(url)
        assert PoolConfig(url, insecure=True).url == url


POOL_URL = "redis://:pool-pw-6c1f9a@redis.internal:6379/0"
DATABASE_URL = "postgres://app:db-pw-93be0d@db.internal/app"
QUERY_URLS = {"CACHE_URL": "redis://cache.internal/0?password=cache-pw-51aa0c",
              "ANALYTICS_DSN": "postgresql://app@db.internal/prod?sslmode=require&Password=pg-pw-1f"}
ECHO_ENV = "import json, os, sys\nopen(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))\n"


async def test_no_child_gets_the_pool_s_redis_url_or_a_url_password(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A coding CLI and an MCP server (real child processes that write down their
    environment) on a worker whose Redis URL holds a password."""
    from massgen_mcp.core.agent import AgentSpec, McpServerSpec
    from massgen_mcp.core.secrets import redact
    from massgen_mcp.providers.base import CallContext
    from massgen_mcp.providers.cli.provider import CliProvider
    from massgen_mcp.tools.mcp_servers import McpToolbox

    monkeypatch.setenv("MASSGEN_REDIS_URL", POOL_URL)
    monkeypatch.setenv("REDIS_URL", POOL_URL)  # the same URL under a name of its own
    monkeypatch.setenv("DATABASE_URL", DATABASE_URL)
    for name, url in QUERY_URLS.items():
        monkeypatch.setenv(name, url)
    monkeypatch.setenv("LANG", "C.UTF-8")
    PoolConfig(POOL_URL)  # as a worker starts
    cli_env, mcp_env = tmp_path / "cli-env.json", tmp_path / "mcp-env.json"
    claude = tmp_path / "claude"
    claude.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n{ANSWER_PROBE}"
        f"open({str(cli_env)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'is_error': False, "
        "'result': json.dumps(dict(os.environ)), 'usage': {}}))\n")
    claude.chmod(0o755)
    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(claude))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its version, learned
    completion = await CliProvider().complete(
        AgentSpec(id="c", model="cli/claude"),
        [{"role": "user", "content": "print your environment"}], tools=None, timeout_s=60,
        context=CallContext("sid", None))
    toolbox = McpToolbox([McpServerSpec(name="echo", command=sys.executable,
                                        args=["-c", ECHO_ENV, str(mcp_env)])])
    try:
        await toolbox.start()
    finally:
        await toolbox.aclose()
    for seen in (json.loads(cli_env.read_text()), json.loads(mcp_env.read_text()),
                 json.loads(completion.content or "{}")):
        assert "MASSGEN_REDIS_URL" not in seen and "REDIS_URL" not in seen
        assert not [v for v in seen.values() if "-pw-" in v], seen
    assert json.loads(cli_env.read_text())["LANG"] == "C.UTF-8"  # the rest is there
    # And wherever either URL is written (records, logs, errors), its password is masked.
    shown = redact(f"redis said no to {POOL_URL}; pool-pw-6c1f9a; {DATABASE_URL}")
    assert "-pw-" not in shown and "redis://:***@redis.internal" in shown
    assert "postgres://app:***@db.internal" in shown
    shown = redact(" ".join(QUERY_URLS.values()))
    assert "-pw-" not in shown and "prod?sslmode=require&Password=***" in shown


@pytest.mark.parametrize(("text", "shown"), [
    ("redis://h:6379/0?password=s3cr3tQ", "redis://h:6379/0?password=***"),
    ("redis://h/0?db=1&PASSWORD=s3cr3tQ&x=1", "redis://h/0?db=1&PASSWORD=***&x=1"),
    # a user alone may be a token (https://TOKEN@host): masked too (issue 47)
    ("'postgresql://app@db/prod?password=s3cr3tQ'", "'postgresql://***@db/prod?password=***'"),
    ("https://h/cb?access_token=s3cr3tQ#top", "https://h/cb?access_token=***#top"),
    ("https://h/?api_key=s3cr3tQ;pwd=s3cr3tQ", "https://h/?api_key=***;pwd=***"),
    ("u?pass=s3cr3tQ&Secret=s3cr3tQ&key=s3cr3tQ&auth=s3cr3tQ&token=s3cr3tQ",
     "u?pass=***&Secret=***&key=***&auth=***&token=***"),
    ("redis://:s3cr3tQ@h/0?password=s3cr3tQ", "redis://:***@h/0?password=***"),
    ("https://h/search?q=password&page=2", "https://h/search?q=password&page=2"),
])
def test_credentials_in_a_url_query_are_masked(text: str, shown: str) -> None:
    from massgen_mcp.core.secrets import carries_credential, redact
    from massgen_mcp.pool.live import redact_url

    assert redact(text) == shown
    assert carries_credential(text) == (shown != text)
    if "://" in text and not text.startswith("'"):
        assert redact_url(text) == shown


def front_end_command(pool: Pool, token: str | None, key: str | None, port: int,
                      home: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """`serve --http --redis` on ``port`` with this token and tasks key (None: unset)."""
    env = {k: v for k, v in pool.env().items()
           if k not in ("MASSGEN_MCP_TOKEN", "FASTMCP_TASKS_ENCRYPTION_KEY")}
    env.update({name: value for name, value in (
        ("MASSGEN_MCP_TOKEN", token), ("FASTMCP_TASKS_ENCRYPTION_KEY", key)) if value})
    if home is not None:
        env["MASSGEN_HOME"] = str(home)
    return [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(port),
            "--redis", pool.url], env


def refused(pool: Pool, token: str | None, key: str | None) -> str:
    """The last line of a front end that refuses to start."""
    command, env = front_end_command(pool, token, key, free_port())
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def started(pool: Pool, token: str | None, key: str | None, home: Path | None = None
            ) -> tuple[subprocess.Popen[bytes], str]:
    """A front end that started, and its URL."""
    port = free_port()
    command, env = front_end_command(pool, token, key, port, home)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=(pool.tmp / f"front-{port}.log").open("wb"))
    pool.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    pool._until(lambda: pool._health(url) is not None or proc.poll() is not None,
                "front end did not start")
    assert proc.poll() is None, (pool.tmp / f"front-{port}.log").read_text()
    return proc, url


TOKEN_ONE, KEY_A = "token-one-" + "1" * 20, "tasks-key-" + "a" * 20


@pytest.mark.slow
def test_front_ends_of_one_pool_agree_on_token_and_tasks_key(pool: Pool) -> None:
    """A front end that differs from the live ones refuses to start, with the reason; one
    without a token never serves a pool that front ends with a token served."""
    first, _ = started(pool, TOKEN_ONE, KEY_A)
    assert "use another MASSGEN_MCP_TOKEN:" in refused(pool, "token-two-" + "2" * 20, KEY_A)
    assert "use another FASTMCP_TASKS_ENCRYPTION_KEY:" in refused(pool, TOKEN_ONE,
                                                                   "tasks-key-" + "b" * 20)
    second, _ = started(pool, TOKEN_ONE, KEY_A)  # the same: joins
    assert "not for callers without one: set MASSGEN_MCP_TOKEN" in refused(pool, None, None)
    stored = Redis.from_url(pool.url).get("massgen:frontends") or b""
    assert b"token-one" not in stored and b"tasks-key" not in stored
    for proc in (first, second):
        proc.terminate()
        proc.wait(30)
    # Still, once all are gone: sessions started with a token stay behind one.
    assert "not for callers without one" in refused(pool, None, None)


def http_status(url: str, method: str = "GET", token: str | None = None,
                body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method, data=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.slow
def test_a_pool_never_forgets_that_it_is_protected(pool: Pool, tmp_path: Path,
                                                   home: Path) -> None:
    """Redis emptied (FLUSHALL): the shared home still says the pool is protected. A front end
    without a token that joined anyway (another home, while Redis was empty) stops serving
    with 503 and one line at its next check; the protected one keeps serving, behind its
    token."""
    first, first_url = started(pool, TOKEN_ONE, KEY_A)
    redis = Redis.from_url(pool.url)
    redis.flushall()
    assert "not for callers without one" in refused(pool, None, None)
    assert redis.exists("massgen:protected")  # the refusal told Redis again
    assert (home / "pool-massgen.protected").is_file()

    # One that cannot see the shared home, started while Redis is empty and the protected
    # front end is paused (so it cannot put the fact back first): it joins.
    first.send_signal(signal.SIGSTOP)
    try:
        redis.flushall()
        _, stray_url = started(pool, None, None, home=tmp_path / "elsewhere")
    finally:
        first.send_signal(signal.SIGCONT)
    pool._until(lambda: http_status(f"{stray_url}/healthz")[0] == 503
                and b"differs" in http_status(f"{stray_url}/healthz")[1],
                "the front end without a token kept serving", timeout=4 * TTL_S)
    for method, path, body in (("POST", "/v1/chat/completions",
                                b'{"model": "massgen", "messages": []}'),
                               ("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'),
                               ("GET", "/sessions", None)):
        status, reply = http_status(stray_url + path, method, body=body)
        assert status == 503, (path, reply)
        assert json.loads(reply)["error"]["message"] == GATE_MESSAGE
        assert b"\n" not in reply and b"elsewhere" not in reply
    assert (tmp_path / "elsewhere" / "pool-massgen.protected").is_file()  # for good
    # The protected front end still serves, and still only with its token.
    assert http_status(f"{first_url}/v1/models")[0] == 401
    assert http_status(f"{first_url}/v1/models", token=TOKEN_ONE)[0] == 200
    stored = json.loads(redis.get("massgen:frontends") or b"{}")
    assert stored["token"] != "none"


TOKEN_TWO = "token-two-" + "2" * 20


@pytest.mark.slow
def test_a_pool_is_protected_by_its_token_not_by_any_token(pool: Pool, tmp_path: Path,
                                                           home: Path) -> None:
    """Redis emptied (FLUSHALL), and a front end with *another* token joins before the
    protected ones refresh: with the shared home it refuses to start (the marker names the
    token, by a salted hash); from another home it joins, then stops serving (503) at its
    next check, and the protected front end never stops serving its own callers."""
    first, first_url = started(pool, TOKEN_ONE, KEY_A)
    redis = Redis.from_url(pool.url)
    first.send_signal(signal.SIGSTOP)  # it cannot put the record back before the others join
    try:
        redis.flushall()
        assert "use another MASSGEN_MCP_TOKEN" in refused(pool, TOKEN_TWO, KEY_A)
        marker = (home / "pool-massgen.protected").read_text()
        stored = redis.get("massgen:protected") or b""
        assert json.loads(stored) == json.loads(marker.splitlines()[-1])  # put back as it was
        assert TOKEN_ONE not in marker and TOKEN_ONE.encode() not in stored
        redis.flushall()
        _, stray_url = started(pool, TOKEN_TWO, KEY_A, home=tmp_path / "elsewhere")
    finally:
        first.send_signal(signal.SIGCONT)
    pool._until(lambda: http_status(f"{stray_url}/v1/models", token=TOKEN_TWO) == (
                    503, json.dumps({"error": {"message": GATE_MESSAGE, "type": "server_error",
                                               "param": None, "code": "pool_mismatch"}}
                                    ).encode()),
                "the front end with another token kept serving", timeout=4 * TTL_S)
    assert http_status(f"{first_url}/v1/models", token=TOKEN_ONE)[0] == 200
    assert b"differs" not in http_status(f"{first_url}/healthz")[1]
    assert json.loads(redis.get("massgen:protected") or b"") == json.loads(
        (home / "pool-massgen.protected").read_text().splitlines()[-1])


GOOD_RECORD = {"salt": "a" * 32, "token": "b" * 64, "since": 1.5}


@pytest.mark.parametrize("stored", [
    "1", "", "[" * 5000 + "]" * 5000, "x" * 1_000_000, json.dumps({**GOOD_RECORD, "salt": "zz"}),
    json.dumps({**GOOD_RECORD, "since": True}), json.dumps({**GOOD_RECORD, "since": "1"}),
    json.dumps({**GOOD_RECORD, "token": "B" * 64}), json.dumps([GOOD_RECORD]),
    json.dumps(GOOD_RECORD).replace("1.5", "1e999"),
])
def test_a_planted_protection_record_names_no_token(stored: str) -> None:
    """Anyone who reaches Redis writes what it likes in `<pool>:protected`: what is not a
    record (one short line, checked field by field) names no token, and never raises."""
    from massgen_mcp.pool.frontends import protection

    assert protection(stored) is None
    assert protection(stored.encode()) is None
    assert protection(json.dumps(GOOD_RECORD)) == GOOD_RECORD


def docket_message(**fields: Any) -> Fields:
    """A well-formed run-stream message (the pool's task, a session id), with ``fields``
    changed; a field given as None is left out."""
    message: dict[str, Any] = {
        "key": "k", "when": "2026-01-01T00:00:00+00:00", "function": "massgen.run_session",
        "args": pickle.dumps(("01JD3V6Y8T2K6Q3M1R5X0B7N4C",)), "kwargs": pickle.dumps({}),
        "attempt": "1", "generation": "0"}
    message.update(fields)
    return {k: v for k, v in message.items() if v is not None}


MALFORMED: dict[str, dict[str, Any]] = {  # what each message lacks or holds instead
    "no-key": {"key": None}, "no-when": {"when": None}, "bad-when": {"when": "not a date"},
    "bad-attempt": {"attempt": "x" * 5000}, "bad-generation": {"generation": "-"},
    "no-function": {"function": None}, "binary-function": {"function": b"\xff\xfe"},
    "not-a-pickle": {"args": b"\x00garbage"}, "args-int": {"args": pickle.dumps(5)},
    "kwargs-list": {"kwargs": pickle.dumps([1])}, "kwargs-keys": {"kwargs": pickle.dumps({1: 2})},
    "huge-key": {"key": "K" * 1_000_000}, "binary-key": {"key": b"\xff\xfe"},
    "just-junk": {f: None for f in ("key", "when", "function", "args", "kwargs", "attempt",
                                    "generation")} | {"junk": "1"},
}
BAD_STRIKES: list[Fields] = [
    {"junk": "1"},
    {"direction": "sideways", "operator": "==", "value": pickle.dumps("x")},
    {"direction": "strike", "function": "massgen.run_session", "parameter": "session_id",
     "operator": "~~", "value": pickle.dumps("x")},
    {"direction": "strike", "operator": "==", "value": b"\x00garbage"},
    {"direction": b"\xff", "operator": "==", "value": pickle.dumps("x")},
    {"direction": "strike", "operator": "==", "parameter": "p" * 100_000,
     "value": pickle.dumps("x")},
]
BOGUS_IDS = [b"../../pwned-cancel", b"x" * 1_000_000, b"not-a-ulid", b"\xff\xfe\x00",
             b'{"sid":"../../pwned-live"}']


def outside_home(tmp_path: Path, home: Path) -> set[Path]:
    """What exists next to the home and in the folders above the test's (where
    ``../../…`` from the sessions folder would land)."""
    return {p for p in (*tmp_path.parent.iterdir(), *tmp_path.iterdir(),
                        *home.iterdir()) if "pwned" in p.name}


async def test_no_malformed_message_or_value_in_redis_stops_a_worker_or_front_end(
        pool: Pool, scripted: Any, tmp_path: Path, home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream messages Docket cannot read, strikes it cannot parse, cancels and live
    messages that name no session, statuses and claims that are no such thing: each is
    logged once and dropped, nothing outside the home is touched, and the pool then
    finishes normal runs (a plain one and an MCP task)."""
    from fastmcp.client import extension_hooks
    from fastmcp_tasks.client import _build_tasks_client_extension, call_tool_task

    server = scripted(agree)
    front = pool.front_end()
    worker = pool.worker()
    pool.wait_workers(1)
    home.mkdir(exist_ok=True)
    redis = Redis.from_url(pool.url)
    done = await start(front, server, "before")
    assert (await follow(front, done))["status"] == "completed"

    sent: dict[str, bytes] = {}
    for stream in ("massgen:stream", "massgen-tasks:stream"):
        function = "massgen.run_session" if stream == "massgen:stream" else "run_consensus"
        for name, fields in MALFORMED.items():
            fields = {"function": function, **fields} if "function" not in fields else fields
            message_id = redis.xadd(stream, docket_message(**fields))
            assert isinstance(message_id, bytes)  # the client does not decode responses
            sent[f"{stream} {name}"] = message_id
    # Well-formed, but the session id escapes the home: the worker's task drops it.
    redis.xadd("massgen:stream", docket_message(args=pickle.dumps(("../../pwned-run",))))
    for stream in ("massgen:strikes", "massgen-tasks:strikes"):
        for strike in BAD_STRIKES:
            redis.xadd(stream, strike)
    for channel in ("massgen:cancel", "massgen:live"):
        for bogus in BOGUS_IDS:
            redis.publish(channel, bogus)
    redis.publish("massgen:live", b'{"sid":"x","event":' + b"[" * 100_000)
    redis.set("massgen:claim:01JD3V6Y8T2K6Q3M1R5X0B7N4C", b"\xff\xfe")
    redis.set("massgen:cancel:../../pwned-key", b"\xff")

    def pending() -> list[Any]:
        return [(s, g["pending"]) for s in ("massgen:stream", "massgen-tasks:stream")
                for g in redis.xinfo_groups(s) if g["pending"]]

    def all_dropped() -> bool:
        text = logs(pool)
        return not pending() and len(re.findall(r"dropped task ", text)) >= len(sent)

    with contextlib.suppress(AssertionError):
        Pool._until(all_dropped, "", timeout=30)
    text = logs(pool)
    assert worker.poll() is None and pool.procs[0].poll() is None, text[-3000:]
    assert pending() == [], text[-3000:]
    for what, message_id in sent.items():
        docket_name = what.split(":")[0]  # stream ids repeat across streams: name both
        assert len(re.findall(rf"dropped task .* \(message '{message_id.decode()}'\) from "
                              rf"{docket_name}:", text)) == 1, (what, text[-3000:])
    assert "dropping a queued item that is not a session id" in text
    assert "Error monitoring strikes" not in text and "Traceback" not in text, text[-3000:]
    assert text.count("dropped a strike instruction") >= 3 * len(BAD_STRIKES)
    assert text.count("dropped a cancel that names no session") == len(BOGUS_IDS)
    assert "subscription to" not in text, text[-3000:]  # no message cost a subscription
    assert len(max(text.splitlines(), key=len)) < 2000  # no megabyte echoed to a log

    # A status in Redis that is not this session's (copied from a run elsewhere, or no
    # status at all) is dropped: the record answers.
    for garbage in (b"\xff\xfe", b"[" * 100_000, json.dumps(
            {**json.loads(redis.get(f"massgen:status:{done}") or b"{}"),
             "session_id": "../../pwned-status", "status": "running"}).encode()):
        redis.set(f"massgen:status:{done}", garbage)
        async with Client(f"{front}/mcp") as client:
            status = (await client.call_tool("get_status", {"session_id": done})
                      ).structured_content
            assert (status["session_id"], status["status"]) == (done, "completed")
            setup = (await client.call_tool("check_setup", {})).structured_content
            assert setup["sessions_running"] == 1  # the garbage claim, read as text
        assert redis.get(f"massgen:status:{done}") is None  # dropped
    assert outside_home(tmp_path, home) == set()

    # And both still finish runs: a plain one and an MCP task.
    assert worker.poll() is None and pool.procs[0].poll() is None
    sid = await start(front, server, "after the attack")
    assert (await follow(front, sid))["status"] == "completed"
    monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])
    extension_hooks.register_internal_client_extension_factory(_build_tasks_client_extension)
    try:
        async with Client(f"{front}/mcp") as client:
            task = await call_tool_task(client, "run_consensus", {
                "question": "a task after the attack", "models": models(server)})
            assert data(await task.result())["status"] == "completed"
    finally:
        monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])


async def test_a_task_s_session_from_redis_that_is_no_session_id_is_not_followed(
        pool: Pool, home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``<pool>:task:<id>`` names the session a redelivered MCP task follows; one that
    names no session (``../../etc``) is dropped, and the task starts its run anew."""
    from massgen_mcp.pool.executor import PoolExecutor
    from massgen_mcp.records.store import SessionStore

    runner = await PoolExecutor(SessionStore(home), PoolConfig(pool.url)).open()
    try:
        redis = Redis.from_url(pool.url)
        for bogus in (b"../../etc", b"x" * 100_000, b"\xff\xfe"):
            redis.set("massgen:task:t-1", bogus)
            assert await runner.recall("t-1") is None
        assert caplog.text.count("dropped what redis says it started") == 3
        await runner.remember("t-1", "01JD3V6Y8T2K6Q3M1R5X0B7N4C")
        assert await runner.recall("t-1") == "01JD3V6Y8T2K6Q3M1R5X0B7N4C"
    finally:
        await runner.aclose()


async def test_bytes_that_are_no_text_in_a_queued_run_s_keys_lose_no_run(
        pool: Pool, scripted: Any) -> None:
    """A worker reads a queued run's cancel flag and claim before it starts it: bytes that
    are no UTF-8 there are read as text (a cancel flag is set; a claim is someone's and
    lapses), instead of failing the delivery and leaving the run queued for ever."""
    server = scripted(agree)
    front = pool.front_end()
    flagged, claimed = await start(front, server, "a"), await start(front, server, "b")
    redis = Redis.from_url(pool.url)
    redis.set(f"massgen:cancel:{flagged}", b"\xff\xfe")
    redis.set(f"massgen:claim:{claimed}", b"\xff\xfe", px=2000)
    worker = pool.worker()
    async with asyncio.timeout(60):
        assert (await follow(front, flagged))["status"] == "cancelled"
        assert (await follow(front, claimed))["status"] == "completed"
    assert worker.poll() is None
