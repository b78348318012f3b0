"""The team as one model: the OpenAI-compatible endpoint of `massgen-mcp serve --http` driven by
the official openai SDK and by litellm as a client, the LiteLLM provider in process, and the
Python API. Every team here is three scripted agents behind real HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import massgen_mcp
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree
from tests.helpers import Scripted
from tests.openai_api import write_team
from tests.servers import TOKEN

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

QUESTION: list[ChatCompletionMessageParam] = [{"role": "system", "content": "Answer briefly."},
                                              {"role": "user", "content": "What is 6*7?"}]


def record(home: Path, session_id: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        (home / "sessions" / session_id / "result.json").read_text())
    return result


def test_openai_sdk_gets_the_final_answer_and_the_team_usage(
        scripted: Scripted, api: str, home: Path) -> None:
    from openai import OpenAI

    write_team(scripted(agree))
    client = OpenAI(base_url=api, api_key=TOKEN)
    raw = client.chat.completions.with_raw_response.create(model="massgen/team",
                                                           messages=QUESTION)
    reply = raw.parse()
    session_id = raw.headers["x-massgen-session-id"]
    result = record(home, session_id)
    assert reply.choices[0].message.content == result["final_answer"]
    assert reply.choices[0].message.content is not None
    assert reply.choices[0].message.content.startswith("Final: The answer from")
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == result["usage"]["prompt_tokens"] > 0
    assert reply.usage.total_tokens == result["usage"]["total_tokens"]
    assert reply.model_extra is not None
    extra = reply.model_extra["massgen"]
    assert extra["session_id"] == session_id and extra["winner"] == result["winner"]
    assert extra["tally"] == result["tally"] and reply.model == "massgen/team"
    assert extra["agreement"] == result["agreement"]  # the backing and dissent, read by the SDK
    assert extra["agreement"]["members"] == 3
    request = json.loads((home / "sessions" / session_id / "request.json").read_text())
    assert request["question"] == "What is 6*7?"
    assert request["context"] == "system: Answer briefly."


def test_openai_sdk_streams_progress_then_the_answer(scripted: Scripted, api: str,
                                                     home: Path) -> None:
    from openai import OpenAI

    write_team(scripted(agree))
    client = OpenAI(base_url=api, api_key=TOKEN)
    progress, content, usage, ids = [], [], None, set()
    for chunk in client.chat.completions.create(
            model="massgen/team", messages=QUESTION, stream=True,
            stream_options={"include_usage": True}):
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            progress.append(extra.get("reasoning_content") or "")
            content.append(choice.delta.content or "")
    session_id = ids.pop().removeprefix("chatcmpl-")
    result = record(home, session_id)
    assert "".join(content) == result["final_answer"]
    assert any("answer" in line or "vote" in line for line in progress), progress
    assert usage is not None and usage.total_tokens == result["usage"]["total_tokens"]


def test_litellm_as_a_client_of_the_endpoint(scripted: Scripted, api: str, home: Path) -> None:
    import litellm

    write_team(scripted(agree))
    reply = litellm.completion(model="openai/massgen/team", api_base=api, api_key=TOKEN,
                               messages=QUESTION)
    assert reply.choices[0].message.content.startswith("Final: The answer from")


def test_models_lists_the_teams(scripted: Scripted, api: str) -> None:
    write_team(scripted(agree), "research")
    listed = httpx.get(f"{api}/models", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    ids = [m["id"] for m in listed["data"]]
    assert ids[0] == "massgen" and "massgen/@debate" in ids and "massgen/research" in ids


def test_token_origin_and_unsupported_requests_get_clear_errors(api: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"model": "massgen", "messages": QUESTION}
    assert httpx.post(f"{api}/chat/completions", json=body).status_code == 401
    assert httpx.get(f"{api}/models").status_code == 401
    evil = httpx.post(f"{api}/chat/completions", json=body,
                      headers={**auth, "Origin": "http://evil.example"})
    assert evil.status_code == 403
    other_port = httpx.post(f"{api}/chat/completions", json=body,
                            headers={**auth, "Origin": "http://127.0.0.1:1"})
    assert other_port.status_code == 403  # another local page is another origin
    rebound = httpx.get(f"{api}/models", headers={**auth, "Host": "evil.example"})
    assert rebound.status_code in (403, 421)  # fastmcp's guard answers 421 Misdirected
    unsupported: list[tuple[dict[str, Any], str]] = [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"), ({"n": 2}, "n"),
        ({"logit_bias": {"1": 2}}, "logit_bias"), ({"frobnicate": 1}, "frobnicate"),
        ({"stream": "yes"}, "stream"), ({"n": True}, "n")]
    for extra, param in unsupported:
        bad = httpx.post(f"{api}/chat/completions", json={**body, **extra}, headers=auth)
        assert bad.status_code == 400, extra
        assert bad.json()["error"]["param"] == param
    unknown = httpx.post(f"{api}/chat/completions", json={**body, "model": "massgen/nope"},
                         headers=auth)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    preset = httpx.post(f"{api}/chat/completions", json={**body, "model": "massgen/@nope"},
                        headers=auth)
    assert preset.status_code == 404
    huge = httpx.post(f"{api}/chat/completions", headers=auth, timeout=30, json={
        **body, "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]})
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    no_question = httpx.post(f"{api}/chat/completions", headers=auth, json={
        **body, "messages": [{"role": "assistant", "content": "hi"}]})
    assert no_question.status_code == 400 and "last message" in no_question.text


def test_a_client_that_disconnects_mid_stream_cancels_the_run(
        scripted: Scripted, api: str, home: Path) -> None:
    def slow(req: ChatRequest) -> Reply:
        reply = agree(req)
        reply.delay_s = 20
        return reply

    write_team(scripted(slow))
    with httpx.stream("POST", f"{api}/chat/completions", headers={
            "Authorization": f"Bearer {TOKEN}"}, json={
            "model": "massgen/team", "messages": QUESTION, "stream": True}) as response:
        session_id = response.headers["x-massgen-session-id"]
        first = next(response.iter_lines())
        assert '"role": "assistant"' in first
    status = home / "sessions" / session_id / "status.json"
    deadline = time.monotonic() + 15
    while json.loads(status.read_text())["status"] != "cancelled":
        assert time.monotonic() < deadline, status.read_text()
        time.sleep(0.05)


def test_a_run_without_an_answer_is_an_error_streaming_or_not(
        scripted: Scripted, api: str) -> None:
    from openai import APIError, InternalServerError, OpenAI

    write_team(scripted(lambda req: Reply("error", content="down", status=400)))
    client = OpenAI(base_url=api, api_key=TOKEN, max_retries=0)
    with pytest.raises(InternalServerError, match="with no answer"):  # 502
        client.chat.completions.create(model="massgen/team", messages=QUESTION)
    with pytest.raises(APIError, match="with no answer"):
        for _ in client.chat.completions.create(model="massgen/team", messages=QUESTION,
                                                stream=True):
            pass


def test_a_server_that_stops_ends_the_stream_and_its_run_resumes(
        scripted: Scripted, served: tuple[str, subprocess.Popen[bytes]], home: Path) -> None:
    from openai import APIError, OpenAI

    api, proc = served
    arrived = threading.Event()

    def slow(req: ChatRequest) -> Reply:
        arrived.set()
        reply = agree(req)
        reply.delay_s = 20
        return reply

    write_team(scripted(slow))
    client = OpenAI(base_url=api, api_key=TOKEN, max_retries=0)
    stream = client.chat.completions.with_raw_response.create(
        model="massgen/team", messages=QUESTION, stream=True)
    session_id = stream.headers["x-massgen-session-id"]
    assert arrived.wait(30)
    proc.send_signal(signal.SIGTERM)
    with pytest.raises(APIError, match=r"shutting down.*resume_session"):
        for _ in stream.parse():
            pass
    proc.wait(30)  # uvicorn ends a graceful stop by raising the signal again: -15
    status = json.loads((home / "sessions" / session_id / "status.json").read_text())
    assert status["status"] == "interrupted"


# -- in process ---------------------------------------------------------------------------------

async def test_litellm_provider_runs_the_team_in_process(scripted: Scripted, home: Path) -> None:
    import litellm

    write_team(scripted(agree))
    massgen_mcp.register_with_litellm()
    reply = await litellm.acompletion(model="massgen/team", messages=QUESTION)
    summary = reply._hidden_params["massgen"]
    result = record(home, summary["session_id"])
    assert reply.choices[0].message.content == result["final_answer"]
    assert reply.usage.total_tokens == result["usage"]["total_tokens"] > 0
    assert reply._hidden_params["response_cost"] == result["usage"]["cost_usd"]

    streamed = await litellm.acompletion(model="massgen/team", messages=QUESTION, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in streamed])
    assert text.startswith("Final: The answer from")

    with pytest.raises(Exception, match="no such team"):
        await litellm.acompletion(model="massgen/nope", messages=QUESTION)


def test_python_api_run(scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    result = massgen_mcp.run("What is 6*7?", models=[f"openai/{m}@{server.base_url}"
                                                     for m in "ab"],
                             options={"retry_backoff_s": 0.01})
    assert result.status.value == "completed"
    assert result.final_answer == record(home, result.session_id)["final_answer"]
    assert len(result.votes) == 2 and result.usage.calls == 5


async def test_python_api_arun_names_the_bad_field(home: Path) -> None:
    with pytest.raises(massgen_mcp.ConfigError, match="models: give at least one model"):
        await massgen_mcp.arun("q", models=[" "])
    with pytest.raises(massgen_mcp.ConfigError, match="bogus: unknown key"):
        await massgen_mcp.arun("q", models=["openai/a"], options={"bogus": 1})
    with pytest.raises(RuntimeError, match=r"use 'await massgen_mcp\.arun"):
        massgen_mcp.run("q")
