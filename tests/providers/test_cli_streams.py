"""The coding CLIs' streaming output, read as it comes: Claude Code's ``stream-json`` events
(with ``--include-partial-messages``, the text a few tokens at a time), Codex's ``exec --json``
events (each message whole) and Gemini CLI's ``stream-json`` (the text a chunk at a time).

The files in tests/fixtures/cli_streams are what the real binaries printed, the newest and the
oldest supported of each, given the command line massgen-mcp builds for their version, against
the scripted server on 127.0.0.1 with its reply text sent in four pieces (the prompt: "You are
agent x of a team." / "What is 6*7?"); temporary folder names and the temporary home are
replaced by fixed ones, and the key was the placeholder a keyless endpoint gets. They are read
here as captured and in hostile variants (what a model or a broken binary could make a line
say). The real binaries then stream through the whole provider: a relay between the CLI and
the scripted server holds back the end of the model's reply until the first text reached
``on_text``, so text arriving before the call completes is an order of events, not a timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.providers.base import CallContext, Completion
from massgen_mcp.providers.cli.base import CliVersion, estimate_tokens
from massgen_mcp.providers.cli.catalog import CLIS
from massgen_mcp.providers.cli.provider import CliProvider
from massgen_mcp.testing.scripted import ScriptedServer
from massgen_mcp.testing.wire import tokens
from tests.coding_clis import STAND_IN_VERSION, marked_processes, needs_clis, stand_in
from tests.helpers import Scripted

FIXTURES = Path(__file__).parents[1] / "fixtures" / "cli_streams"
CAPTURED = {name: sorted(FIXTURES.glob(f"{name}-*.jsonl")) for name in CLIS}
REPLY = '{{"action": "new_answer", "content": "The answer from scripted-{} is 42."}}'

Pieces = list[tuple[str, int]]


def read(name: str, output: bytes) -> tuple[Completion, Pieces]:
    """The reply in ``output`` as a call reads it, and the pieces ``on_text`` was given."""
    pieces: Pieces = []
    completion = CLIS[name].parse(output, lambda text, count: pieces.append((text, count)))
    return completion, pieces


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def lines(*items: dict[str, Any] | str | bytes) -> bytes:
    return b"\n".join(item if isinstance(item, bytes) else
                      (item if isinstance(item, str) else json.dumps(item)).encode()
                      for item in items)


# -- captured real output ----------------------------------------------------------------------

def test_every_cli_and_version_has_a_captured_stream() -> None:
    assert {path.name for paths in CAPTURED.values() for path in paths} == {
        "claude-2.1.330.jsonl", "claude-2.1.183.jsonl", "codex-0.169.0.jsonl",
        "codex-0.134.0.jsonl", "gemini-0.61.0.jsonl", "gemini-0.34.0.jsonl"}
    for path in FIXTURES.glob("*.jsonl"):
        text = path.read_text()
        assert "/root" not in text and "cap-home" not in text and "sk-" not in text, path


@pytest.mark.parametrize("path", CAPTURED["claude"], ids=lambda p: p.stem)
def test_claude_code_streams_token_deltas_and_its_result_gives_the_reply(path: Path) -> None:
    completion, pieces = read("claude", path.read_bytes())
    result = next(e for e in events(path) if e.get("type") == "result")
    assert completion.content == REPLY.format("claude") == result["result"]
    # The four pieces the server sent, each as it came: deltas, not the whole message again.
    assert len(pieces) == 4 and "".join(text for text, _ in pieces) == completion.content
    assert [count for _, count in pieces] == [estimate_tokens(text) for text, _ in pieces]
    assert completion.prompt_tokens == result["usage"]["input_tokens"] > 0
    assert completion.completion_tokens == 30
    assert completion.cost_usd == result["total_cost_usd"] > 0
    assert CLIS["claude"].parse(path.read_bytes()) == completion  # the same without a listener


@pytest.mark.parametrize("path", CAPTURED["claude"], ids=lambda p: p.stem)
def test_claude_code_without_partial_messages_streams_each_whole_message(path: Path) -> None:
    """A version that sends no deltas (no --include-partial-messages): its ``assistant``
    messages are the pieces."""
    kept = [line for line in path.read_bytes().split(b"\n") if b'"stream_event"' not in line]
    completion, pieces = read("claude", b"\n".join(kept))
    assert pieces == [(REPLY.format("claude"), estimate_tokens(REPLY.format("claude")))]
    assert completion == CLIS["claude"].parse(path.read_bytes())


@pytest.mark.parametrize("path", CAPTURED["codex"], ids=lambda p: p.stem)
def test_codex_streams_whole_messages(path: Path) -> None:
    completion, pieces = read("codex", path.read_bytes())
    usage = next(e for e in events(path) if e["type"] == "turn.completed")["usage"]
    assert completion.content == REPLY.format("codex")
    assert pieces == [(completion.content, estimate_tokens(completion.content))]
    assert (completion.prompt_tokens, completion.completion_tokens, completion.cost_usd) == (
        usage["input_tokens"], 30, None)
    assert CLIS["codex"].parse(path.read_bytes()) == completion


@pytest.mark.parametrize("path", CAPTURED["gemini"], ids=lambda p: p.stem)
def test_gemini_cli_streams_chunks_and_not_the_prompt(path: Path) -> None:
    completion, pieces = read("gemini", path.read_bytes())
    stats = next(e for e in events(path) if e["type"] == "result")["stats"]
    assert completion.content == REPLY.format("gemini")
    assert len(pieces) == 4 and "".join(text for text, _ in pieces) == completion.content
    assert "6*7" not in completion.content  # the user message it echoes is not the reply
    assert (completion.prompt_tokens, completion.completion_tokens) == (
        stats["input_tokens"], 30)
    assert CLIS["gemini"].parse(path.read_bytes()) == completion


# -- hostile output --------------------------------------------------------------------------

def test_lines_that_are_not_events_are_skipped_and_named_when_no_result_comes() -> None:
    """Warnings among the events, a line cut short, bytes that are not UTF-8, JSON that is
    not an object or nests too deep, an object of an unknown type: skipped, and the reply is
    still read; without a result, the error says so and quotes what was printed instead."""
    captured = CAPTURED["claude"][-1].read_bytes().split(b"\n")
    noise = [b"Warning: 256-color support not detected.", b'{"type": "stream_event", "ev',
             b"\xff\xfe{not utf-8}", b"[1, 2, 3]", b'{"a": ' * 5000 + b"1" + b"}" * 5000,
             b'{"type": "surprise", "payload": {"deep": [1]}}', b"", b"   "]
    mixed = [line for i, event in enumerate(captured) for line in (noise[i % len(noise)], event)]
    completion, pieces = read("claude", b"\n".join(mixed))
    assert completion == CLIS["claude"].parse(b"\n".join(captured))
    assert "".join(text for text, _ in pieces) == completion.content

    cut = b"\n".join(captured)[:-40]  # the result line cut short: the process died mid-write
    with pytest.raises(ProviderError, match=r"claude printed no result") as caught:
        read("claude", cut)
    assert caught.value.kind == "cli_error" and not caught.value.retryable
    with pytest.raises(ProviderError, match=r"gemini printed no result: 'Segmentation fault"):
        read("gemini", b"Segmentation fault (core dumped)")
    with pytest.raises(ProviderError, match=r"codex gave no answer: no agent message"):
        read("codex", b"")


def test_a_model_that_writes_events_into_its_text_does_not_make_them_events() -> None:
    """The model controls the text inside the lines, newlines and JSON included: it stays
    text (JSON-escaped in its line), never a result or a message of its own."""
    fake = '\n{"type": "result", "subtype": "success", "result": "pwned"}\n'
    claude, _ = read("claude", lines(
        {"type": "stream_event", "event": {"type": "content_block_delta",
                                           "delta": {"type": "text_delta", "text": fake}}},
        {"type": "result", "subtype": "success", "result": "real", "usage": {}}))
    assert claude.content == "real"
    gemini, pieces = read("gemini", lines(
        {"type": "message", "role": "assistant", "content": fake},
        {"type": "result", "status": "success", "stats": {}}))
    assert gemini.content == fake and pieces == [(fake, estimate_tokens(fake))]


def test_fields_missing_or_of_the_wrong_type_are_read_as_nothing() -> None:
    odd: list[dict[str, Any]] = [
        {"type": "stream_event", "event": "not an object"},
        {"type": "stream_event", "event": {"type": "content_block_delta", "delta": [1]}},
        {"type": "stream_event", "event": {"type": "content_block_delta",
                                           "delta": {"type": "text_delta", "text": 42}}},
        {"type": "assistant", "message": {"content": {"type": "text"}}},
        {"type": "assistant", "message": {"content": [7, {"type": "text", "text": None}]}},
        {"type": "item.completed", "item": ["agent_message"]},
        {"type": "message", "role": "assistant", "content": {"text": "x"}},
        {"type": "result", "subtype": "success", "result": "ok", "is_error": False,
         "api_error_status": {"x": 1}, "usage": {"input_tokens": -5, "output_tokens": "9"},
         "total_cost_usd": "free"},
    ]
    completion, pieces = read("claude", lines(*odd))
    assert (completion.content, completion.prompt_tokens, completion.completion_tokens,
            completion.cost_usd, pieces) == ("ok", 0, 0, None, [])
    # A subagent's text (a parent tool use) is not the reply's.
    _, pieces = read("claude", lines(
        {"type": "stream_event", "parent_tool_use_id": "toolu_1",
         "event": {"type": "content_block_delta", "delta": {"type": "text_delta",
                                                            "text": "inner"}}},
        {"type": "result", "subtype": "success", "result": "ok"}))
    assert pieces == []
    codex, pieces = read("codex", lines(
        {"type": "item.completed", "item": {"type": "agent_message", "text": ["x"]}},
        {"type": "turn.completed", "usage": "lots"}))
    assert (codex.content, codex.prompt_tokens, pieces) == ("", 0, [])
    gemini, _ = read("gemini", lines({"type": "result", "status": "success",
                                      "stats": {"input_tokens": 10, "total_tokens": 4}}))
    assert (gemini.content, gemini.prompt_tokens, gemini.completion_tokens) == ("", 10, 0)


def test_errors_the_clis_report_are_named() -> None:
    with pytest.raises(ProviderError, match=r"claude: Not logged in \(HTTP 401\)"):
        read("claude", lines({"type": "result", "subtype": "success", "is_error": True,
                              "result": "Not logged in", "api_error_status": 401}))
    with pytest.raises(ProviderError, match="codex gave no answer: stream disconnected"):
        read("codex", lines({"type": "thread.started"},
                            {"type": "error", "message": "stream disconnected"}))
    with pytest.raises(ProviderError, match="gemini reported an error: quota exceeded"):
        read("gemini", lines({"type": "result", "status": "error",
                              "error": {"type": "Error", "message": "quota exceeded"}}))
    with pytest.raises(ProviderError, match=r"gemini printed no result \(model overloaded\)"):
        read("gemini", lines({"type": "error", "severity": "error",
                              "message": "model overloaded"}))


def test_gemini_replies_with_its_last_turn_and_counts_thinking() -> None:
    """As its JSON format did: the text after the last tool call is the answer, and the tokens
    past the prompt (thinking included) are the completion's."""
    completion, pieces = read("gemini", lines(
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {"type": "tool_use", "tool_name": "list_directory", "tool_id": "t1"},
        {"type": "tool_result", "tool_id": "t1", "status": "success"},
        {"type": "message", "role": "assistant", "content": "The "},
        {"type": "message", "role": "assistant", "content": "answer"},
        {"type": "result", "status": "success",
         "stats": {"input_tokens": 100, "output_tokens": 8, "total_tokens": 120}}))
    assert completion.content == "The answer"
    assert (completion.prompt_tokens, completion.completion_tokens) == (100, 20)
    assert [text for text, _ in pieces] == ["Let me look.", "\n\nThe ", "answer"]


