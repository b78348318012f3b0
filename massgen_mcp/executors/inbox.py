"""Steering notes for a run that another process on this machine executes: the file
:class:`~massgen_mcp.executors.notes.NoteChannel` (:class:`FileNotes`).

In embedded mode a run lives in the process that started it: a host's MCP server, a
``massgen-mcp run`` in another terminal, an HTTP server. ``massgen-mcp steer`` (or any other
process sharing the records) reaches it through the run's folder:

```
<session folder>/inbox/<name>.note    the note, written whole (temp file, then rename)
<session folder>/inbox/<name>.taken   the running process claimed it (an atomic rename)
<session folder>/inbox/<name>.reply   what became of it: {"ok", "message", "cleared"}
```

The process running the session looks every :data:`POLL_S` seconds (one directory listing),
claims each note by renaming it (so a note is taken once, and a sender that gives up can tell
"never taken" from "taken, reply pending"), hands it to the engine and writes the reply. The
folder is the user's own, but a note file is still read as untrusted: no links followed, at
most :data:`MAX_NOTE_BYTES` read, and the engine checks the text like any note.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import time
from pathlib import Path

from pydantic import ValidationError

from massgen_mcp.consensus.steering import MAX_NOTE_CHARS
from massgen_mcp.core.errors import SteerRefusedError
from massgen_mcp.core.files import read_bytes_safely, replace_file
from massgen_mcp.executors.notes import NoteReply

INBOX = "inbox"
POLL_S = 0.5  # how often a running process looks for notes
REPLY_WAIT_S = 5.0  # how long a sender waits for the running process to take a note
MAX_NOTE_BYTES = 4 * MAX_NOTE_CHARS + 4  # UTF-8: at most 4 bytes a character, and a margin
MAX_REPLY_BYTES = 16_000


class FileNotes:
    """The note channel of the run whose record is ``folder`` (:mod:`.notes`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def post(self, note: str) -> str | None:
        return await asyncio.to_thread(post, self.folder, note)

    async def reply(self, note_id: str, timeout_s: float) -> NoteReply | None:
        return await reply_to(self.folder, note_id, timeout_s)

    async def withdraw(self, note_id: str) -> bool:
        return await asyncio.to_thread(withdraw, self.folder, note_id)


def _inbox(folder: Path) -> Path:
    """The inbox folder, made if missing; never a link (a planted one would send notes and
    replies elsewhere)."""
    inbox = folder / INBOX
    inbox.mkdir(mode=0o700, exist_ok=True)
    if inbox.is_symlink() or not inbox.is_dir():
        raise SteerRefusedError(f"{inbox} is not a folder of this run's; remove it")
    return inbox


def post(folder: Path, note: str) -> str:
    """Leave ``note`` for the process running the session in ``folder``; returns its name."""
    name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
    # The inbox is opened without following a link (where the platform can tell): swapped
    # for one after _inbox looked, it would still take the note elsewhere.
    replace_file(_inbox(folder) / f"{name}.note", json.dumps({"note": note}),
                 folder_may_be_link=False)
    return name


def withdraw(folder: Path, name: str) -> bool:
    """Take back a note nobody has claimed; False if the running process already took it."""
    try:
        (folder / INBOX / f"{name}.note").unlink()
    except FileNotFoundError:
        return False
    return True


async def reply_to(folder: Path, name: str, timeout_s: float) -> NoteReply | None:
    """The reply to note ``name``, or None if none came within ``timeout_s``. Read as the
    notes are (no link, a regular file, capped), and validated."""
    path = folder / INBOX / f"{name}.reply"
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError, ValidationError):
            reply = NoteReply.model_validate_json(read_bytes_safely(path, MAX_REPLY_BYTES))
            path.unlink(missing_ok=True)
            return reply
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.05)


# What a rename onto a planted ``<name>.taken`` folder (or of a ``.note`` folder) fails with.
PLANTED = frozenset({errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST})


def take(folder: Path) -> list[tuple[str, str | None]]:
    """Claim every note waiting for this run, oldest first: (name, text), the text None when
    the file is not a readable note (a link, too long, not JSON)."""
    inbox = folder / INBOX
    if inbox.is_symlink():
        return []
    try:
        names = sorted(e.name[:-5] for e in os.scandir(inbox)
                       if e.name.endswith(".note") and not e.name.startswith("."))
    except OSError:  # none yet; or not a folder we may list (a planted file): no note
        return []
    taken: list[tuple[str, str | None]] = []
    for name in names:
        claimed = inbox / f"{name}.taken"
        try:
            os.rename(inbox / f"{name}.note", claimed)
        except FileNotFoundError:  # withdrawn meanwhile
            continue
        except OSError as exc:
            if exc.errno not in PLANTED:  # held a moment (Windows: a scanner has it open)
                continue  # so taken at the next look
            _drop(inbox / f"{name}.note")  # its claim name is a planted folder: refused,
            taken.append((name, None))  # and dropped if it can be
            continue
        taken.append((name, _read_note(claimed)))
        with contextlib.suppress(OSError):  # a planted folder stays: it is never read again
            claimed.unlink(missing_ok=True)
    return taken


def _drop(path: Path) -> None:
    """Remove a note that cannot be claimed (a file, or an empty folder), so it is not
    refused again at every look."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()


def _read_note(path: Path) -> str | None:
    """The note in ``path``, or None unless it is a regular file holding one: a link, a
    folder or a FIFO (whose open would wait for a writer forever) is not read."""
    try:
        raw = read_bytes_safely(path, MAX_NOTE_BYTES)
    except OSError:
        return None
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        data = json.loads(raw.decode("utf-8"))
        note = data.get("note") if isinstance(data, dict) else None
        return note if isinstance(note, str) else None
    return None


def answer(folder: Path, name: str, reply: NoteReply) -> None:
    """Tell the sender of note ``name`` what became of it."""
    with contextlib.suppress(OSError):  # the folder went away: nobody is left to tell
        replace_file(folder / INBOX / f"{name}.reply", reply.model_dump_json(),
                     folder_may_be_link=False)  # take looked before; a link now is refused
