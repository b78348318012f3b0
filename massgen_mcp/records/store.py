"""The records of all runs on disk, read: one human-readable folder per run, listed,
read whole, marked interrupted and pruned. One run's folder is written by its
:class:`~massgen_mcp.records.recorder.FileRecorder` (made by :meth:`SessionStore.create`).

```
<home>/sessions/<session_id>/
  config.json      the resolved team and options, api keys replaced by "***"
  request.json     question, context and parent session (what is needed to resume)
  status.json      live state, atomically replaced after every event
  events.jsonl     append-only, one JSON event per line
  answers/<label>.md   every answer ever given, by anonymous label (A1, B2, ...)
  result.json      written once at the end
  final.md         the final answer
  report.html      the run as one self-contained page, written when the run ends
  fence            pool runs only: the fencing token of the newest claim (see pool/fencing.py)
  running.lock     held by the process that runs it; a free lock means it is gone (liveness.py)
```

The JSON files hold the typed records of :mod:`massgen_mcp.core.records`. They are replaced
atomically (write a temp file, then rename), so a reader or a crash never sees half a file.
Every file is read as untrusted input (a cloned repository can ship a record): no link
followed, a regular file only, a size cap per kind, redacted again; a file that fails is
*corrupt*, logged once, and its session is skipped by lists, ``latest`` and the start-up sweep.
Session ids are ULIDs (:mod:`massgen_mcp.records.ids`): safe as folder names, they cannot
traverse paths.

Events are read in bounded time, not only bounded bytes: a planted ``events.jsonl`` of 250 MiB
of tiny events took two minutes of CPU to parse, and froze the server that read it. So at most
:data:`EVENTS_READ_MAX` events are parsed per read, the *last* ones, found by reading back from
the end; those before them are only counted. What shows a record (``show``, the report) says
how many it skipped; what needs every event (resume replays them, the events resource) refuses
a record of more, in one line naming the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import ValidationError

from massgen_mcp.core.errors import (
    ConfigError,
    MassgenError,
    RecordWriteError,
    SessionNotFoundError,
    SessionStateError,
    describe_write_error,
)
from massgen_mcp.core.files import (
    MIB,
    UnsafeFileError,
    check_state_folder,
    default_home,
    make_folders,
    open_safely,
    read_bytes_safely,
    read_text_safely,
    replace_file,
)
from massgen_mcp.core.records import (
    Event,
    EventType,
    Phase,
    RequestRecord,
    ResultRecord,
    RunStatus,
    SessionRecord,
    SessionSummary,
    StatusRecord,
    VersionedRecord,
)
from massgen_mcp.core.secrets import redact, redact_data
from massgen_mcp.core.spec import NO_ROLE
from massgen_mcp.records.ids import ID_PREFIX, SESSION_ID, check_session_id, session_time
from massgen_mcp.records.liveness import as_seen, ended, held_by_lease, lock_state
from massgen_mcp.records.recorder import (
    EventHook,
    FileRecorder,
    GuardFactory,
    StatusHook,
    create_record,
    masked,
)

log = logging.getLogger(__name__)

LATEST = "latest"  # what a person types for the newest session
# How far a session id's time may run ahead of this clock, or of when its status was written
# here, and still be ``latest``: a pool's machines, whose clocks differ a little. An id from
# further ahead was not made by a run (a repository can carry .massgen/sessions/7ZZZ..., the
# largest id, or an id dated a few days ahead).
CLOCK_SKEW_S = 300.0
AMBIGUOUS_SHOWN = 10  # candidates named when a prefix fits several ids
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


class SessionStore:
    """All session records under one home folder (``.massgen`` by default)."""

    def __init__(self, home: Path | None = None) -> None:
        self.given_home = home or default_home()  # a link there is refused (create)
        self.home = self.given_home.resolve()
        self.sessions_dir = self.home / "sessions"

    def folder(self, session_id: str) -> Path:
        return self.sessions_dir / check_session_id(session_id)

    # -- writing -----------------------------------------------------------------------------

    def create(self, session_id: str, *, config: dict[str, Any], request: RequestRecord,
               on_event: EventHook | None = None, on_status: StatusHook | None = None
               ) -> FileRecorder:
        """A new session folder with its config and request (:func:`create_record`), once the
        records folder is found to be no other user's (:func:`check_state_folder`).

        Checked again once ``sessions/`` is made: a check while it was missing says nothing
        of the one another user may make before ours (in a home others may add to, a sticky
        ``/tmp`` say), and making it accepts one that is already there."""
        try:
            check_state_folder(self.given_home)
            make_folders(self.sessions_dir)
            check_state_folder(self.given_home)
        except UnsafeFileError as exc:
            raise RecordWriteError(str(exc)) from None
        except OSError as exc:  # sessions/ cannot be made
            raise RecordWriteError(describe_write_error(exc, self.home)) from None
        return create_record(self.folder(session_id), self.home, config=config,
                             request=request, on_event=on_event, on_status=on_status)

    def reopen(self, session_id: str, *, on_event: EventHook | None = None,
               on_status: StatusHook | None = None, guard: GuardFactory | None = None
               ) -> FileRecorder:
        """A recorder that appends to an existing record (used to resume a run); ``guard``
        holds the record for each write when others share it (a pool claim's fence)."""
        return FileRecorder(self._existing(session_id), self.home, on_event=on_event,
                            on_status=on_status, guard=guard)

    def append_event(self, session_id: str, event_type: EventType, /, **data: Any) -> None:
        """Add one event, numbered after the recorded ones, to a session no run is writing."""
        recorder = self.reopen(session_id)
        try:
            last = self.read_events_tail(session_id, 8, count=False).events
            recorder.event(Event(seq=last[-1].seq + 1 if last else 1, ts=time.time(),
                                 type=event_type, **data))
        finally:
            recorder.close()

    def report_writer(self, session_id: str, render: Callable[[SessionRecord], str]
                      ) -> Callable[[], Path]:
        """What writes a finished run's ``report.html`` as ``render`` makes it from the whole
        record (a recorder's closer calls it under the recorder's hold)."""
        return lambda: self.write_report(session_id, render(self.read_record(session_id)))

    def write_report(self, session_id: str, html: str) -> Path:
        """Write ``report.html`` into the session folder (atomically) and return its path.

        Never through a link: a repository can carry a session folder, or a report or
        temporary file in one, that links elsewhere (``show --html`` would write there). The
        folder is found to be no link (``_existing``, and opened without following one where
        the platform can), and :func:`replace_file` replaces a link at ``report.html``
        rather than writing through it."""
        folder = self._existing(session_id)
        replace_file(folder / "report.html", html, folder_may_be_link=False)
        return folder / "report.html"

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

    # -- housekeeping ------------------------------------------------------------------------

    def mark_interrupted(self, is_alive: Callable[[int], bool]) -> list[str]:
        """Mark runs left ``running`` by a process that is gone as ``interrupted`` (or
        ``failed``, when the disk refused their last status: it may take it now).

        Gone means: nobody holds the run's lock (:mod:`~massgen_mcp.records.liveness`), or,
        for a record from before locks, its pid is not alive. The record stays intact:
        status.json gets the new status and events.jsonl an ``interrupted`` event, so list,
        status and resume all see it. A record that is not sane is skipped (one warning):
        start-up never depends on one.
        """
        marked = []
        for sid in self.session_ids():
            try:
                if self._mark_if_gone(sid, is_alive):
                    marked.append(sid)
            except (OSError, MassgenError) as exc:  # a full disk must not stop start-up
                log.warning("could not mark session %s interrupted: %s", sid, exc)
            except Exception as exc:  # nor may anything a planted record makes happen
                log.warning("session %s skipped: %s", sid, redact(repr(exc))[:300])
        return marked

    def _mark_if_gone(self, sid: str, is_alive: Callable[[int], bool]) -> bool:
        try:
            status = self._read_status(sid)
        except (SessionNotFoundError, SessionStateError):
            return False
        if status.status is not RunStatus.RUNNING or held_by_lease(status):
            return False  # a worker pool owns it: redelivery, not this server, continues it
        free, word = lock_state(self.folder(sid))
        pid = status.pid
        if free is False or (free is None and pid is not None and is_alive(pid)):
            return False
        result = self.read_result(sid)
        if result is not None:  # it finished, but its last status write was lost
            final = status.model_copy(update={
                "status": result.status, "finish_reason": result.finish_reason,
                "phase": Phase.DONE})
        else:
            final = ended(status, word)
            if final.status is RunStatus.INTERRUPTED:
                self.append_event(sid, EventType.INTERRUPTED, reason=f"process {pid} "
                                  "ended while the run was in progress")
        replace_file(self.folder(sid) / "status.json", masked(final)[1],
                     folder_may_be_link=False)  # as write_report: never into a linked folder
        return True

    def prune_candidates(self, older_than_s: float, now: float | None = None
                         ) -> list[SessionSummary]:
        """Finished sessions that started more than ``older_than_s`` ago (never running ones)."""
        now = time.time() if now is None else now
        found = []
        for sid in self.session_ids():
            summary = self.summary(sid)
            started = summary.started_at if summary else None
            if summary is None or not summary.status.done or started is None:
                continue
            if now - started > older_than_s:
                found.append(summary)
        return found

    def delete(self, session_id: str) -> None:
        shutil.rmtree(self._existing(session_id))

    def session_ids(self) -> Iterator[str]:
        """Ids newest first: the folders named by one, not links (a run makes a folder; a
        link was put there, and would lead ``show`` and its report outside the records)."""
        if not self.sessions_dir.is_dir():
            return iter(())
        with os.scandir(self.sessions_dir) as entries:
            names = [entry.name for entry in entries if SESSION_ID.fullmatch(entry.name)
                     and entry.is_dir(follow_symlinks=False)]
        return iter(sorted(names, reverse=True))

    def _written_at(self, session_id: str) -> float:
        """When the session's status was last written here: its inode change time, which
        no record's contents and no checkout can set. A run's id is made when it starts, so
        it is never later than that; an id a repository ships (dated days ahead, to become
        ``latest`` once that day comes) is later than its checkout, and is never ``latest``."""
        try:
            return (self.sessions_dir / session_id / "status.json").lstat().st_ctime
        except OSError:
            return 0.0

    def find(self, ref: str) -> str:
        """The id a person means by ``ref``: ``latest`` (the newest session), a whole id, or
        the start of exactly one id, in either case. People copy an id's first characters
        from ``sessions`` or want the run they just made; a prefix that fits several ids is
        refused with the candidates, never guessed."""
        wanted = ref.strip().upper()
        if wanted == LATEST.upper():  # not one made in the future: see CLOCK_SKEW_S
            now = time.time()
            newest = next((sid for sid in self.session_ids() if session_time(sid)
                           <= min(now, self._written_at(sid)) + CLOCK_SKEW_S
                           and self.summary(sid) is not None), None)  # a sane record
            if newest is None:
                raise SessionNotFoundError(f"no sessions yet in {self.sessions_dir}")
            return newest
        if not ID_PREFIX.fullmatch(wanted):
            raise SessionNotFoundError(
                f"{ref[:60]!r} is not a session id, the start of one, or {LATEST!r}; ids are "
                "26 characters like 01JD3V6Y8T2K6Q3M1R5X0B7N4C")
        matches = [sid for sid in self.session_ids() if sid.startswith(wanted)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise SessionNotFoundError(f"no session id starts with {wanted} in "
                                       f"{self.sessions_dir}")
        shown = ", ".join(matches[:AMBIGUOUS_SHOWN])
        more = f" and {len(matches) - AMBIGUOUS_SHOWN} more" if (
            len(matches) > AMBIGUOUS_SHOWN) else ""
        raise ConfigError(f"{wanted} is the start of {len(matches)} session ids ({shown}"
                          f"{more}); give more characters")

    def summary(self, session_id: str) -> SessionSummary | None:
        try:
            status = self.read_status(session_id)
            result = self.read_result(session_id)
        except (SessionNotFoundError, SessionStateError):
            return None
        return SessionSummary(
            session_id=session_id, status=status.status, question=status.question,
            winner=result.winner.label if result and result.winner else None,
            started_at=status.started_at, elapsed_s=status.elapsed_s,
            parent_session_id=status.parent_session_id,
        )

    def list(self, *, status: RunStatus | None = None, limit: int = 20,
             cursor: str | None = None) -> tuple[list[SessionSummary], str | None]:
        """A page of sessions newest first, and the cursor for the next page (or None)."""
        if cursor is not None:
            check_session_id(cursor, "cursor")
        found: list[SessionSummary] = []
        for sid in self.session_ids():
            if cursor is not None and sid >= cursor:
                continue
            summary = self.summary(sid)
            if summary is None or (status is not None and summary.status != status):
                continue
            if len(found) == limit:
                return found, found[-1].session_id
            found.append(summary)
        return found, None


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
