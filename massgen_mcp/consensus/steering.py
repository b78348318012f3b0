"""The user's notes to a running team (steering): what a note may be, and how often.

A note reaches every agent's next turn and clears every vote (:mod:`.state`), so each one
costs the team a round of calls: a few a minute is what a person typing needs, and the caps
keep a script (or anyone who can reach a pool's Redis) from spending a team's budget on
re-votes or filling every prompt with notes. The checks run twice: at the front end, so the
caller hears at once, and in the engine that applies the note, since a note that came through
Redis is only as trustworthy as whoever could write there.
"""

from __future__ import annotations

import time
from collections import deque

from massgen_mcp.core.edges import check_text
from massgen_mcp.core.errors import ConfigError, SteerRefusedError, resume_hint
from massgen_mcp.core.records import RunStatus

MAX_NOTE_CHARS = 2_000
NOTES_PER_MINUTE = 3
MAX_NOTES = 10  # in one run: at most 20,000 characters added to every prompt


def clean_note(message: object) -> str:
    """The note as it will be shown to the agents; ConfigError naming ``message`` if empty,
    not text (:func:`~massgen_mcp.core.edges.check_text`, the check a question gets: a lone
    surrogate from a session's inbox file would fail every later record write), or too
    long."""
    if not isinstance(message, str) or not message.strip():
        raise ConfigError("message: empty; write the note to the team, e.g. "
                          "'use Python 3.12, not 3.8'")
    note = check_text(message, "message").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise ConfigError(f"message: {len(note):,} characters; the limit is "
                          f"{MAX_NOTE_CHARS:,}. Send the gist; the agents see the question "
                          "already")
    return note


def not_running(session_id: str, status: RunStatus) -> SteerRefusedError:
    """The refusal of a note to a run that has ended (or never ran): the same words from
    every executor."""
    if status is RunStatus.INTERRUPTED:  # no answer to follow up on: the way on is resume
        return SteerRefusedError(
            f"session {session_id} is interrupted, not running: its process stopped before "
            f"the team decided, and a note only reaches a running team. "
            f"To go on, {resume_hint(session_id)}, and steer it while it runs")
    return SteerRefusedError(
        f"session {session_id} is {str(status).replace('_', ' ')}, not running: a note only "
        "reaches a running team. Ask it as a follow-up instead (continue_session, or "
        f"massgen-mcp continue {session_id} \"...\" at a terminal, or a new run)")


class NoteGate:
    """One run's count of notes: at most :data:`NOTES_PER_MINUTE` in any 60 s and
    :data:`MAX_NOTES` in all (notes a resumed run replayed count too)."""

    def __init__(self, already: int = 0) -> None:
        self._total = already
        self._recent: deque[float] = deque()

    def admit(self) -> None:
        """Count one note now, or raise SteerRefusedError saying when to try again."""
        if self._total >= MAX_NOTES:
            raise SteerRefusedError(
                f"this run already has {MAX_NOTES} notes, the most one run takes; cancel it "
                "and start a new run with the question rewritten")
        now = time.monotonic()
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        if len(self._recent) >= NOTES_PER_MINUTE:
            wait_s = 60.0 - (now - self._recent[0])
            raise SteerRefusedError(
                f"{NOTES_PER_MINUTE} notes in the last minute is the most a run takes; "
                f"send this one in {wait_s:.0f} s, or merge it with the next")
        self._recent.append(now)
        self._total += 1