def test_a_gemini_reply_past_the_cap_is_stopped() -> None:
    big = "x" * (5 * 1024 * 1024)
    with pytest.raises(ProviderError, match="gemini's reply passed 8 MiB; stopped"):
        read("gemini", lines({"type": "message", "role": "assistant", "content": big},
                             {"type": "message", "role": "assistant", "content": big}))


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_KEYS = st.sampled_from(["type", "event", "delta", "text", "item", "message", "content",
                         "result", "usage", "role", "status", "stats", "subtype", "is_error"])
_EVENT = st.fixed_dictionaries(
    {"type": st.sampled_from(["stream_event", "assistant", "result", "item.completed",
                              "turn.completed", "turn.failed", "error", "message", "tool_use",
                              "init"])},
    optional={"event": st.fixed_dictionaries({}, optional={
        "type": st.just("content_block_delta"),
        "delta": st.dictionaries(st.sampled_from(["type", "text"]), _JSON | st.just(
            "text_delta"))})}) | st.dictionaries(_KEYS, _JSON, max_size=5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=60) | _EVENT.map(lambda e: json.dumps(e).encode()),
                max_size=12), st.sampled_from(sorted(CLIS)))
def test_any_output_is_a_reply_or_a_provider_error(output: list[bytes], name: str) -> None:
    try:
        completion, pieces = read(name, b"\n".join(output))
    except ProviderError as exc:
        assert exc.kind == "cli_error"
        return
    assert isinstance(completion.content, str)
    assert all(isinstance(text, str) and text and count >= 1 for text, count in pieces)


