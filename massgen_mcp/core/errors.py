"""One exception hierarchy for everything massgen-mcp raises on purpose.

Every message is written to be shown as-is to a person or to the model that called a tool:
it names the field or thing that is wrong and says how to fix it, and it never contains a
secret (provider messages pass through :func:`massgen_mcp.core.secrets.redact` first).

```
MassgenError
├── ConfigError            bad config file, model string, option or tool input (exit code 1)
│   ├── UntrustedConfigError  a project config or a call needs the user's consent first
│   ├── UnknownTeamError      a team model name (massgen/...) that names no team
│   └── EndpointUnreachableError  a model's server takes no connection (checked before a run)
├── ProviderError          one model call failed after retries; carries .kind (ErrorKind),
│                          .retryable, .status_code
├── SessionNotFoundError   no session with that id in this store
├── SessionStateError      the session is in a state that does not allow the request
│   └── RunNotFinishedError  it has no result yet; carries .session_id, .status, .interrupted
├── RecordWriteError       the record folder cannot be written (disk full, I/O, permissions)
├── PoolUnavailableError   a worker pool's Redis did not take a run (front ends of a pool)
├── ModelDownloadError     ``models pull`` could not download, or refused, a model file
└── ListenError            serve --http cannot listen on its address (exit code 6)
```
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class MassgenError(Exception):
    """Base class; the message is safe to show to a user or an LLM."""


class ConfigError(MassgenError):
    """A config, model string, option or tool argument is invalid."""


class UntrustedConfigError(ConfigError):
    """A project config, or a model's call, would send a key from the user's environment or
    the project's files to a foreign host, or lift the secret-file deny-list."""


class UnknownTeamError(ConfigError):
    """A team model name that names no team."""


class EndpointUnreachableError(ConfigError):
    """A model's server (its base_url, or Ollama) takes no connection, so a run is not
    started: the message names the URL, why, and what to do."""


class ErrorKind(StrEnum):
    """What kind of failure a model call met: the one vocabulary of every provider (litellm's
    exceptions, an HTTP status, a CLI's output, the embedded model). The value is what the
    ``retry`` events of ``events.jsonl`` carry as ``kind``."""

    RATE_LIMIT = "rate_limit"
    AUTH = "auth"
    BAD_REQUEST = "bad_request"
    CONTEXT_WINDOW = "context_window"
    CONTENT_FILTER = "content_filter"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"  # 5xx, a dropped connection, a garbled or cut-short reply
    UNREACHABLE = "unreachable"  # a server the user runs takes no connection
    UNAVAILABLE = "unavailable"  # no such CLI, model file or llama.cpp here
    CLI_ERROR = "cli_error"
    LOCAL_ERROR = "local_error"  # the embedded model failed
    ERROR = "error"  # none of the above (and any kind a record names that this release does not)

    @classmethod
    def read(cls, value: object) -> ErrorKind | None:
        """The kind a record names: a record is untrusted and may come from another release,
        so a word this release does not know reads as :attr:`ERROR` instead of failing."""
        if value is None or isinstance(value, ErrorKind):
            return value
        try:
            return cls(value) if isinstance(value, str) else cls.ERROR
        except ValueError:
            return cls.ERROR


# Each kind's message prefix (for :meth:`ProviderError.of`) and whether trying again may help.
_KINDS: dict[ErrorKind, tuple[str, bool]] = {
    ErrorKind.RATE_LIMIT: ("rate limited: ", True),
    ErrorKind.AUTH: ("authentication failed: ", False),
    ErrorKind.BAD_REQUEST: ("request rejected: ", False),
    ErrorKind.CONTEXT_WINDOW: ("context window exceeded: ", False),
    ErrorKind.CONTENT_FILTER: ("content filter: ", False),
    ErrorKind.TIMEOUT: ("timeout: ", True),
    ErrorKind.SERVER_ERROR: ("provider error: ", True),
    ErrorKind.UNREACHABLE: ("", False),
    ErrorKind.UNAVAILABLE: ("", False),
    ErrorKind.CLI_ERROR: ("", False),
    ErrorKind.LOCAL_ERROR: ("", False),
    ErrorKind.ERROR: ("", False),
}
# The kinds a server's Retry-After hint speaks for (a refusal to wait for, or an overload).
_HINTED = frozenset({ErrorKind.RATE_LIMIT, ErrorKind.SERVER_ERROR})


