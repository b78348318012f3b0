"""One run's record read back as untrusted input: the files of a session folder, typed.

Everything that shows, resumes or reports a run reads through here, and a record can come
from anywhere (a cloned repository can ship one): no link followed, a regular file only, a
size cap per kind, redacted again; a file that fails is *corrupt*, logged once, and the
reader says so in one line. Events are read in bounded time, not only bounded bytes: a
planted ``events.jsonl`` of 250 MiB of tiny events took two minutes of CPU to parse, and
froze the server that read it. So at most :data:`EVENTS_READ_MAX` events are parsed per
read, the *last* ones, found by reading back from the end; those before them are only
counted. What shows a record (``show``, the report) says how many it skipped; what needs
every event (resume replays them, the events resource) refuses a record of more, in one
line naming the file.

Writing a record, listing, finding and pruning sessions is the store's
(:class:`~massgen_mcp.records.store.SessionStore`, a reader too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import ValidationError

from massgen_mcp.core.errors import SessionNotFoundError, SessionStateError
from massgen_mcp.core.files import (
    MIB,
    default_home,
    open_safely,
    read_bytes_safely,
    read_text_safely,
)
from massgen_mcp.core.options import NO_ROLE
from massgen_mcp.core.records import Event, RequestRecord, VersionedRecord
from massgen_mcp.core.run_state import ResultRecord, SessionRecord, StatusRecord
from massgen_mcp.core.secrets import redact_data
from massgen_mcp.records.ids import check_session_id
from massgen_mcp.records.liveness import as_seen

log = logging.getLogger(__name__)

_LABEL = re.compile(r"[A-H][0-9]{1,2}")
# What a reader takes from a record file (a planted one may be a link, a FIFO or endless).
RECORD_MAX_BYTES = 8 * MIB  # config, request, status, result (context is <= 200k characters)
ANSWER_MAX_BYTES = 4 * MIB
EVENTS_MAX_BYTES = 256 * MIB  # streamed; a line at most:
EVENT_LINE_MAX_BYTES = 8 * MIB
# Events parsed per read (the last ones): a run records hundreds; parsing costs ~25 us each.
EVENTS_READ_MAX = 10_000
# ... and bytes parsed per read: a count alone let 10,000 wide events (32 MiB of labels) cost
# 15 s of CPU, 2 min at the file cap. A run's events are a few hundred bytes each.
EVENTS_READ_MAX_BYTES = 16 * MIB
_BLOCK = MIB  # read back from the end of events.jsonl by blocks of this size
_warned: set[tuple[str, str]] = set()  # (session, file) a warning was logged for
_R = TypeVar("_R", bound=VersionedRecord)


@dataclass(frozen=True)
class EventTail:
    """The last events of a record, and how many lines came before them, not read."""

    events: list[Event]
    skipped: int


class RecordReader:
    """The records under one home folder (``.massgen`` by default), read: each file as
    untrusted input, typed."""

    def __init__(self, home: Path | None = None) -> None:
        self.given_home = home or default_home()  # a link there is refused (create)
        self.home = self.given_home.resolve()
        self.sessions_dir = self.home / "sessions"

    def folder(self, session_id: str) -> Path:
        return self.sessions_dir / check_session_id(session_id)

    # -- reading -----------------------------------------------------------------------------

    def _existing(self, session_id: str) -> Path:
        """The session's folder: a directory, not a link to one (:meth:`session_ids`)."""
        folder = self.folder(session_id)
        try:
            real = stat.S_ISDIR(folder.lstat().st_mode)
        except OSError:
            real = False
        if not real:
            raise SessionNotFoundError(
                f"no session {session_id} in {self.sessions_dir}")
        return folder

    def _corrupt(self, session_id: str, name: str, why: object) -> SessionStateError:
        """The error for a record file that is not read, logged once per file and process
        (lists meet the same bad record on every page)."""
        if (session_id, name) not in _warned:
            _warned.add((session_id, name))
            log.warning("session %s: %s is corrupt, skipped: %s", session_id, name, why)
        return SessionStateError(f"session {session_id}: {name} cannot be read: {why}")

    def _read_json(self, session_id: str, name: str) -> Any:
        """A record file's JSON, read as untrusted input (:func:`read_bytes_safely`: no link,
        a regular file, at most :data:`RECORD_MAX_BYTES`) and redacted again; None when the
        file is missing, :class:`SessionStateError` when it is not sane."""
        path = self._existing(session_id) / name
        try:
            return redact_data(json.loads(read_bytes_safely(path, RECORD_MAX_BYTES)))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:
            raise self._corrupt(session_id, name, exc) from None

    def _read(self, session_id: str, name: str, kind: type[_R]) -> _R | None:
        data = self._read_json(session_id, name)
        if data is None:
            return None
        try:
            return kind.model_validate(data)
        except ValidationError as exc:
            raise self._corrupt(session_id, name, exc.errors()[0]["msg"]) from None

    def read_config(self, session_id: str) -> dict[str, Any]:
        """The team and options the session ran with (config.json; keys masked)."""
        data = self._read_json(session_id, "config.json")
        if data is None:
            raise SessionNotFoundError(f"session {session_id} has no config.json")
        if not isinstance(data, dict):
            raise SessionStateError(f"session {session_id}: config.json is not a mapping")
        return data

    def read_request(self, session_id: str) -> RequestRecord:
        request = self._read(session_id, "request.json", RequestRecord)
        if request is None:
            raise SessionNotFoundError(f"session {session_id} has no request.json")
        return request

    def read_status(self, session_id: str) -> StatusRecord:
        """The session's status as a reader should show it: a run left ``running`` by a
        process that is gone (killed, its terminal closed) is shown ended
        (:func:`~massgen_mcp.records.liveness.as_seen`), whoever reads it."""
        status = self._read_status(session_id)
        seen = as_seen(status, self.folder(session_id))
        if seen is not status:  # the run may have just ended: read its own last word
            status = self._read_status(session_id)
            seen = as_seen(status, self.folder(session_id))
        return seen

    def _read_status(self, session_id: str) -> StatusRecord:
        status = self._read(session_id, "status.json", StatusRecord)
        if status is None:
            raise SessionNotFoundError(f"session {session_id} has no status.json yet")
        return status

    def read_result(self, session_id: str) -> ResultRecord | None:
        return self._read(session_id, "result.json", ResultRecord)

    def read_events(self, session_id: str) -> list[Event]:
        """Every event, for what needs them all (resume replays them): a record of more than
        :data:`EVENTS_READ_MAX` is refused in one line, before any is parsed, rather than
        parsed for minutes."""
        return self.read_events_tail(session_id, count=False, whole=True).events

    def read_events_tail(self, session_id: str, last: int = EVENTS_READ_MAX, *,
                         count: bool = True, whole: bool = False) -> EventTail:
        """The last ``last`` events, from a file read as untrusted input (at most
        :data:`EVENTS_MAX_BYTES`, a line at most :data:`EVENT_LINE_MAX_BYTES`): found by
        reading back from the end, so that only they are parsed; the lines before them are
        counted (``count``), never parsed, or refused (``whole``). A bad line is fine only as
        the last (a crash cut it short)."""
        path = self._existing(session_id) / "events.jsonl"
        try:
            with open_safely(path, EVENTS_MAX_BYTES) as handle:
                size = os.fstat(handle.fileno()).st_size  # what a live run appends later waits
                handle.seek(max(0, size - 1))
                stop = size - 1 if handle.read(1) == b"\n" else size  # the last line's end
                start = _tail_start(handle, stop, max(1, last), EVENTS_READ_MAX_BYTES)
                if whole and start:
                    raise SessionStateError(
                        f"session {session_id}: events.jsonl holds more than {last:,} events "
                        f"or {EVENTS_READ_MAX_BYTES // MIB} MiB (a run records hundreds of "
                        "small ones); it is not replayed or read whole: show and the report "
                        "show its last events")
                skipped = _count_lines(handle, start) if count else 0
                handle.seek(start)
                values = []
                bad: str | None = None
                left = size - start
                while left and (line := handle.readline(min(left, EVENT_LINE_MAX_BYTES + 1))):
                    left -= len(line)
                    if not line.strip():
                        continue
                    if bad is not None or len(line) > EVENT_LINE_MAX_BYTES:
                        raise self._corrupt(session_id, "events.jsonl",
                                            bad or f"a line over {EVENT_LINE_MAX_BYTES} bytes")
                    try:
                        values.append(json.loads(line))
                    except (ValueError, RecursionError) as exc:
                        bad = str(exc).splitlines()[0]
        except FileNotFoundError:
            return EventTail([], 0)
        except OSError as exc:
            raise self._corrupt(session_id, "events.jsonl", exc) from None
        try:  # all at once: the known secrets are gathered once, not once per event
            values = redact_data(values)
        except RecursionError as exc:
            raise self._corrupt(session_id, "events.jsonl", exc) from None
        events = []
        for index, data in enumerate(values):
            try:
                events.append(Event.model_validate(data))
            except ValidationError as exc:
                if bad is not None or index < len(values) - 1:
                    raise self._corrupt(session_id, "events.jsonl",
                                        str(exc).splitlines()[0]) from None
        return EventTail(events, skipped)

    def _answers_dir(self, session_id: str) -> Path | None:
        """The answers folder, when it is a folder and not a link to one."""
        folder = self._existing(session_id) / "answers"
        try:
            return folder if stat.S_ISDIR(folder.lstat().st_mode) else None
        except OSError:
            return None

    def _read_answer_file(self, session_id: str, path: Path) -> str:
        try:
            return read_text_safely(path, ANSWER_MAX_BYTES)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._corrupt(session_id, f"answers/{path.name}", exc) from None

    def read_answer(self, session_id: str, label: str) -> str:
        if not _LABEL.fullmatch(label):
            raise SessionNotFoundError(f"{label!r} is not an answer label (like A1 or C2)")
        folder = self._answers_dir(session_id)
        try:
            if folder is None:
                raise FileNotFoundError(label)
            return self._read_answer_file(session_id, folder / f"{label}.md")
        except FileNotFoundError:
            raise SessionNotFoundError(f"session {session_id} has no answer {label}") from None

    def read_record(self, session_id: str) -> SessionRecord:
        """Everything recorded about a session, typed; SessionStateError if a file of it is
        not sane (a link, not a regular file, too large, not what it should hold)."""
        folder = self._answers_dir(session_id)
        answers = {}
        for path in sorted(folder.glob("*.md")) if folder is not None else []:
            if _LABEL.fullmatch(path.stem):  # what a recorder writes; anything else is not read
                with contextlib.suppress(FileNotFoundError):
                    answers[path.stem] = self._read_answer_file(session_id, path)
        tail = self.read_events_tail(session_id)
        status = self.read_status(session_id)  # before the result, as always
        result = self.read_result(session_id)
        # A review's report draws its findings on the diff, which is the request's context.
        request = (self._read(session_id, "request.json", RequestRecord)
                   if result is not None and result.review is not None else None)
        return SessionRecord(status=status, result=result, events=tail.events,
                             answers=answers, events_skipped=tail.skipped, request=request,
                             roles=self._roles(session_id))

    def _roles(self, session_id: str) -> dict[str, str]:
        """Agent id -> role, from config.json's ``options.roles`` (in the agents' order);
        {} for a record without them or whose config is not sane (the report still shows)."""
        try:
            config = self.read_config(session_id)
        except (SessionNotFoundError, SessionStateError):
            return {}
        agents, options = config.get("agents"), config.get("options")
        roles = options.get("roles") if isinstance(options, dict) else None
        if not isinstance(agents, list) or not isinstance(roles, list):
            return {}
        return {agent["id"]: role for agent, role in zip(agents, roles, strict=False)
                if isinstance(agent, dict) and isinstance(agent.get("id"), str)
                and isinstance(role, str) and role != NO_ROLE}


def _tail_start(handle: BinaryIO, end: int, lines: int, limit: int) -> int:
    """Where the last ``lines`` lines of the file's first ``end`` bytes begin (0 when it has
    no more than that), found by reading back from ``end`` block by block, and no further
    back than ``limit`` bytes: then the first whole line within them (``end`` if none)."""
    floor = max(0, end - limit)
    earliest = end  # the start of the earliest whole line found
    pos = end
    while pos > floor:
        start = max(floor, pos - _BLOCK)
        handle.seek(start)
        block = handle.read(pos - start)
        at = len(block)
        while (at := block.rfind(b"\n", 0, at)) != -1:
            earliest = start + at + 1
            lines -= 1
            if lines == 0:
                return earliest
        pos = start
    if floor == 0:
        return 0
    handle.seek(floor - 1)
    return floor if handle.read(1) == b"\n" else earliest


def _count_lines(handle: BinaryIO, end: int) -> int:
    """The lines in the file's first ``end`` bytes, each ended by a line break (counted by
    blocks: nothing is parsed)."""
    handle.seek(0)
    lines = 0
    while end > 0 and (block := handle.read(min(_BLOCK, end))):
        lines += block.count(b"\n")
        end -= len(block)
    return lines
