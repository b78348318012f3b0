"""Read stdin from the first instant and answer a host's opening requests while the server loads.

The launcher (``massgen_mcp.__main__``) starts :class:`EarlyStdin` before anything heavy is
imported. Its thread reads stdin (a private duplicate of fd 0, so the SDK's later diversion of
fd 0 to the null device does not cut it off), keeps every byte for the server in order, and,
until the server takes over, writes the reply :class:`~massgen_mcp.server.handshake.Opening`
gives for each line. When the SDK opens stdio, :meth:`EarlyStdin.hand_over` stops the answers
(under the lock the answers are written with, so no early reply can follow one of the SDK's)
and returns the ids answered; the SDK then reads everything, those lines included, from
:meth:`EarlyStdin.read` (:mod:`massgen_mcp.server.stdio`), and its replies to those ids are
dropped. The thread reads stdin for the whole life of the process; at the end of input it
passes that on too, or, when every request read had its early reply, ends the process.

Standard library only: this runs before fastmcp and the mcp SDK are imported.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import IO

from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.server.handshake import MAX_EARLY_BYTES, Opening, load_snapshot

READ_CHUNK = 65536


class EarlyStdin:
    """Stdin, read by a thread that answers opening requests until :meth:`hand_over`."""

    def __init__(self, fd: int, stdout: IO[bytes], opening: Opening) -> None:
        self._fd = os.dup(fd)
        self._stdout = stdout
        self._opening = opening
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._answering = True
        self._pending = bytearray()  # the line being read, while answering
        self.answered: dict[str | int, bytes] = {}  # request id -> the reply sent
        self._left = b""  # of the chunk :meth:`read` is handing out
        self._ended = False
        self._thread = threading.Thread(target=self._pump, name="massgen-early-stdin",
                                        daemon=True)

    def start(self) -> EarlyStdin:
        self._thread.start()
        return self

    def hand_over(self) -> dict[str | int, bytes]:
        """Stop answering; the ids answered so far, each with the reply sent."""
        with self._lock:
            self._answering = False
            return dict(self.answered)

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of stdin, in order (waits for some); b"" at its end."""
        if not self._left and not self._ended:
            self._left = self._chunks.get()
            self._ended = not self._left
        chunk, self._left = self._left[:size], self._left[size:]
        return chunk

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, READ_CHUNK)
            except OSError:
                chunk = b""
            self._chunks.put(chunk)  # the server reads everything, answered or not
            if not chunk:
                self._end_if_all_answered()
                return
            if self._answering:
                self._answer_lines(chunk)

    def _answer_lines(self, chunk: bytes) -> None:
        self._pending += chunk
        while self._answering:
            line, newline, rest = bytes(self._pending).partition(b"\n")
            if not newline:
                if len(self._pending) > MAX_EARLY_BYTES:  # left to the SDK, read at full speed
                    self._stop()
                return
            self._pending = bytearray(rest)
            answer = self._opening.answer(line)
            if self._opening.stopped:
                self._stop()
            elif answer is not None:
                self._send(*answer)

    def _send(self, id_: str | int, reply: bytes) -> None:
        with self._lock:
            if not self._answering:
                return
            self.answered[id_] = reply
            self._stdout.write(reply)
            self._stdout.flush()

    def _end_if_all_answered(self) -> None:
        """The host closed stdin with a reply to every request it sent: a host checking that
        the server is up (spawn, handshake, lists, close) leaves the server nothing to do, so
        the process ends now, as the SDK would at the end of input, instead of first loading
        it (~1 s of CPU). A request the early replies left to the SDK, or a line not yet
        whole, keeps the process going: the server loads and reads it, as without them."""
        with self._lock:  # the server has not taken over, so it has written nothing
            if self._answering and self.answered and not bytes(self._pending).strip():
                self._stdout.flush()
                os._exit(0)

    def _stop(self) -> None:
        with self._lock:
            self._answering = False
        self._pending.clear()


taken: EarlyStdin | None = None  # for the stdio transport to take over


def start(stdin: IO[bytes], stdout: IO[bytes]) -> EarlyStdin | None:
    """Start answering on the launcher's stdin and stdout; None when turned off or when there
    is no snapshot to answer from."""
    if not SETTINGS.early_initialize.read():
        return None
    snapshot = load_snapshot()
    if snapshot is None:
        return None
    return EarlyStdin(stdin.fileno(), stdout, Opening(snapshot)).start()
