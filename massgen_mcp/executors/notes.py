"""Delivering the user's note to a run another process holds: one protocol, one delivery
loop and one reply record for both transports.

A note for a run in this process goes straight to its engine. A run another process holds
is reached through a :class:`NoteChannel`: the run's folder on this machine
(:class:`~massgen_mcp.executors.inbox.FileNotes`) or the pool's Redis
(:class:`~massgen_mcp.pool.steering.RedisNotes`). Both have the same four verbs, so the rules
of waiting are written once (:func:`deliver`): post the note, wait for the reply; with none
in time, withdraw it, and if the holder took it meanwhile (the withdrawal fails), wait once
more, since its reply is due. The holder's side is one rule too (:func:`applied`): the
engine's own checks decide, and whatever they refuse becomes the reply's message.

Everything a channel reads back is untrusted (another local user's folder, anyone who can
write to Redis): a reply is validated as a :class:`NoteReply` before it is believed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

from massgen_mcp.core.errors import ConfigError, MassgenError

MAX_REPLY_CHARS = 1_000


class NoteReply(BaseModel):
    """What the process holding the run made of a note: taken (``cleared`` votes), or
    refused and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    message: Annotated[str, Field(max_length=MAX_REPLY_CHARS)] = ""
    cleared: Annotated[int, Field(ge=0)] = 0


class NoteChannel(Protocol):
    """A way to reach the process that holds a run."""

    async def post(self, note: str) -> str | None:
        """Leave ``note`` for the holder; its id, or None when no holder can hear it."""
        ...

    async def reply(self, note_id: str, timeout_s: float) -> NoteReply | None:
        """The holder's reply to ``note_id`` within ``timeout_s``, else None."""
        ...

    async def withdraw(self, note_id: str) -> bool:
        """Take the note back; False if the holder took it first (its reply is due)."""
        ...


async def deliver(channel: NoteChannel, note: str, wait_s: float) -> NoteReply | None:
    """Post ``note`` on ``channel`` and return the holder's reply, or None if no holder took
    it (none heard it, or none answered within ``wait_s`` and the note was withdrawn)."""
    note_id = await channel.post(note)
    if note_id is None:
        return None
    reply = await channel.reply(note_id, wait_s)
    if reply is None and not await channel.withdraw(note_id):
        reply = await channel.reply(note_id, wait_s)  # taken meanwhile: its reply is due
    return reply


def applied(steer: Callable[[str], int], note: str | None) -> NoteReply:
    """The holder's side: hand ``note`` (None: the channel could not read one) to the
    engine's ``steer`` and say what became of it."""
    try:
        if note is None:
            raise ConfigError("message: not a readable note (a link, too long, or not JSON)")
        return NoteReply(ok=True, cleared=steer(note))
    except MassgenError as exc:
        return NoteReply(ok=False, message=str(exc)[:MAX_REPLY_CHARS])
