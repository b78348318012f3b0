"""What a vendor module declares about its CLI (:class:`Cli`), what a probe learned about an
installed one (:class:`CliVersion`), and the small readers of untrusted CLI output they share:
counts, mappings, the final JSON object, a redacted tail."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from massgen_mcp.core.edges import UnsafeJson, decode_json
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import AgentSpec
from massgen_mcp.providers.base import Completion


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
    # The oldest version whose read-only command line was tested (tests/test_cli_versions.py);
    # an older one is refused rather than guessed at.
    oldest: str
    # Options (and features) the read-only command line cannot do without, as its help (the
    # arguments after the executable that print it: help_args) and its feature list
    # (features_args) name them; "a|b": either one.
    needs: tuple[str, ...]
    help_args: tuple[str, ...]
    # The CLI's own credentials, passed through untouched when the agent's config names no
    # key: its login token, and its own vendor's API key as in the user's shell.
    own_login_vars: tuple[str, ...]
    # (agent, system prompt, the call's private folder, what its version supports) -> argv;
    # may write files in the folder
    command: Callable[[AgentSpec, str, Path, CliVersion], list[str]]
    parse: Callable[[bytes], Completion]
    # Whether the CLI looks logged in, from where it keeps its login: files that exist, or a
    # non-secret account entry (never a token, never a network call).
    login_state: Callable[[], bool]
    # (key, base_url) -> the variables that hand the agent's own key, and its endpoint if it
    # names one, to the CLI (used only when the agent's config gives either)
    api_env: Callable[[str, str | None], dict[str, str]]
    system_flag: bool  # True: the system prompt goes in a flag, else at the top of the prompt
    # Prepares a private home in the call's folder where the CLI would otherwise run the user's
    # hooks or keep transcripts; returns the variables that point the CLI at it.
    private_home: Callable[[Path], dict[str, str]] | None = None
    # The arguments that print its feature flags, one a line, name first (Codex): a feature
    # it does not list cannot be switched off by name (Codex refuses an unknown one).
    features_args: tuple[str, ...] | None = None
    # (option or feature, version): needed from that version on, where it first came (Codex's
    # view_image feature, from 0.169.0); an older version runs without it.
    needs_from: tuple[tuple[str, str], ...] = ()


def count(value: Any) -> int:
    """A token count from untrusted output: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def mapping(value: Any) -> dict[str, Any]:
    """An object from untrusted output: a dict, else empty."""
    return value if isinstance(value, dict) else {}


def strip_v1(url: str) -> str:
    """The API root of ``url``: Claude Code and Gemini CLI append their own /v1... paths."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def json_object(stdout: bytes, name: str) -> dict[str, Any]:
    """The JSON object a CLI printed last, on one line or many (some print warnings first):
    from the first line starting with '{' whose object runs to the end of the output.

    The one place CLI output is scanned for JSON (Codex's JSON lines are read one by one)."""
    text = stdout.decode(errors="replace")
    start = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("{"):
            with contextlib.suppress(UnsafeJson):
                value, end = decode_json(text, start)
                if isinstance(value, dict) and not text[end:].strip():
                    return value
        start += len(line)
    raise ProviderError(f"{name} printed no JSON result: {tail(text, 300)!r}",
                        retryable=False, kind="cli_error")


def tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text``, redacted before it is cut (a cut through a
    key would leave a piece that no longer matches it)."""
    return redact(text[-(chars + 4096):])[-chars:]
