"""Hostile input at every edge: a symlink loop, JSON nested 100,000 deep, text that is not
UTF-8, a control character in a config, a wrong Redis password. Each is a clear error where it
comes in (or a corrective retry for the model that sent it) and the run goes on: never a
traceback, never ``internal_error``, never a session folder without a status."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastmcp import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from massgen_mcp.server.app import create_server
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, text, tool_calls
from tests.helpers import BIG_CHUNK_CHARS, Scripted, run_team, team_for
from tests.servers import TOKEN, free_port, server_env

DEEP = "[" * 100_000


def cli(home: Path, *args: str, stdin: bytes | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[bytes]:
    """The real CLI; arguments may hold bytes that are not UTF-8 (as a shell passes them)."""
    argv: list[str | bytes] = [sys.executable, "-m", "massgen_mcp",
            *(a.encode("utf-8", "surrogateescape") for a in args)]
    return subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd, timeout=120,
                          env=server_env(home))


def assert_clean_error(done: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    """Exit 1 with one readable message that names what is wrong; no traceback."""
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 1, err
    assert "Traceback" not in err and "Error:" not in err.split("massgen-mcp:")[0], err
    for needle in needles:
        assert needle in err, err
    return err


def sessions(home: Path) -> list[Path]:
    folder = home / "sessions"
    return sorted(folder.iterdir()) if folder.exists() else []


def assert_no_orphans(home: Path) -> None:
    """Every session folder has its status: nothing half-made."""
    for folder in sessions(home):
        assert (folder / "status.json").is_file(), f"orphan session folder {folder.name}"


# -- a symlink loop in the workspace ---------------------------------------------------------


def loop_reader(req: ChatRequest) -> Reply:
    """Agent a walks into the loop with each tool, then answers."""
    if req.model != "a" or req.vote_labels or req.is_final:
        return agree(req)
    seen = [m["content"] for m in req.messages if m["role"] == "tool"]
    steps = [("read_file", {"path": "loop"}), ("list_files", {"path": "loop/x"}),
             ("search_text", {"pattern": "x", "path": "loop"})]
    if len(seen) < len(steps):
        name, args = steps[len(seen)]
        return tool_calls((name, json.dumps(args)))
    return answer("42 " + " | ".join(seen))


async def test_a_symlink_loop_is_an_error_for_the_agent_and_the_run_goes_on(
        scripted: Scripted, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "loop").symlink_to("loop")  # loop -> loop: resolving it never ends
    server = scripted(loop_reader)
    models = [f"openai/{m}@{server.base_url}" for m in "abc"]
    async with Client(create_server(root=project)) as client:
        done = (await client.call_tool("run_consensus", {
            "question": "q", "models": models, "wait_s": 30,
            "options": {"workspace_tools": True, "retry_backoff_s": 0.01}})).structured_content
        result = (await client.call_tool("get_result", {
            "session_id": done["session_id"], "detail": "full"})).structured_content
    assert result["status"] == "completed", result
    said = next(a["text"] for a in result["answers"] if a["agent_id"] == "agent_a")
    assert said.count("symbolic link loop") == 3, said


# -- JSON nested 100,000 deep in a model's reply ---------------------------------------------


def deep_replies(req: ChatRequest) -> Reply:
    """Agent a (native tools) and agent b (JSON in text) first answer with arguments nested
    100,000 deep; after the corrective retry they answer properly. (a's arguments are a string
    in the reply's JSON, read as text whole or streamed, so a gets the corrective retry too;
    litellm could not convert such a whole reply, and dropped a.)"""
    if req.vote_labels or req.is_final or req.is_retry:
        return agree(req)
    if req.model == "a":
        return tool_calls(("new_answer", '{"content": ' + DEEP))
    if req.model == "b":
        return text('Here: {"action": "new_answer", "content": ' + DEEP)
    return agree(req)


@pytest.mark.parametrize("drafts", [False, True], ids=["whole", "streamed"])
async def test_deeply_nested_json_in_a_reply_gets_a_corrective_retry(
        scripted: Scripted, drafts: bool) -> None:
    server = scripted(deep_replies, chunk_chars=BIG_CHUNK_CHARS)
    team = team_for(server, agent_overrides={"b": {"tool_calling": False}})
    out = await run_team(team, drafts=drafts)
    assert out.result["status"] == "completed", out.result
    invalid = {(e["agent_id"], e["reason"]) for e in out.events("invalid_action")}
    for model in ("b", "a"):
        assert (f"agent_{model}", "bad_arguments") in invalid
        retry = next(r for r in server.requests if r.model == model and r.is_retry)
        assert "nested deeper than 64 levels" in json.dumps(retry.messages)
    assert out.events("agent_dropped") == []
    assert "Traceback" not in json.dumps(out.events())


# -- text that is not UTF-8 ------------------------------------------------------------------


def test_a_question_that_is_not_utf8_is_refused_by_the_cli(home: Path) -> None:
    for args, stdin in [(("run", "\udcff"), None), (("run", "-"), b"q\xff"),
                        (("run", "q", "--context", "\udcff"), None)]:
        done = cli(home, *args, "--models", "openai/a@http://127.0.0.1:9/v1", stdin=stdin)
        assert_clean_error(done, "the byte 0xff, which is not UTF-8")
    assert sessions(home) == []


def test_a_lone_surrogate_in_a_v1_message_is_a_json_400(
        served: tuple[str, subprocess.Popen[bytes]], home: Path) -> None:
    api = served[0]
    body = ('{"model": "massgen", "messages": [{"role": "user", "content": "\\ud800"}]}')
    reply = httpx.post(f"{api}/chat/completions", content=body, timeout=30,
                       headers={"Authorization": f"Bearer {TOKEN}",
                                "Content-Type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert "lone surrogate" in reply.json()["error"]["message"]
    assert sessions(home) == []


@pytest.mark.parametrize(("content", "needle"), [
    (b'{"question": "q", "answer": "1"}\n\xff\xfe\n',
     "questions.jsonl:2: byte 1 of the line is not UTF-8"),
    (b'{"question": "q", "answer": "1"}\n' + DEEP.encode() + b"\n",
     "questions.jsonl:2: nested deeper than"),
    (b'{"question": "q\\udcff", "answer": "1"}\n', "questions.jsonl:1: a string: character 2"),
])
def test_a_bad_eval_line_is_named(home: Path, tmp_path: Path, content: bytes,
                                  needle: str) -> None:
    (tmp_path / "questions.jsonl").write_bytes(content)
    done = cli(home, "eval", "questions.jsonl", "--models", "openai/a@http://127.0.0.1:9/v1",
               cwd=tmp_path)
    assert_clean_error(done, needle)


# -- a control character in a config ---------------------------------------------------------


def test_a_config_with_a_control_character_is_a_clear_error(home: Path, tmp_path: Path
                                                            ) -> None:
    (tmp_path / "team.yaml").write_text(
        "agents:\n  - id: a\x01\n    backend: {type: openai, model: a}\n")
    for args in (("validate", "team.yaml"), ("run", "q", "--config", "team.yaml"),
                 ("trust", "team.yaml")):
        assert_clean_error(cli(home, *args, cwd=tmp_path), "team.yaml",
                           "unacceptable character #x0001")
    home.mkdir(parents=True, exist_ok=True)  # as .massgen/config.yaml: what doctor reads
    (home / "config.yaml").write_text((tmp_path / "team.yaml").read_text())
    done = cli(home, "doctor", cwd=tmp_path)
    assert_clean_error(done, "config.yaml", "unacceptable character #x0001")


# -- doctor with a wrong Redis password ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None
                    and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                    reason="redis-server is not installed")
def test_doctor_with_a_wrong_redis_password_says_so(home: Path, tmp_path: Path) -> None:
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--dir", str(tmp_path),
                              "--requirepass", "right-horse-battery"],
                             stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        done = cli(home, "doctor", "--redis", f"redis://:wrong-staple@127.0.0.1:{port}/0")
    finally:
        redis.terminate()
        redis.wait(10)
    err = assert_clean_error(done, "refused", "check the address and password in --redis")
    assert "wrong-staple" not in err and "right-horse-battery" not in err


# -- properties: any text, any JSON, at every edge -------------------------------------------

# Any character, lone surrogates (what undecodable bytes and "\ud800" escapes become) and
# the characters that matter to JSON, YAML and terminals.
CHARS = st.one_of(st.characters(),
                  st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"]),
                  st.sampled_from(list('[]{}":,\\\x00\x01\x1b\x7f\u2028&*!|>-#')))
TEXT = st.lists(CHARS, max_size=40).map("".join)  # st.text drops lone surrogates
DEEP_JSON = st.builds(lambda n, opener, tail: opener * n + tail, st.integers(0, 150_000),
                      st.sampled_from(["[", '{"a": ', '[{"content": ']), TEXT)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8)
JSONISH = st.one_of(TEXT, DEEP_JSON, JSON_VALUES.map(json.dumps),
                    st.builds(lambda value: json.dumps({"action": "new_answer",
                                                        "content": value}), JSON_VALUES))
PROPERTY = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def as_bytes(text: str) -> bytes:
    """The text as a file or socket would carry it: lone surrogates become bytes that are
    not UTF-8."""
    return text.encode("utf-8", "surrogatepass")


def test_any_question_or_context_is_refused_or_answered(scripted: Scripted, home: Path) -> None:
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.core.spec import RunSpec
    from massgen_mcp.service import ConsensusService

    server = scripted(agree)

    @PROPERTY
    @given(question=TEXT, context=st.none() | TEXT)
    @example(question="q\udcff", context=None)  # the byte 0xff on a command line
    @example(question="q", context="\ud800")
    def check(question: str, context: str | None) -> None:
        async def go() -> None:
            service = ConsensusService.local(home)
            try:
                started = await service.start(RunSpec(
                    question=question, context=context,
                    models=[f"openai/a@{server.base_url}", f"openai/b@{server.base_url}"]))
            except ConfigError as exc:
                assert "Traceback" not in str(exc)
                await service.aclose()
                return
            status = await service.wait(started.session_id, 60, until_done=True)
            await service.aclose()
            assert status.status == "completed", status
        asyncio.run(go())
        assert_no_orphans(home)

    check()


@pytest.mark.slow
def test_any_model_reply_is_retried_or_dropped(scripted: Scripted, home: Path) -> None:
    reply = {"text": ""}

    def policy(req: ChatRequest) -> Reply:  # the first answer of a and b is the hostile one
        if req.model in "ab" and req.call_index == 0:
            return (tool_calls(("new_answer", reply["text"])) if req.model == "a"
                    else text(reply["text"]))
        return agree(req)

    server = scripted(policy)

    @PROPERTY
    @given(hostile=JSONISH)
    @example(hostile='{"action": "new_answer", "content": ' + DEEP)
    def check(hostile: str) -> None:
        reply["text"] = hostile
        server._counts.clear()  # every example starts each model's script afresh
        team = team_for(server, agent_overrides={"b": {"tool_calling": False}})
        out = asyncio.run(run_team(team))
        assert out.result["status"] == "completed", out.result
        assert "Traceback" not in json.dumps(out.events())
        assert_no_orphans(home)

    check()


@PROPERTY
@given(content=st.one_of(TEXT, JSONISH, st.builds(
    lambda key, value: f"agents:\n  - id: {key}\n    backend: {{type: openai, model: {value}}}\n",
    TEXT, TEXT)))
def test_any_config_text_is_a_team_or_a_config_error(content: str) -> None:
    import tempfile

    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.team.massgen_yaml import load_config_file

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "team.yaml"
        path.write_bytes(as_bytes(content))
        try:
            load_config_file(path)
        except ConfigError as exc:
            assert "team.yaml" in str(exc)


@PROPERTY
@given(lines=st.lists(JSONISH, min_size=1, max_size=4))
def test_any_eval_file_is_loaded_or_its_bad_line_named(lines: list[str]) -> None:
    import tempfile

    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.evaluation.datasets import load_items

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "q.jsonl"
        path.write_bytes(b"\n".join(as_bytes(line) for line in lines))
        try:
            load_items(str(path))
        except ConfigError as exc:
            assert str(exc).startswith("q.jsonl"), exc


def test_any_http_body_gets_a_json_answer(
        scripted: Scripted, served: tuple[str, subprocess.Popen[bytes]], home: Path) -> None:
    from tests.openai_api import write_team

    write_team(scripted(agree))
    api = served[0]
    chat = st.builds(lambda model, content: json.dumps(
        {"model": model, "messages": [{"role": "user", "content": content}]}),
        st.sampled_from(["massgen/team"]) | TEXT, TEXT)

    @PROPERTY
    @given(body=st.one_of(JSONISH, chat))
    @example(body='{"model": "massgen/team", "messages": [{"role": "user", "content": "\\ud800"}]}')
    def check(body: str) -> None:
        reply = httpx.post(f"{api}/chat/completions", content=as_bytes(body), timeout=60,
                           headers={"Authorization": f"Bearer {TOKEN}",
                                    "Content-Type": "application/json"})
        assert reply.status_code < 500, reply.text
        assert isinstance(reply.json(), dict)
        assert_no_orphans(home)

    check()
    assert served[1].poll() is None  # the server is still up
