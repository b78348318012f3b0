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
```

JSON files are replaced atomically (write a temp file, then rename), so a reader or a crash never
sees half a file. Session ids are ULIDs: they sort by creation time, carry 80 random bits, and
contain only ``0-9A-Z``, so they are safe as folder names and cannot traverse paths.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from massgen_mcp.errors import SessionNotFoundError
from massgen_mcp.secrets import redact

HOME_ENV = "MASSGEN_HOME"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SESSION_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_LABEL = re.compile(r"^[A-H][0-9]{1,2}$")
TERMINAL_STATUSES = frozenset({"completed", "failed", "timed_out", "cancelled", "interrupted"})
STATUSES = TERMINAL_STATUSES | {"running"}


def default_home() -> Path:
    """``$MASSGEN_HOME`` if set, else ``.massgen`` in the current directory; if that folder
    cannot be written (hosts such as Claude Desktop start servers in ``/``), the user data
    folder (``~/.local/share/massgen-mcp`` on Linux)."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env)
    cwd = Path.cwd()
    if os.access(cwd, os.W_OK) and cwd != Path(cwd.anchor):
        return cwd / ".massgen"
    import platformdirs

    return Path(platformdirs.user_data_dir("massgen-mcp"))


def new_session_id(now: float | None = None) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, Crockford base32."""
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not _SESSION_ID.match(session_id):
        raise SessionNotFoundError(
            f"session_id {str(session_id)[:60]!r} is not a session id; ids are 26 characters "
            "like 01JD3V6Y8T2K6Q3M1R5X0B7N4C (see list_sessions)"
        )
    return session_id


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


class SessionWriter:
    """Writes one session's record; implements the engine's ``Recorder`` protocol.

    Every string is passed through :func:`redact` on its way to disk.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.latest_status: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        (folder / "answers").mkdir(parents=True, exist_ok=True)
        self._events = os.open(folder / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                               0o644)

    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.folder / name, redact(_dump(data)))

    def event(self, event: dict[str, Any]) -> None:
        line = redact(json.dumps(event, ensure_ascii=False)) + "\n"
        os.write(self._events, line.encode("utf-8"))  # one write: lines never interleave

    def status(self, status: dict[str, Any]) -> None:
        status = {**status, "pid": os.getpid()}
        self.latest_status = status
        self.write_json("status.json", status)

    def answer(self, label: str, content: str) -> None:
        atomic_write(self.folder / "answers" / f"{label}.md", redact(content) + "\n")

    def finish(self, result: dict[str, Any]) -> None:
        self.result = result
        if result.get("final_answer") is not None:
            atomic_write(self.folder / "final.md", redact(result["final_answer"]) + "\n")
        self.write_json("result.json", result)

    def close(self) -> None:
        os.close(self._events)


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    status: str
    question: str
    winner: str | None
    started_at: float | None
    elapsed_s: float | None
    parent_session_id: str | None


class SessionStore:
    """All session records under one home folder (``.massgen`` by default)."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = (home or default_home()).resolve()
        self.sessions_dir = self.home / "sessions"

    def folder(self, session_id: str) -> Path:
        return self.sessions_dir / check_session_id(session_id)

    def create(self, session_id: str, *, config: dict[str, Any], request: dict[str, Any]
               ) -> SessionWriter:
        folder = self.folder(session_id)
        folder.mkdir(parents=True, exist_ok=False)
        writer = SessionWriter(folder)
        writer.write_json("config.json", config)
        writer.write_json("request.json", request)
        return writer

    def append_event(self, session_id: str, event_type: str, /, **data: Any) -> None:
        """Add one event, numbered after the recorded ones, to a session no run is writing."""
        writer = self.reopen(session_id)
        try:
            writer.event({"seq": len(self.read_events(session_id)) + 1, "ts": time.time(),
                          "type": event_type, **data})
        finally:
            writer.close()

    def reopen(self, session_id: str) -> SessionWriter:
        """A writer that appends to an existing record (used to resume a run)."""
        return SessionWriter(self._existing(session_id))

    def _existing(self, session_id: str) -> Path:
        folder = self.folder(session_id)
        if not folder.is_dir():
            raise SessionNotFoundError(
                f"no session {session_id} in {self.sessions_dir}; use list_sessions to see ids"
            )
        return folder

    def read_json(self, session_id: str, name: str) -> dict[str, Any] | None:
        path = self._existing(session_id) / name
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def read_status(self, session_id: str) -> dict[str, Any]:
        status = self.read_json(session_id, "status.json")
        if status is None:
            raise SessionNotFoundError(f"session {session_id} has no status.json yet")
        return status

    def read_result(self, session_id: str) -> dict[str, Any] | None:
        return self.read_json(session_id, "result.json")

    def read_events(self, session_id: str) -> list[dict[str, Any]]:
        path = self._existing(session_id) / "events.jsonl"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        events = []
        for i, line in enumerate(lines):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                if i == len(lines) - 1:
                    break  # a line cut short by a crash: everything before it is intact
                raise
        return events

    def read_answer(self, session_id: str, label: str) -> str:
        if not _LABEL.match(label):
            raise SessionNotFoundError(f"{label!r} is not an answer label (like A1 or C2)")
        path = self._existing(session_id) / "answers" / f"{label}.md"
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SessionNotFoundError(f"session {session_id} has no answer {label}") from None

    def mark_interrupted(self, is_alive: Callable[[int], bool]) -> list[str]:
        """Mark runs left ``running`` by a process that is gone as ``interrupted``.

        The record stays intact: status.json gets the new status and events.jsonl an
        ``interrupted`` event, so list, status and resume all see it.
        """
        marked = []
        for sid in self.session_ids():
            try:
                status = self.read_status(sid)
            except (SessionNotFoundError, json.JSONDecodeError):
                continue
            pid = status.get("pid")
            if status.get("status") != "running" or (isinstance(pid, int) and is_alive(pid)):
                continue
            status.update(status="interrupted", finish_reason="interrupted", phase="done")
            self.append_event(sid, "interrupted",
                              reason=f"process {pid} ended while the run was in progress")
            atomic_write(self.folder(sid) / "status.json", redact(_dump(status)))
            marked.append(sid)
        return marked

    def prune_candidates(self, older_than_s: float, now: float | None = None
                         ) -> list[SessionSummary]:
        """Finished sessions that started more than ``older_than_s`` ago (never running ones)."""
        now = time.time() if now is None else now
        found = []
        for sid in self.session_ids():
            summary = self.summary(sid)
            started = summary.started_at if summary else None
            if summary is None or summary.status not in TERMINAL_STATUSES or started is None:
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
        names = [p.name for p in self.sessions_dir.iterdir() if _SESSION_ID.match(p.name)]
        return iter(sorted(names, reverse=True))

    def summary(self, session_id: str) -> SessionSummary | None:
        try:
            status = self.read_status(session_id)
        except (SessionNotFoundError, json.JSONDecodeError):
            return None
        result = self.read_result(session_id) or {}
        winner = (result.get("winner") or {}).get("label")
        return SessionSummary(
            session_id=session_id,
            status=status.get("status", "unknown"),
            question=status.get("question", ""),
            winner=winner,
            started_at=status.get("started_at"),
            elapsed_s=status.get("elapsed_s"),
            parent_session_id=status.get("parent_session_id"),
        )

    def list(self, *, status: str | None = None, limit: int = 20, cursor: str | None = None
             ) -> tuple[list[SessionSummary], str | None]:
        """A page of sessions newest first, and the cursor for the next page (or None)."""
        if cursor is not None:
            check_session_id(cursor)
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
