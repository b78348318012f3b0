"""One run's writer: the folder a run records itself in, written as the run goes.

:func:`create_record` makes a session's folder (its config and request, or nothing at all when
the home cannot take it); :class:`FileRecorder` then writes the events, the live status, the
answers and the result, each masked (:func:`masked`) before anyone sees it, and, when its
writer gave it a :class:`Guard`, only while the guard holds the record. Reading
the records of every run, listing and pruning them is :mod:`massgen_mcp.records.store`'s:
the writer of one run and the reader of all runs change for different reasons.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from massgen_mcp.core.errors import RecordWriteError, describe_write_error
from massgen_mcp.core.files import Folder, make_folders
from massgen_mcp.core.records import Event, RequestRecord, VersionedRecord
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
from massgen_mcp.core.secrets import redact, redact_data
from massgen_mcp.records.liveness import RunLock

log = logging.getLogger(__name__)

MIN_FREE_BYTES = 256 * 1024  # refuse to start a run that could not even write its first events


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _dump_record(record: VersionedRecord) -> str:
    return record.model_dump_json(indent=2) + "\n"


EventHook = Callable[[Event], None]
StatusHook = Callable[[StatusRecord], None]
ReportWriter = Callable[[], object]  # writes a finished run's report.html


class RecordRefused(asyncio.CancelledError):
    """A record refused a write: its guard says another writer owns it, or its writer was
    told to stop.

    A cancellation, not an error, on purpose: it must stop the whole run at once, and no
    ``except Exception`` on the way (provider retries, tools, the engine's crash handler) may
    treat it as a failure to record and go on making calls."""


class Guard(Protocol):
    """What a recorder asks before every write, when its writer shares the record with
    others (a pool's fence): :meth:`hold` holds the record for one write or raises
    :class:`RecordRefused`; :meth:`close` lets go of it when the recorder closes."""

    def hold(self) -> AbstractContextManager[None]: ...
    def close(self) -> None: ...


GuardFactory = Callable[[Path], Guard]  # a session folder -> the guard of its writes


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
    """Writes one session's record: the engine's :class:`~massgen_mcp.consensus.snapshot.Recorder`
    for files. Every record is masked (:func:`masked`) before anyone sees it: the files, the
    live status that ``get_status`` serves, the events the CLI prints and the result.

    ``on_event`` and ``on_status`` let whoever runs the session follow it (progress lines,
    waking long polls) without a second layer around the writer. :meth:`close` ends the record
    with its ``report.html``, written by the closer's ``report`` under the recorder's hold.

    A write the disk refuses raises :class:`RecordWriteError` once (the engine then ends the
    run ``failed``, ``record_write_failed``); after that the recorder keeps the in-memory state
    current and writes whatever still fits, so readers in this process see the true end.

    A recorder made with a ``guard`` (a pool claim's fence) asks it before every write, hooks
    included: once the guard refuses with :class:`RecordRefused` (a newer claim owns the
    record), that write and every later one is refused, and so is every write after
    :meth:`detach` (a writer that lost its claim). The refusal cancels the run where it stands:
    a writer that must not write must not make another model call either. Such a record has no
    run lock: its guard's owner tells whether its run is alive.
    """

    def __init__(self, folder: Path, home: Path, *,
                 on_event: EventHook | None = None, on_status: StatusHook | None = None,
                 guard: GuardFactory | None = None) -> None:
        self.home = home  # named in a refused write's error
        self.session_id = folder.name
        self.folder = folder
        self.on_event = on_event
        self.on_status = on_status
        self.latest_status: StatusRecord | None = None
        self.result: ResultRecord | None = None
        self.write_error: RecordWriteError | None = None
        self.refused: str | None = None  # why this recorder may not write any more
        self._holding = False  # inside a write that holds the fence already
        # Who runs the session, stamped on every status: this process, or a pool worker.
        self.stamp: dict[str, Any] = {"pid": os.getpid()}
        # The folder is opened once and every file written through that handle (core/files.py
        # Folder): a session folder swapped for a link mid-run redirects no write.
        self._dir: Folder | None = None
        self._answers: Folder | None = None
        try:
            self._dir = Folder(folder)
            self._answers = self._dir.folder("answers")
            self._events = self._dir.append("events.jsonl")
            self._guard = guard(self.folder) if guard is not None else None
        except OSError as exc:
            self._close_folders()
            raise RecordWriteError(describe_write_error(exc, home)) from None
        # Held until the last status is written: readers tell a dead run by it (liveness).
        self._lock = RunLock.take(self.folder) if guard is None else None

    def _final_status_again(self) -> None:
        """After a refused write, try the final status once more as the run closes (space
        may be back); if the disk still refuses it, the run's lock says ``failed``."""
        status = self.latest_status
        if self.write_error is None or status is None or not status.status.done:
            return
        try:
            self._folder().replace("status.json", masked(status)[1])
        except OSError as exc:
            log.warning("session %s: the final status is still not written: %s",
                        self.session_id, exc)

    def _failed(self, exc: OSError) -> None:
        if self.write_error is not None:
            log.warning("session %s: %s", self.session_id, exc)
            return
        self.write_error = RecordWriteError(describe_write_error(exc, self.home))
        if self._lock is not None:
            self._lock.failed()
        log.error("session %s: %s", self.session_id, self.write_error)
        raise self.write_error from exc

    def detach(self, why: str) -> None:
        """Write nothing more, anywhere: the record belongs to someone else now."""
        self.refused = why

    @contextlib.contextmanager
    def _owned(self) -> Iterator[None]:
        """Hold the record for one write, or refuse it (see the class)."""
        if self.refused is not None:
            raise RecordRefused(self.refused)
        if self._guard is None or self._holding:  # no guard, or held by an outer write
            yield
            return
        try:
            with self._guard.hold():
                self._holding = True
                try:
                    yield
                finally:
                    self._holding = False
        except RecordRefused as exc:
            self.refused = str(exc)
            log.warning("session %s: fenced: %s; stopping the run without writing",
                        self.session_id, exc)
            raise

    def _folder(self, answers: bool = False) -> Folder:
        folder = self._answers if answers else self._dir
        assert folder is not None  # set in __init__, or it raised
        return folder

    def _close_folders(self) -> None:
        for folder in (self._answers, self._dir):
            if folder is not None:
                with contextlib.suppress(OSError):
                    folder.close()

    def _write(self, name: str, text: str, *, answers: bool = False) -> None:
        with self._owned():
            try:
                self._folder(answers).replace(name, text)
            except OSError as exc:
                self._failed(exc)

    def write_record(self, name: str, record: RequestRecord) -> None:
        self._write(name, masked(record)[1])

    def write_json(self, name: str, data: Any) -> None:
        self._write(name, _dump(redact_data(data)))

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
                self._folder().replace("status.json", text)
            except OSError as exc:
                self._failed(exc)

    def answer(self, label: str, content: str) -> None:
        self._write(f"{label}.md", redact(content) + "\n", answers=True)

    def finish(self, result: ResultRecord) -> None:
        clean, text = masked(result)
        with self._owned():
            self.result = clean
            if clean.final_answer is not None:
                self._write("final.md", clean.final_answer + "\n")
            self._write("result.json", text)

    def abandon(self) -> None:
        """Close what the recorder holds, writing nothing (a record that was never made)."""
        with contextlib.suppress(OSError):
            os.close(self._events)
        self._close_folders()
        if self._lock is not None:
            self._lock.release()

    def close(self, report: ReportWriter | None = None) -> None:
        """Close the event log and release the guard. ``report``, for the closer of a finished
        run: writes ``report.html``, called while the guard still holds the record (a paused
        worker must not write a report over another claim's record)."""
        os.close(self._events)
        try:
            if self.refused is None:
                self._final_status_again()
            if report is None or self.result is None or self.write_error is not None:
                return
            with self._owned():
                report()
        except RecordRefused:
            pass  # the record is another claim's now: so is its report
        except Exception:  # a report problem must never spoil the run's own record
            log.exception("could not write report.html for %s", self.session_id)
        finally:
            self._close_folders()
            if self._guard is not None:
                self._guard.close()
            if self._lock is not None:
                self._lock.release()


def create_record(folder: Path, home: Path, *, config: dict[str, Any],
                  request: RequestRecord, on_event: EventHook | None = None,
                  on_status: StatusHook | None = None) -> FileRecorder:
    """A new session ``folder`` (in the records of ``home``) with its config and request, and
    the recorder that writes the rest; or RecordWriteError (and no folder) when the home cannot
    take it."""
    recorder: FileRecorder | None = None
    try:
        make_folders(folder.parent)  # never group- or world-writable (check_state_folder)
        if shutil.disk_usage(folder.parent).free < MIN_FREE_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        folder.mkdir(mode=0o755)  # as make_folders: no group may swap what is in it
        recorder = FileRecorder(folder, home, on_event=on_event, on_status=on_status)
        recorder.write_json("config.json", config)
        recorder.write_record("request.json", request)
    except (OSError, RecordWriteError) as exc:
        if recorder is not None:
            recorder.abandon()
        shutil.rmtree(folder, ignore_errors=True)  # never leave an empty session behind
        if isinstance(exc, RecordWriteError):
            raise exc from None
        raise RecordWriteError(describe_write_error(exc, home)) from None
    except Exception:  # whatever else stops it: still no half-made session folder
        if recorder is not None:
            recorder.abandon()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return recorder
