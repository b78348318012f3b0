"""Session records on disk: one human-readable folder per run.

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
  fence            pool runs only: the fencing token of the newest claim (see fencing.py)
```

The JSON files hold the typed records of :mod:`massgen_mcp.core.records`. They are replaced
atomically (write a temp file, then rename), so a reader or a crash never sees half a file.
Session ids are ULIDs: they sort by creation time, carry 80 random bits, and contain only
``0-9A-Z``, so they are safe as folder names and cannot traverse paths.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from massgen_mcp.core.errors import (
    MassgenError,
    RecordWriteError,
    SessionNotFoundError,
    SessionStateError,
    describe_write_error,
)
from massgen_mcp.core.files import atomic_write, default_home
from massgen_mcp.core.records import (
    Event,
    EventType,
    FinishReason,
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
from massgen_mcp.sessions.fencing import Fence, RecordFenced

log = logging.getLogger(__name__)

MIN_FREE_BYTES = 256 * 1024  # refuse to start a run that could not even write its first events
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SESSION_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
_LABEL = re.compile(r"[A-H][0-9]{1,2}")
_R = TypeVar("_R", bound=VersionedRecord)




def new_session_id(now: float | None = None) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, Crockford base32."""
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def check_session_id(session_id: str, field: str = "session_id") -> str:
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise SessionNotFoundError(
            f"{field} {str(session_id)[:60]!r} is not a session id; ids are 26 characters "
            "like 01JD3V6Y8T2K6Q3M1R5X0B7N4C (see list_sessions)"
        )
    return session_id




def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _dump_record(record: VersionedRecord) -> str:
    return record.model_dump_json(indent=2) + "\n"


EventHook = Callable[[Event], None]
StatusHook = Callable[[StatusRecord], None]
Renderer = Callable[[SessionRecord], str]  # a finished record -> its report.html


_M = TypeVar("_M", Event, StatusRecord, ResultRecord, RequestRecord)


def masked(record: _M) -> tuple[_M, str]:
    """``record`` with every secret masked, and its JSON text. The common case (nothing to
    mask) costs one scan of the text; otherwise the strings are masked one by one, so the
    record stays valid whatever the secret looks like."""
    raw = _record_json(record)
    if redact(raw) == raw:
        return record, raw
    data = record.model_dump(mode="json", exclude_unset=isinstance(record, Event))
    clean = type(record).model_validate(redact_data(data))
    return clean, _record_json(clean)


def _record_json(record: Event | VersionedRecord) -> str:
    return record.to_json() if isinstance(record, Event) else _dump_record(record)