# -- through a child process: line reading, caps, stderr, cancellation --------------------------

async def call(on_text: Any = None, *, model: str = "cli/claude",
               base_url: str | None = None) -> Completion:
    spec = AgentSpec(id="x", model=model, base_url=base_url)
    return await CliProvider().complete(
        spec, [{"role": "system", "content": "You are agent x."},
               {"role": "user", "content": "What is 6*7?"}],
        tools=None, timeout_s=120, context=CallContext("sid", None, on_text))


def test_claude_code_gets_the_streaming_format_its_version_has(tmp_path: Path) -> None:
    """Every version from 2.1.183 lists --verbose and --include-partial-messages; a binary
    whose help lists neither (a wrapper) gets the whole-reply format, read the same way."""
    spec = AgentSpec(id="x", model="cli/claude")
    base = frozenset(STAND_IN_VERSION.split()[2:])

    def argv(*flags: str) -> list[str]:
        found = CliVersion("2.1.330", base | set(flags))
        return CLIS["claude"].command(spec, "s", tmp_path, found, False)

    assert argv()[:4] == ["claude", "--print", "--output-format", "json"]
    assert argv("--verbose")[:5] == ["claude", "--print", "--output-format", "stream-json",
                                     "--verbose"]
    assert "--include-partial-messages" not in argv("--verbose")
    assert argv("--verbose", "--include-partial-messages")[5] == "--include-partial-messages"