@dataclass(frozen=True)
class Refusal:
    """One reason a run may not start, as a paragraph of the error that refuses it (an
    executor's preflight). ``unreachable``: a server that takes no connection
    (:class:`EndpointUnreachableError`), else the team or this machine (:class:`ConfigError`)."""

    text: str
    unreachable: bool = False


def refusal_error(refusals: Sequence[Refusal]) -> ConfigError:
    """One error listing every reason, of the first one's class: preflight lists them in the
    order the checks have always run, so the class is the one the first failing check raised
    when each check raised on its own."""
    kind = EndpointUnreachableError if refusals[0].unreachable else ConfigError
    return kind("\n".join(refusal.text for refusal in refusals))


class ProviderError(MassgenError):
    """A model call failed.

    ``retryable`` says whether trying again may help (rate limits, 5xx, timeouts, dropped
    connections; by default the kind's, from the table above); ``retry_after`` is the
    provider's Retry-After hint in seconds, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        status_code: int | None = None,
        retry_after: float | None = None,
        kind: ErrorKind = ErrorKind.ERROR,
    ) -> None:
        super().__init__(message)
        self.retryable = _KINDS[kind][1] if retryable is None else retryable
        self.status_code = status_code
        self.retry_after = retry_after
        self.kind = kind

    @classmethod
    def of(cls, kind: ErrorKind, text: str, *, status: int | None = None,
           retry_after: float | None = None, retryable: bool | None = None) -> ProviderError:
        """A failure worded by its kind: the kind's prefix, then ``text`` (already redacted);
        the Retry-After hint is kept only for the kinds it speaks for."""
        return cls(f"{_KINDS[kind][0]}{text}", retryable=retryable, status_code=status,
                   retry_after=retry_after if kind in _HINTED else None, kind=kind)

    def amended(self, more: str) -> ProviderError:
        """The same failure with ``more`` added to its message."""
        return ProviderError(f"{self}{more}", retryable=self.retryable,
                             status_code=self.status_code, retry_after=self.retry_after,
                             kind=self.kind)


class SessionNotFoundError(MassgenError):
    """No session with that id exists in the store."""


class SessionStateError(MassgenError):
    """The session exists but cannot do what was asked (e.g. resume a completed run)."""


class SteerRefusedError(SessionStateError):
    """A steering note the run cannot take: it is not running, the team has already
    decided, or the user sent too many notes too fast. The message says which and what to
    do instead."""


class RunNotFinishedError(SessionStateError):
    """The run is still going (or was interrupted), so it has no result yet. Front ends add
    how to wait for it in their own words: ``interrupted`` says whether waiting would do (no:
    nothing is running it, it must be resumed). ``status`` is the run's state as its record
    words it; this module imports no records, so the early start path stays light."""

    def __init__(self, session_id: str, status: str, *, interrupted: bool) -> None:
        super().__init__(f"session {session_id} is {status} and has no result yet")
        self.session_id = session_id
        self.status = status
        self.interrupted = interrupted


def resume_hint(session_id: str) -> str:
    """The way on from an interrupted run (its process stopped before the team decided), in
    the words of both faces, for every message that meets one: a steer, a follow-up,
    ``show``. Nothing else goes on with it: no note reaches it, it has no answer to follow."""
    return (f"resume it from its recorded answers and votes (resume_session, or "
            f"massgen-mcp resume {session_id} at a terminal)")


class RecordWriteError(MassgenError):
    """A session record could not be written: the disk is full, failing or read-only."""


class PoolUnavailableError(MassgenError):
    """The worker pool's Redis could not be reached, so a run was not queued."""


class ModelDownloadError(MassgenError):
    """A model file could not be downloaded, or did not match its pins and was deleted."""


class ListenError(MassgenError):
    """The HTTP server cannot listen on the address asked for (the port is busy, or the
    host is not this machine's)."""


def describe_write_error(exc: OSError, home: object) -> str:
    """One line for a failed record write that says where and what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = f"no space left in {home}"
    elif exc.errno == errno.EFBIG:
        what = f"a record file is larger than this process may write in {home}"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = f"{home} cannot be written ({exc.strerror})"
    else:
        what = f"the record in {home} cannot be written ({exc.strerror or exc})"
    return f"{what}; free some space or set MASSGEN_HOME to another folder"

