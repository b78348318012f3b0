"""Where a server's log file goes: the records folder once it exists, the user's state folder
until then.

A host starts the server for a health check (``claude mcp list``: start, list the tools,
stop) in every project it opens. Writing ``<project>/.massgen/server.log`` then left a folder
in projects that never ran a thing. So the log waits in the user's state folder
(``platformdirs.user_state_dir("massgen-mcp")/server.log``) and moves to ``<home>/server.log``
from the first record written after a run (or anything else that needs the project) has made
the records folder.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path


def state_dir() -> Path:
    """``$XDG_STATE_HOME/massgen-mcp`` when that is set (on every platform: the tests set it),
    else the platform's user state folder."""
    chosen = os.environ.get("XDG_STATE_HOME")
    if chosen and Path(chosen).is_absolute():
        return Path(chosen) / "massgen-mcp"
    import platformdirs

    return Path(platformdirs.user_state_dir("massgen-mcp"))


class FollowingLogFile(logging.Handler):
    """Appends each record to ``<home>/<name>`` if that folder exists, else to the state
    folder's file; a folder that cannot take it (read-only) drops the record: stderr has it."""

    def __init__(self, home: Path, name: str) -> None:
        super().__init__()
        self.home, self.name_of_file = home, name
        self._target: Path | None = None
        self._file: logging.FileHandler | None = None

    def _handler(self) -> logging.FileHandler | None:
        folder = self.home if self.home.is_dir() else state_dir()
        target = folder / self.name_of_file
        if target != self._target:
            if self._file is not None:
                self._file.close()
            self._target, self._file = target, None
            try:
                folder.mkdir(parents=True, exist_ok=True)
                self._file = logging.FileHandler(target, encoding="utf-8")
            except OSError:
                return None
            self._file.setFormatter(self.formatter)
        return self._file

    def emit(self, record: logging.LogRecord) -> None:  # under the handler's lock (handle)
        handler = self._handler()
        if handler is not None:
            handler.emit(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()
