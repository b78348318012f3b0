"""The supervisor of one CLI child process, vendor-free: run it in its own session, feed
its stdin, read its output under a size cap, and whatever ends the call, kill everything it
started and reap it before returning."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from massgen_mcp.core import children
from massgen_mcp.core.errors import ProviderError

MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # a JSON result with a long answer is far below this
MAX_STDERR_BYTES = 64 * 1024
EXIT_POLL_S = 0.2  # how often a call checks whether its CLI exited with its pipes still held
PIPE_GRACE_S = 2.0  # after the CLI exits, how long its output may keep coming


class OutputTooLarge(ProviderError):
    def __init__(self) -> None:
        super().__init__(f"the CLI printed more than {MAX_OUTPUT_BYTES // 1024 // 1024} MiB; "
                         "stopped", retryable=False, kind="cli_error")


async def run_child(argv: list[str], stdin: bytes, cwd: Path, env: dict[str, str]
                    ) -> tuple[int, bytes, bytes]:
    """Run ``argv`` in its own session (:func:`massgen_mcp.core.children.command`); (exit status,
    stdout, stderr tail).

    Whatever ends the call (the CLI's exit, cancellation, a timeout around this call, too much
    output) everything the CLI started is killed (:func:`massgen_mcp.core.children.stop`: on Linux
    every descendant, ``setsid`` or daemonized ones too; elsewhere its process group) and the
    CLI reaped before this returns. Output is read until the CLI exits and its pipes close; a
    pipe that something it started keeps open is given ``PIPE_GRACE_S`` after the exit, then
    abandoned."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *children.command(argv, env, cwd), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env,
            start_new_session=True)
    except (OSError, ValueError) as exc:  # not executable, or a NUL byte in an argument
        raise ProviderError(f"could not start {Path(argv[0]).name}: {exc}", retryable=False,
                            kind="unavailable") from None
    assert proc.stdin and proc.stdout and proc.stderr
    stdout, stderr = bytearray(), bytearray()
    parts = [asyncio.ensure_future(part) for part in (
        _feed(proc.stdin, stdin), _read(proc.stdout, stdout, MAX_OUTPUT_BYTES, strict=True),
        _read(proc.stderr, stderr, MAX_STDERR_BYTES + 4096, strict=False))]
    io = asyncio.gather(*parts)
    try:
        while not io.done():
            await asyncio.wait({io}, timeout=EXIT_POLL_S)
            if proc.returncode is not None and not io.done():
                await children.stop(proc)  # the CLI is gone: what it started goes too
                await asyncio.wait({io}, timeout=PIPE_GRACE_S)
                break
        if io.done():
            io.result()  # OutputTooLarge
        code = await proc.wait()  # at once: the exit status is known once the CLI is gone
    finally:
        for part in parts:  # a failed gather leaves its other parts running
            part.cancel()
        await asyncio.gather(*parts, return_exceptions=True)
        await children.stop(proc)
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
                raise OutputTooLarge()
            del buffer[:len(buffer) - limit]
