"""What a vendor module declares about its CLI (:class:`Cli`), what a probe learned about an
installed one (:class:`CliVersion`), and what reads untrusted CLI output: :class:`EventReader`,
the base of each vendor's reader of its JSON lines, and the small helpers they share (counts,
mappings, a token estimate, a redacted tail)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.secrets import redact
from massgen_mcp.providers.base import Completion, TextListener

# What an answer may add up to across streamed pieces (a line is capped by the supervisor):
# a long answer is far below it.
MAX_REPLY_CHARS = 8 * 1024 * 1024
_KEPT_OTHER_CHARS = 4096  # of what was not an event, for the error when no result came


@dataclass(frozen=True)
class CliVersion:
    """What the installed binary said about itself (:mod:`.versions`): its version as printed,
    the options its help lists, and the feature names it lists (Codex's ``features list``)."""

    version: str
    flags: frozenset[str]
    features: frozenset[str] = frozenset()

    def supports(self, name: str) -> bool:
        """Whether it has the option (``--name``) or the feature (``name``)."""
        return name in self.flags or name in self.features


@dataclass(frozen=True)
class Cli:
    """One supported CLI: how to find it, run it read-only, and read its answer."""

    name: str  # as in the model string cli/<name>
    backend: str  # MassGen's backend type
    executable: str
    vendor: str
    title: str  # as its vendor names it: "Claude Code"
    package: str  # its npm package, for the update command
    # The oldest version whose read-only command line was tested
    # (tests/providers/test_cli_versions.py); an older one is refused rather than guessed at.
    oldest: str
    # Options (and features) the read-only command line cannot do without, as its help (the
    # arguments after the executable that print it: help_args) and its feature list
    # (features_args) name them; "a|b": either one.
    needs: tuple[str, ...]
    help_args: tuple[str, ...]
    # The CLI's own credentials, passed through untouched when the agent's config names no
    # key: its login token, and its own vendor's API key as in the user's shell.
    own_login_vars: tuple[str, ...]
    # (agent, system prompt, the call's private folder, what its version supports, whether
    # its working folder holds code to read: a review's snapshot) -> argv; may write files in
    # the private folder
    command: Callable[[AgentSpec, str, Path, CliVersion, bool], list[str]]
    # (who wants the text as it comes) -> a reader of what this command prints, line by line
    reader: Callable[[TextListener | None], EventReader]
    # Whether the CLI looks logged in, from where it keeps its login: files that exist, or a
    # non-secret account entry (never a token, never a network call).
    login_state: Callable[[], bool]
    # (key, base_url) -> the variables that hand the agent's own key, and its endpoint if it
    # names one, to the CLI (used only when the agent's config gives either)
    api_env: Callable[[str, str | None], dict[str, str]]
    system_flag: bool  # True: the system prompt goes in a flag, else at the top of the prompt
    # The provider whose API a key of the agent's own reaches through this CLI (consent judges
    # where such a key goes: massgen_mcp.team.consent).
    provider: str
    # Prepares a private home in the call's folder where the CLI would otherwise run the user's
    # hooks or keep transcripts; returns the variables that point the CLI at it.
    private_home: Callable[[Path], dict[str, str]] | None = None
    # The arguments that print its feature flags, one a line, name first (Codex): a feature
    # it does not list cannot be switched off by name (Codex refuses an unknown one).
    features_args: tuple[str, ...] | None = None
    # (option or feature, version): needed from that version on, where it first came (Codex's
    # view_image feature, from 0.169.0); an older version runs without it.
    needs_from: tuple[tuple[str, str], ...] = ()
    # Variables it is always run with (its calls and its version probe alike).
    run_env: tuple[tuple[str, str], ...] = ()

    def parse(self, stdout: bytes, on_text: TextListener | None = None) -> Completion:
        """A whole captured output read as a call reads it, a line at a time (for output
        already in hand: captured files, tests)."""
        reader = self.reader(on_text)
        for line in stdout.split(b"\n"):
            reader.feed(line)
        return reader.finish()


class EventReader(ABC):
    """Reads one call's output, a line at a time as the supervisor hands it over
    (:func:`massgen_mcp.core.supervisor.run_child`), and builds the reply from the CLI's
    JSON events.

    Everything in a line is untrusted (the model writes the text inside it; a broken or
    foreign binary may print anything): a line that is not a JSON object is kept (its tail)
    for the error and otherwise skipped, an event of an unknown type or with fields missing or
    of the wrong type is skipped, and :meth:`finish` raises :class:`ProviderError` when no
    usable result came. Never a crash, never a wait: a subclass only looks at what it knows.

    The reply's text goes to ``on_text`` as it comes (:meth:`delta` for a piece of a message,
    :meth:`message` for a whole one), with a token estimate: no CLI reports usage per piece."""

    name = ""

    def __init__(self, on_text: TextListener | None) -> None:
        self._on_text = on_text
        self._other = ""
        self._sent = False  # whether any text went to on_text

    def feed(self, line: bytes) -> None:
        event = None
        if line.lstrip().startswith(b"{"):
            try:
                value = load_json(line)
            except UnsafeJson:
                value = None
            event = value if isinstance(value, dict) else None
        if event is None:
            if line.strip():
                text = line.decode(errors="replace")
                self._other = (self._other + text[-_KEPT_OTHER_CHARS:] + "\n")[
                    -_KEPT_OTHER_CHARS:]
            return
        self.event(event)

    @abstractmethod
    def event(self, event: dict[str, Any]) -> None:
        """One JSON object the CLI printed."""

    @abstractmethod
    def finish(self) -> Completion:
        """The reply, once the output ended; :class:`ProviderError` if there is none."""

    def delta(self, text: str) -> None:
        """A piece of the message being written: passed on as it is."""
        if text and self._on_text is not None:
            self._sent = True
            self._on_text(text, estimate_tokens(text))

    def message(self, text: str) -> None:
        """A whole message (a CLI that gives no pieces): set apart from the text before."""
        if text and self._on_text is not None:
            self._on_text(f"\n\n{text}" if self._sent else text, estimate_tokens(text))
            self._sent = True

    def no_result(self, what: str = "") -> ProviderError:
        """The error for output that ended without a usable result (what was not an event
        quoted, redacted)."""
        printed = tail(self._other, 300)
        return ProviderError(f"{self.name} printed no result{what}"
                             f"{f': {printed!r}' if printed.strip() else ''}",
                             kind=ErrorKind.CLI_ERROR)


def count(value: Any) -> int:
    """A token count from untrusted output: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def mapping(value: Any) -> dict[str, Any]:
    """An object from untrusted output: a dict, else empty."""
    return value if isinstance(value, dict) else {}


def text_of(value: Any) -> str:
    """Text from untrusted output: a string, else empty."""
    return value if isinstance(value, str) else ""


def estimate_tokens(text: str) -> int:
    """Tokens in a piece of reply text, estimated (about four characters a token): the CLIs
    report usage only for the whole reply."""
    return math.ceil(len(text) / 4)


def strip_v1(url: str) -> str:
    """The API root of ``url``: Claude Code and Gemini CLI append their own /v1... paths."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text``, redacted before it is cut (a cut through a
    key would leave a piece that no longer matches it)."""
    return redact(text[-(chars + 4096):])[-chars:]