class FileRecorder:
    """Writes one session's record: the engine's :class:`~massgen_mcp.consensus.engine.Recorder`
    for files. Every record is masked (:func:`masked`) before anyone sees it: the files, the
    live status that ``get_status`` serves, the events the CLI prints and the result.

    ``on_event`` and ``on_status`` let whoever runs the session follow it (progress lines,
    waking long polls) without a second layer around the writer. :meth:`close` ends the record
    with its ``report.html``: the recorder owns the folder, so it writes the report too.

    A write the disk refuses raises :class:`RecordWriteError` once (the engine then ends the
    run ``failed``, ``record_write_failed``); after that the recorder keeps the in-memory state
    current and writes whatever still fits, so readers in this process see the true end.

    A pool worker's recorder carries its claim's fencing token (``fence``): every write, hooks
    included, is refused with :class:`~massgen_mcp.sessions.fencing.RecordFenced` once a newer
    claim owns the record, and so is every write after :meth:`detach` (a worker that lost its
    claim). The refusal cancels the run where it stands: a worker that must not write must not
    make another model call either.
    """

    def __init__(self, store: SessionStore, session_id: str, *,
                 on_event: EventHook | None = None, on_status: StatusHook | None = None,
                 fence: int | None = None) -> None:
        self.store = store
        self.session_id = session_id
        self.folder = store.folder(session_id)
        self.on_event = on_event
        self.on_status = on_status
        self.latest_status: StatusRecord | None = None
        self.result: ResultRecord | None = None
        self.write_error: RecordWriteError | None = None
        self.refused: str | None = None  # why this recorder may not write any more
        self._holding = False  # inside a write that holds the fence already
        # Who runs the session, stamped on every status: this process, or a pool worker.
        self.stamp: dict[str, Any] = {"pid": os.getpid()}
        try:
            (self.folder / "answers").mkdir(parents=True, exist_ok=True)
            self._events = os.open(self.folder / "events.jsonl",
                                   os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._fence = Fence(self.folder, fence) if fence is not None else None
        except OSError as exc:
            raise RecordWriteError(describe_write_error(exc, store.home)) from None

    def _failed(self, exc: OSError) -> None:
        if self.write_error is not None:
            log.warning("session %s: %s", self.session_id, exc)
            return
        self.write_error = RecordWriteError(describe_write_error(exc, self.store.home))
        log.error("session %s: %s", self.session_id, self.write_error)
        raise self.write_error from exc

    def detach(self, why: str) -> None:
        """Write nothing more, anywhere: the record belongs to someone else now."""
        self.refused = why

    @contextlib.contextmanager
    def _owned(self) -> Iterator[None]:
        """Hold the record for one write, or refuse it (see the class)."""
        if self.refused is not None:
            raise RecordFenced(self.refused)
        if self._fence is None or self._holding:  # no claim, or held by an outer write
            yield
            return
        try:
            with self._fence.hold():
                self._holding = True
                try:
                    yield
                finally:
                    self._holding = False
        except RecordFenced as exc:
            self.refused = str(exc)
            log.warning("session %s: fenced: %s; stopping the run without writing",
                        self.session_id, exc)
            raise

    def _write(self, path: Path, text: str) -> None:
        with self._owned():
            try:
                atomic_write(path, text)
            except OSError as exc:
                self._failed(exc)

    def write_record(self, name: str, record: RequestRecord) -> None:
        self._write(self.folder / name, masked(record)[1])

    def write_json(self, name: str, data: Any) -> None:
        self._write(self.folder / name, _dump(redact_data(data)))

    def event(self, event: Event) -> None:
        event, line = masked(event)
        data = (line + "\n").encode("utf-8")
        with self._owned():
            if self.on_event is not None:
                self.on_event(event)
            size = os.fstat(self._events).st_size
            try:
                # One write, so lines never interleave; a short write (disk full) is undone,
                # so the file never holds half a line for later events to follow.
                if os.write(self._events, data) != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._events, size)
                self._failed(exc)

    def status(self, status: StatusRecord) -> None:
        latest, text = masked(status.model_copy(update=self.stamp))
        with self._owned():
            self.latest_status = latest
            if self.on_status is not None:
                self.on_status(latest)
            try:
                atomic_write(self.folder / "status.json", text)
            except OSError as exc:
                self._failed(exc)

    def answer(self, label: str, content: str) -> None:
        self._write(self.folder / "answers" / f"{label}.md", redact(content) + "\n")

    def finish(self, result: ResultRecord) -> None:
        clean, text = masked(result)
        with self._owned():
            self.result = clean
            if clean.final_answer is not None:
                self._write(self.folder / "final.md", clean.final_answer + "\n")
            self._write(self.folder / "result.json", text)

    def close(self, report: Renderer | None = None) -> None:
        """Close the event log and release the fence. ``report``, for the closer of a finished
        run: renders ``report.html``, which is written while the fence is still held (a paused
        worker must not write a report over another claim's record); the store itself only
        writes the bytes it is given."""
        os.close(self._events)
        try:
            if report is None or self.result is None or self.write_error is not None:
                return
            with self._owned():
                self.store.write_report(self.session_id, report(
                    self.store.read_record(self.session_id)))
        except RecordFenced:
            pass  # the record is another claim's now: so is its report
        except Exception:  # a report problem must never spoil the run's own record
            log.exception("could not write report.html for %s", self.session_id)
        finally:
            if self._fence is not None:
                self._fence.close()


