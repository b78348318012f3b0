"""The supervisor of one child process (a coding CLI's call, a hardened git command): run it in
its own session, feed its stdin, read its output under a size cap (whole, or line by line as it
comes, for the CLIs' streaming formats), and whatever ends the call, kill everything it started
and reap it before returning. It sits in core because both the CLI provider and the hardened
git of :mod:`massgen_mcp.tools.git` run children through it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from massgen_mcp.core import children
from massgen_mcp.core.errors import ErrorKind, ProviderError

MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # a JSON result with a long answer is far below this
# Read line by line, output is not kept, only each line until it ends: a line is capped like a
# whole output (one JSON event holds at most the whole answer), and all lines together at a
# figure far above a long answer streamed a token per line (Claude Code's partial messages:
# ~350 bytes of event around each delta, so 32k tokens of answer are ~11 MiB).
MAX_LINE_BYTES = MAX_OUTPUT_BYTES
MAX_STREAM_BYTES = 64 * 1024 * 1024
MAX_STDERR_BYTES = 64 * 1024
EXIT_POLL_S = 0.2  # how often a call checks whether its CLI exited with its pipes still held
PIPE_GRACE_S = 2.0  # after the CLI exits, how long its output may keep coming


class OutputTooLarge(ProviderError):
    def __init__(self, limit: int, what: str = "") -> None:
        super().__init__(f"the CLI printed more than {limit // 1024 // 1024} MiB{what}; "
                         "stopped", kind=ErrorKind.CLI_ERROR)


LineListener = Callable[[bytes], None]


async def run_child(argv: list[str], stdin: bytes, cwd: Path, env: dict[str, str], *,
                    on_line: LineListener | None = None) -> tuple[int, bytes, bytes]:
    """Run ``argv`` in its own session (:func:`massgen_mcp.core.children.command`); (exit status,
    stdout, stderr tail). With ``on_line``, stdout is not kept (the stdout returned is empty):
    each line (without its newline; the last one also without) goes to ``on_line`` as soon as
    it ends, on the event loop's thread, while stderr is read beside it (a CLI that fills its
    stderr pipe never waits on us). What ``on_line`` raises ends the call like too much output.

    Whatever ends the call (the CLI's exit, cancellation, a timeout around this call, too much
    output) everything the CLI started is killed (:func:`massgen_mcp.core.children.stop`: on Linux
    every descendant, ``setsid`` or daemonized ones too; elsewhere its process group or tree;
    everywhere, what still carries the call's marker) and the
    CLI reaped before this returns. Output is read until the CLI exits and its pipes close; a
    pipe that something it started keeps open is given ``PIPE_GRACE_S`` after the exit, then
    abandoned."""
    try:
        spawn = children.command(argv, env, cwd)
        proc = await asyncio.create_subprocess_exec(
            *spawn.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, env=spawn.env, start_new_session=True)
    except (OSError, ValueError) as exc:  # not executable, or a NUL byte in an argument
        raise ProviderError(f"could not start {Path(argv[0]).name}: {exc}",
                            kind=ErrorKind.UNAVAILABLE) from None
    assert proc.stdin and proc.stdout and proc.stderr
    stdout, stderr = bytearray(), bytearray()
    out = (_read(proc.stdout, stdout, MAX_OUTPUT_BYTES, strict=True) if on_line is None
           else _read_lines(proc.stdout, on_line))
    parts = [asyncio.ensure_future(part) for part in (
        _feed(proc.stdin, stdin), out,
        _read(proc.stderr, stderr, MAX_STDERR_BYTES + 4096, strict=False))]
    io = asyncio.gather(*parts)
    # When the call is cancelled its parts are, and the gather then holds a CancelledError
    # that nobody asks for: asyncio would log it as never retrieved.
    io.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        while not io.done():
            await asyncio.wait({io}, timeout=EXIT_POLL_S)
            if proc.returncode is not None and not io.done():
                await children.stop(proc, spawn.marker)  # the CLI is gone: what it started goes too
                await asyncio.wait({io}, timeout=PIPE_GRACE_S)
                break
        if io.done():
            io.result()  # OutputTooLarge, or what on_line raised
        code = await proc.wait()  # at once: the exit status is known once the CLI is gone
    finally:
        for part in parts:  # a failed gather leaves its other parts running
            part.cancel()
        await asyncio.gather(*parts, return_exceptions=True)
        await children.stop(proc, spawn.marker)
        # Read the pipes to their end (the tree is dead, so it comes at once) so that they
        # close now, not when the garbage collector finds them; a descendant that escaped
        # (possible only where descendants are not tracked) is given up on after the grace.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PIPE_GRACE_S):
                await asyncio.gather(_drain(proc.stdout), _drain(proc.stderr), proc.wait())
    return code, bytes(stdout), bytes(stderr)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
        stream.close()


async def _read(stream: asyncio.StreamReader, buffer: bytearray, limit: int, *,
                strict: bool) -> None:
    """Append ``stream`` to ``buffer``; past ``limit`` bytes either fail (``strict``) or keep
    the tail. The buffer keeps what came even if the read is cancelled."""
    while chunk := await stream.read(65536):
        buffer += chunk
        if len(buffer) > limit:
            if strict:
                raise OutputTooLarge(limit)
            del buffer[:len(buffer) - limit]


async def _read_lines(stream: asyncio.StreamReader, on_line: LineListener) -> None:
    """Hand each line of ``stream`` to ``on_line`` as it ends, holding at most one unfinished
    line (``MAX_LINE_BYTES``) and reading at most ``MAX_STREAM_BYTES`` in all."""
    pending = bytearray()
    total = 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if total > MAX_STREAM_BYTES:
            raise OutputTooLarge(MAX_STREAM_BYTES)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending += chunk[start:end]
            line = bytes(pending)
            pending.clear()
            on_line(line)
            start = end + 1
        pending += chunk[start:]
        if len(pending) > MAX_LINE_BYTES:
            raise OutputTooLarge(MAX_LINE_BYTES, " without a line break")
    if pending:
        on_line(bytes(pending))
