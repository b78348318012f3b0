"""The records of all runs on disk: one human-readable folder per run, created, listed,
found, marked interrupted and pruned. One run's folder is written by its
:class:`~massgen_mcp.records.recorder.FileRecorder` (made by :meth:`SessionStore.create`).

```
<home>/.gitignore  written once if missing: git ignores the records (not config.yaml)
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

Reading a record (bounded, as untrusted input) is
:class:`~massgen_mcp.records.reader.RecordReader`'s; the store adds what spans sessions or
writes: create and reopen a record, append an event, write the report, list, find, mark
interrupted and prune.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from massgen_mcp.core.errors import (
    ConfigError,
    MassgenError,
    RecordWriteError,
    SessionNotFoundError,
    SessionStateError,
    describe_write_error,
)
from massgen_mcp.core.files import (
    UnsafeFileError,
    check_state_folder,
    ignore_for_git,
    make_folders,
    replace_file,
)
from massgen_mcp.core.records import Event, EventType, Phase, RequestRecord, RunStatus
from massgen_mcp.core.run_state import SessionRecord, SessionSummary
from massgen_mcp.core.secrets import redact
from massgen_mcp.records.ids import ID_PREFIX, SESSION_ID, check_session_id, session_time
from massgen_mcp.records.liveness import ended, held_by_lease, lock_state
from massgen_mcp.records.reader import RecordReader
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


class SessionStore(RecordReader):
    """All session records under one home folder (``.massgen`` by default): a reader that
    also writes them, lists, finds, marks interrupted and prunes."""

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
            ignore_for_git(self.home)
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