def _pool_owned(status: StatusRecord) -> bool:
    """Whether a worker pool runs this session (a worker's name, or queued for one)."""
    return status.worker is not None or status.phase is Phase.QUEUED




class SessionStore:
    """All session records under one home folder (``.massgen`` by default)."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = (home or default_home()).resolve()
        self.sessions_dir = self.home / "sessions"

    def folder(self, session_id: str) -> Path:
        return self.sessions_dir / check_session_id(session_id)

    # -- writing -----------------------------------------------------------------------------

    def create(self, session_id: str, *, config: dict[str, Any], request: RequestRecord,
               on_event: EventHook | None = None, on_status: StatusHook | None = None
               ) -> FileRecorder:
        """A new session folder with its config and request, or RecordWriteError (and no
        folder) when the home cannot take it."""
        folder = self.folder(session_id)
        try:
            self.sessions_dir.mkdir(parents=True, exist_ok=True)
            if shutil.disk_usage(self.sessions_dir).free < MIN_FREE_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            folder.mkdir()
            recorder = FileRecorder(self, session_id, on_event=on_event, on_status=on_status)
            recorder.write_json("config.json", config)
            recorder.write_record("request.json", request)
        except (OSError, RecordWriteError) as exc:
            shutil.rmtree(folder, ignore_errors=True)  # never leave an empty session behind
            if isinstance(exc, RecordWriteError):
                raise exc from None
            raise RecordWriteError(describe_write_error(exc, self.home)) from None
        except Exception:  # whatever else stops it: still no half-made session folder
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return recorder

    def reopen(self, session_id: str, *, on_event: EventHook | None = None,
               on_status: StatusHook | None = None, fence: int | None = None
               ) -> FileRecorder:
        """A recorder that appends to an existing record (used to resume a run); ``fence``
        is the fencing token of the pool claim it writes under, if any."""
        self._existing(session_id)
        return FileRecorder(self, session_id, on_event=on_event, on_status=on_status,
                            fence=fence)

    def append_event(self, session_id: str, event_type: EventType, /, **data: Any) -> None:
        """Add one event, numbered after the recorded ones, to a session no run is writing."""
        recorder = self.reopen(session_id)
        try:
            recorder.event(Event(seq=len(self.read_events(session_id)) + 1, ts=time.time(),
                                 type=event_type, **data))
        finally:
            recorder.close()

    def write_report(self, session_id: str, html: str) -> Path:
        """Write ``report.html`` into the session folder (atomically) and return its path."""
        path = self.folder(session_id) / "report.html"
        atomic_write(path, html)
        return path

    # -- reading -----------------------------------------------------------------------------

    def _existing(self, session_id: str) -> Path:
        folder = self.folder(session_id)
        if not folder.is_dir():
            raise SessionNotFoundError(
                f"no session {session_id} in {self.sessions_dir}; use list_sessions to see ids"
            )
        return folder

    def _read(self, session_id: str, name: str, kind: type[_R]) -> _R | None:
        path = self._existing(session_id) / name
        try:
            return kind.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError as exc:
            raise SessionStateError(f"session {session_id}: {name} cannot be read: "
                                    f"{exc.errors()[0]['msg']}") from None

    def read_config(self, session_id: str) -> dict[str, Any]:
        """The team and options the session ran with (config.json; keys masked)."""
        path = self._existing(session_id) / "config.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise SessionStateError(f"session {session_id}: config.json is not a mapping")
        return data

    def read_request(self, session_id: str) -> RequestRecord:
        request = self._read(session_id, "request.json", RequestRecord)
        if request is None:
            raise SessionNotFoundError(f"session {session_id} has no request.json")
        return request

    def read_status(self, session_id: str) -> StatusRecord:
        status = self._read(session_id, "status.json", StatusRecord)
        if status is None:
            raise SessionNotFoundError(f"session {session_id} has no status.json yet")
        return status

    def read_result(self, session_id: str) -> ResultRecord | None:
        return self._read(session_id, "result.json", ResultRecord)

    def read_events(self, session_id: str) -> list[Event]:
        path = self._existing(session_id) / "events.jsonl"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        events = []
        for i, line in enumerate(lines):
            try:
                events.append(Event.model_validate_json(line))
            except ValidationError:
                if i == len(lines) - 1:
                    break  # a line cut short by a crash: everything before it is intact
                raise
        return events

    def read_answer(self, session_id: str, label: str) -> str:
        if not _LABEL.fullmatch(label):
            raise SessionNotFoundError(f"{label!r} is not an answer label (like A1 or C2)")
        path = self._existing(session_id) / "answers" / f"{label}.md"
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SessionNotFoundError(f"session {session_id} has no answer {label}") from None

    def read_record(self, session_id: str) -> SessionRecord:
        """Everything recorded about a session, typed."""
        folder = self._existing(session_id) / "answers"
        answers = ({p.stem: p.read_text(encoding="utf-8") for p in folder.glob("*.md")}
                   if folder.is_dir() else {})
        return SessionRecord(status=self.read_status(session_id),
                             result=self.read_result(session_id),
                             events=self.read_events(session_id), answers=answers)

    # -- housekeeping ------------------------------------------------------------------------

    def mark_interrupted(self, is_alive: Callable[[int], bool]) -> list[str]:
        """Mark runs left ``running`` by a process that is gone as ``interrupted``.

        The record stays intact: status.json gets the new status and events.jsonl an
        ``interrupted`` event, so list, status and resume all see it.
        """
        marked = []
        for sid in self.session_ids():
            try:
                status = self.read_status(sid)
            except (SessionNotFoundError, SessionStateError):
                continue
            pid = status.pid
            if status.status is not RunStatus.RUNNING or (pid is not None and is_alive(pid)):
                continue
            if _pool_owned(status):
                continue  # a worker pool owns it: redelivery, not this server, continues it
            try:
                result = self.read_result(sid)
                if result is not None:  # it finished, but its last status write was lost
                    ended = status.model_copy(update={
                        "status": result.status, "finish_reason": result.finish_reason,
                        "phase": Phase.DONE})
                else:
                    ended = status.model_copy(update={
                        "status": RunStatus.INTERRUPTED,
                        "finish_reason": FinishReason.INTERRUPTED, "phase": Phase.DONE})
                    self.append_event(sid, EventType.INTERRUPTED, reason=f"process {pid} "
                                      "ended while the run was in progress")
                atomic_write(self.folder(sid) / "status.json", masked(ended)[1])
            except (OSError, MassgenError) as exc:  # a full disk must not stop start-up
                log.warning("could not mark session %s interrupted: %s", sid, exc)
                continue
            marked.append(sid)
        return marked

    def pool_unfinished(self, quiet_for_s: float, now: float | None = None) -> list[str]:
        """Runs a worker pool owns that are still running or queued and whose status has not
        changed for ``quiet_for_s``: the ones a pool's sweep checks for a live claim."""
        now = time.time() if now is None else now
        found = []
        for sid in self.session_ids():
            try:
                status = self.read_status(sid)
            except (SessionNotFoundError, SessionStateError):
                continue
            if (status.status is RunStatus.RUNNING and _pool_owned(status)
                    and now - status.updated_at >= quiet_for_s):
                found.append(sid)
        return found

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
        """Ids newest first."""
        if not self.sessions_dir.is_dir():
            return iter(())
        names = [p.name for p in self.sessions_dir.iterdir() if _SESSION_ID.fullmatch(p.name)]
        return iter(sorted(names, reverse=True))

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
