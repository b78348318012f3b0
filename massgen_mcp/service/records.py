"""The door's record reads: sessions as a person names and lists them, and the records
folder's housekeeping, for the faces (which reach no store themselves).

Apart from the runs (:class:`massgen_mcp.service.ConsensusService` starts, follows and
cancels them through its executor) because none of this asks an executor: it reads and
tidies the records under the service's home, checking every id a caller gives. Eval's runs
are left out of what a person lists, and ``latest`` is the newest run a person made.
"""

from __future__ import annotations

import os
from pathlib import Path

from massgen_mcp.core import portable
from massgen_mcp.core.errors import MassgenError, SessionNotFoundError
from massgen_mcp.core.outcomes import ReviewTarget
from massgen_mcp.core.records import Event, RunKind, RunStatus
from massgen_mcp.core.run_state import SessionRecord, SessionSummary
from massgen_mcp.records.ids import check_session_id
from massgen_mcp.records.store import LATEST, SessionStore


class RecordReads:
    """Reads and housekeeping of the records under one store (the service's)."""

    store: SessionStore

    def find_session(self, ref: str, *, include_eval: bool = False) -> str:
        """The session id ``ref`` names for a person: ``latest``, an id, or a unique start
        of one (:meth:`SessionStore.find`). ``latest`` is the newest run a person made:
        eval's runs are skipped unless ``include_eval``; an id names any run."""
        found = self.store.find(ref)
        if include_eval or ref.strip().lower() != LATEST or not self.is_eval(found):
            return found
        # Older ids than the newest one find accepts are not from the future either.
        newest = next((sid for sid in self.store.session_ids()
                       if sid < found and not self.is_eval(sid)), None)
        if newest is None:
            raise SessionNotFoundError(
                f"no sessions but eval's in {self.store.sessions_dir}; `massgen-mcp sessions "
                "--all` lists those, and an id shows one")
        return newest

    def is_eval(self, session_id: str) -> bool:
        """Whether ``massgen-mcp eval`` made the run (its request says so)."""
        try:
            return self.store.read_request(session_id).kind is RunKind.EVAL
        except MassgenError:
            return False

    def review_target(self, session_id: str) -> ReviewTarget | None:
        """What a review run reviews (its request says so), else None: a review is titled
        by it (:meth:`ReviewTarget.title`), not by its long prompt."""
        try:
            return self.store.read_request(session_id).review
        except MassgenError:
            return None

    def record(self, session_id: str) -> SessionRecord:
        """Everything recorded about a session: status, result, events, every answer."""
        return self.store.read_record(check_session_id(session_id))

    def write_report(self, session_id: str, html: str) -> Path:
        """(Re)write the session's ``report.html`` with ``html`` (the face renders it from
        :meth:`record`) and return its path."""
        return self.store.write_report(check_session_id(session_id), html)

    def events(self, session_id: str) -> list[Event]:
        return self.store.read_events(check_session_id(session_id))

    def answer(self, session_id: str, label: str) -> str:
        return self.store.read_answer(check_session_id(session_id), label)

    def list_sessions(self, status: RunStatus | None = None, limit: int = 20,
                      cursor: str | None = None, *, include_eval: bool = False
                      ) -> tuple[list[SessionSummary], str | None]:
        """A page of sessions newest first, and the cursor of the next page (None: last).
        Eval's runs (a run per question and sampling runs it stops itself) are left out
        unless ``include_eval``: a person's list is the runs they made."""
        found: list[SessionSummary] = []
        while True:
            page, cursor = self.store.list(status=status, limit=limit, cursor=cursor)
            for summary in page:
                if not include_eval and self.is_eval(summary.session_id):
                    continue
                if len(found) == limit:
                    return found, found[-1].session_id
                found.append(summary)
            if cursor is None:
                return found, None

    # -- the records folder, for the CLI and eval ---------------------------------------------

    @property
    def home(self) -> Path:
        """The home folder the records live under (``<home>/sessions``); eval writes beside."""
        return self.store.home

    @property
    def records_dir(self) -> Path:
        """The folder that holds one folder per session."""
        return self.store.sessions_dir

    def folder(self, session_id: str) -> Path:
        """The folder of one session's record."""
        return self.store.folder(check_session_id(session_id))

    def prune_candidates(self, older_than_s: float) -> list[SessionSummary]:
        """Finished sessions whose record is older than ``older_than_s`` seconds."""
        return self.store.prune_candidates(older_than_s)

    def delete(self, session_id: str) -> None:
        """Delete a finished session's record."""
        self.store.delete(check_session_id(session_id))

    def mark_interrupted(self) -> list[str]:
        """Mark runs whose process is gone as interrupted (at server start)."""
        return self.store.mark_interrupted(
            lambda pid: pid != os.getpid() and portable.pid_alive(pid))

    def record_folder(self, session_id: str) -> Path:
        """The folder a session's records are in (shown to callers as record_dir)."""
        return self.store.folder(check_session_id(session_id))