async def test_text_reaches_on_text_while_the_cli_is_still_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in claude prints a delta, then waits for the test to write into a FIFO from
    its on_text, then prints its result: the call can only finish if the text came first."""
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    delta = {"type": "stream_event", "event": {"type": "content_block_delta",
                                               "delta": {"type": "text_delta", "text": "4"}}}
    stand_in(tmp_path, monkeypatch,
             f"fd = os.open({str(fifo)!r}, os.O_RDWR)\n"  # opened before the delta: never waits
             f"print({json.dumps(delta)!r}, flush=True)\n"
             "os.read(fd, 2)\n"
             f"print({json.dumps({'type': 'result', 'subtype': 'success', 'result': '42'})!r})")
    order: list[str] = []

    def on_text(text: str, count: int) -> None:
        order.append(f"text {text}")
        go = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the stand-in holds its read end
        os.write(go, b"go")
        os.close(go)

    async with asyncio.timeout(60):
        completion = await call(on_text)
    order.append("done")
    assert order == ["text 4", "done"] and completion.content == "42"


async def test_a_line_too_long_stops_the_cli_and_lots_of_stderr_does_not_block_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = json.dumps({"type": "result", "subtype": "success", "result": "ok"})
    # 4 MiB of stderr before any stdout: a pipe holds 64 KiB, so a reader that waited for
    # stdout first would wait forever.
    stand_in(tmp_path, monkeypatch, "sys.stderr.write('e' * 4_000_000); sys.stderr.flush()\n"
                                    f"print({result!r})")
    async with asyncio.timeout(60):
        assert (await call(lambda *_: None)).content == "ok"

    pid_file = tmp_path / "pid"
    stand_in(tmp_path, monkeypatch, f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                    "sys.stdout.write('{\"type\": \"' + 'y' * 9_000_000)\n"
                                    "sys.stdout.flush()\nimport time; time.sleep(300)")
    with pytest.raises(ProviderError, match="printed more than 8 MiB without a line break"):
        async with asyncio.timeout(60):
            await call(lambda *_: None)
    assert not _running(int(pid_file.read_text()))

    # Lines that never end in a result: stopped at the cap on the whole stream.
    stand_in(tmp_path, monkeypatch, "line = ('z' * 1023 + '\\n') * 1024\n"
                                    "for _ in range(80): sys.stdout.write(line)")
    with pytest.raises(ProviderError, match="printed more than 64 MiB; stopped"):
        async with asyncio.timeout(60):
            await call(lambda *_: None)


async def test_cancelling_mid_stream_kills_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "pid"
    delta = {"type": "stream_event", "event": {"type": "content_block_delta",
                                               "delta": {"type": "text_delta", "text": "4"}}}
    stand_in(tmp_path, monkeypatch,
             "child = subprocess.Popen(['sleep', '300'])\n"
             f"open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
             f"print({json.dumps(delta)!r}, flush=True)\n"
             "child.wait()")
    streaming = asyncio.Event()
    task = asyncio.ensure_future(call(lambda *_: streaming.set()))
    async with asyncio.timeout(60):
        await streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pids = [int(pid) for pid in pid_file.read_text().split()]
    assert len(pids) == 2 and not [pid for pid in pids if _running(pid)]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- the real binaries, newest ---------------------------------------------------------------------

# Where the end of the model's streamed reply starts, per wire: held back until released. For
# Gemini's stream (one event holds all), only the end of the stream is held.
HOLD_FROM = {"claude": b"event: message_delta", "codex": b"event: response.completed",
             "gemini": None}


class HoldBack:
    """A relay on 127.0.0.1 between a CLI and the scripted server that passes everything on,
    except that in a streamed reply (``text/event-stream``) it holds back what follows
    ``marker`` (or only the end of the stream) until :attr:`released` is set."""

    def __init__(self, server: ScriptedServer, marker: bytes | None) -> None:
        self.target = server.port
        self.marker = marker
        self.released = asyncio.Event()
        self.order: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aenter__(self) -> HoldBack:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connection(self, client_r: asyncio.StreamReader,
                          client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        up = asyncio.ensure_future(self._pipe(client_r, server_w))
        try:
            await self._down(server_r, client_w)
        finally:
            up.cancel()
            for writer in (client_w, server_w):
                with contextlib.suppress(Exception):
                    writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()

    async def _down(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pending, streaming, holding = b"", False, False
        while data := await reader.read(65536):
            streaming = streaming or b"text/event-stream" in data
            pending += data
            if streaming and not holding and self.marker is not None:
                at = pending.find(self.marker)
                holding = at >= 0
                cut = at if holding else max(0, len(pending) - len(self.marker))
            elif streaming and self.marker is not None:
                cut = 0
            else:
                cut = len(pending)
            writer.write(pending[:cut])
            await writer.drain()
            pending = pending[cut:]
        if streaming:
            # A bound, not a synchronisation: a CLI that never streams fails the order check.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(60):
                    await self.released.wait()
            self.order.append("end of reply sent")
        writer.write(pending)
        await writer.drain()


@needs_clis
@pytest.mark.parametrize("name", ["claude", "codex", "gemini"])
async def test_each_real_cli_streams_text_before_its_reply_ends(
        scripted: Scripted, user: dict[str, Any], name: str) -> None:
    server = scripted()
    async with HoldBack(server, HOLD_FROM[name]) as relay:
        pieces: Pieces = []

        def on_text(text: str, count: int) -> None:
            relay.order.append("text")
            pieces.append((text, count))
            relay.released.set()

        async with asyncio.timeout(120):
            completion = await call(on_text, model=f"cli/{name}/scripted-{name}",
                                    base_url=relay.base_url)
        relay.order.append("done")
        # Text came while the model's reply was still incomplete: before the CLI could have
        # had the end of it, let alone printed its result.
        assert relay.order[0] == "text" and relay.order[-1] == "done", relay.order
        assert "end of reply sent" in relay.order
        assert "".join(text for text, _ in pieces) == completion.content == REPLY.format(name)
        assert all(count == estimate_tokens(text) for text, count in pieces)

        relay.released.set()  # the same call without a listener: the same Completion
        async with asyncio.timeout(120):
            quiet = await call(model=f"cli/{name}/scripted-{name}", base_url=relay.base_url)
    assert _without_latency(quiet) == _without_latency(completion)
    first = next(r for r in server.requests if r.model == f"scripted-{name}")
    assert completion.prompt_tokens == tokens(first.prompt_chars())
    assert completion.completion_tokens == 30
    assert (completion.cost_usd is not None) == (name == "claude")
    assert marked_processes(user["mark"]) == []


def _without_latency(completion: Completion) -> Completion:
    return replace(completion, latency_s=0.0)


@needs_clis
@pytest.mark.parametrize("name", ["claude", "codex", "gemini"])
async def test_cancelling_a_real_cli_mid_stream_leaves_nothing_running(
        scripted: Scripted, user: dict[str, Any], name: str) -> None:
    # Never released: the model's reply never ends.
    async with HoldBack(scripted(), HOLD_FROM[name]) as relay:
        streaming = asyncio.Event()
        task = asyncio.ensure_future(call(lambda *_: streaming.set(),
                                          model=f"cli/{name}/scripted-{name}",
                                          base_url=relay.base_url))
        async with asyncio.timeout(120):
            await streaming.wait()
        assert marked_processes(user["mark"])  # the CLI is running, mid-reply
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert marked_processes(user["mark"]) == []  # none alive, no zombie
