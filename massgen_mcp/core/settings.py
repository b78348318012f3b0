"""The ``MASSGEN_*`` settings: every environment variable massgen-mcp reads for itself, in one
typed, frozen table (:data:`SETTINGS`).

Each :class:`Setting` names its variable, its type (the parser), its default and a one-line
doc; :meth:`Setting.read` reads the environment *at call time* (the tests, and a host that
changes the environment, see the new value at once) and turns a bad value into a
:class:`~massgen_mcp.core.errors.ConfigError` that names the variable and what a good value
looks like, instead of a bare ``ValueError`` from deep inside. An unset or empty variable means
the default. docs/config.md's settings table is :func:`markdown_table`'s output.

Provider keys (``OPENAI_API_KEY``, ...) are not settings: they belong to the providers and
are read where a run needs them (:mod:`massgen_mcp.core.env`).
"""

from __future__ import annotations

import math
import os
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Generic, TypeVar

from massgen_mcp.core.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: its name, how to read it, its default and what it does."""

    env: str
    parse: Callable[[str], T]
    default: T
    doc: str
    expected: str  # what a good value looks like, for the error message
    secret: bool = False  # an error names what is wrong with the value, never the value

    def read(self) -> T:
        """The value now: the default when unset or empty; ConfigError when malformed."""
        raw = os.environ.get(self.env)
        if not raw:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            shown = f"{self.env} is {exc}" if self.secret else f"{self.env}={raw[:80]!r}"
            raise ConfigError(f"{shown}: expected {self.expected}; fix it or unset it"
                              ) from None

    @property
    def default_text(self) -> str:
        """The default as docs/config.md shows it."""
        if self.default is None:
            return "(none)"
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        return str(self.default)


def _text(raw: str) -> str:
    return raw


SECRET_MIN_CHARS = 16
SECRET_MIN_BITS = 80
MAKE_SECRET = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
_ALPHABETS = (string.digits, string.ascii_lowercase, string.ascii_uppercase)
_OTHER_ALPHABET = 33  # the printable ASCII that is neither a letter nor a digit, space included


def estimated_bits(secret: str) -> int:
    """A guesser's work for ``secret`` in bits, judged by its length and its characters: each
    counts log2 of the alphabets it draws on (digits 10, lower 26, upper 26, anything else
    33), and at most twice as many characters count as there are different ones, so a run of
    one letter is worth little. It judges variety, not meaning: a phrase or a keyboard walk
    can pass it, which is why the advice is to generate the secret."""
    size = sum(len(a) for a in _ALPHABETS if any(c in a for c in secret))
    if any(not any(c in a for a in _ALPHABETS) for c in secret):
        size += _OTHER_ALPHABET
    counted = min(len(secret), 2 * len(set(secret)))
    return int(counted * math.log2(size)) if size > 1 else 0


def secret_weakness(secret: str) -> str | None:
    """Why ``secret`` is too weak for a secret whose slow hash anyone who reads the pool's
    Redis holds (the front ends' token and tasks key: a PBKDF2 fingerprint of each sits
    there, and the tasks key's ciphertexts too), or None. 16 characters and 80 bits put an
    offline search out of reach: at 200,000 rounds a GPU tries some 10^4-10^5 guesses a
    second, so 2^80 guesses take over 10^11 GPU-years, while every three-letter token falls
    in minutes."""
    if len(secret) < SECRET_MIN_CHARS:
        return f"too short ({len(secret)} characters; at least {SECRET_MIN_CHARS})"
    bits = estimated_bits(secret)
    if bits < SECRET_MIN_BITS:
        return f"too easy to guess (about {bits} bits by its characters; at least " \
               f"{SECRET_MIN_BITS})"
    return None


def _strong_secret(raw: str) -> str:
    weakness = secret_weakness(raw)
    if weakness:
        raise ValueError(weakness)
    return raw


def _path(raw: str) -> Path:
    return Path(raw)


def _model_choice(raw: str) -> Path | str:
    """A file only by its absolute path, else a name: a value that could be read relative to
    the working folder (an MCP host starts the server in the user's project) would let a file
    a cloned repository ships under a model's name be loaded instead. Whether a name is in the
    catalog is the providers' to say (:func:`massgen_mcp.providers.local_model.choice`)."""
    if not Path(raw).is_absolute():
        return raw
    if not raw.lower().endswith(".gguf"):
        raise ValueError(raw)
    return Path(raw)


def _ports(raw: str) -> tuple[int, ...]:
    return tuple(int(p) for p in raw.split(",") if p.strip())


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(raw)
    return value


Number = TypeVar("Number", int, float)


def _between(kind: Callable[[str], Number], low: Number, high: Number
             ) -> Callable[[str], Number]:
    """A parser for a number of ``kind`` (int or float) from ``low`` to ``high``."""
    def parse(raw: str) -> Number:
        value = kind(raw)
        if not low <= value <= high:
            raise ValueError(raw)
        return value

    return parse


def _seconds(low: float, high: float) -> Callable[[str], float]:
    return _between(float, low, high)


def _switch(raw: str) -> bool:
    return raw != "0"


def _names(raw: str) -> tuple[str, ...]:
    return tuple(raw.replace(" ", "").split(","))


def _base_url(raw: str) -> str:
    if not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", raw):
        raise ValueError(raw)
    return raw.rstrip("/")


@dataclass(frozen=True)
class Settings:
    """Every setting, by the name the code uses."""

    home: Setting[Path | None]
    local_ports: Setting[tuple[int, ...] | None]
    openai_direct: Setting[bool]
    max_parallel_per_provider: Setting[int]
    local_model: Setting[Path | str | None]
    local_threads: Setting[int | None]
    hf_endpoint: Setting[str]
    models_file: Setting[Path | None]
    clis: Setting[tuple[str, ...] | None]
    redis_url: Setting[str | None]
    pool_recheck_s: Setting[float]
    early_initialize: Setting[bool]
    mcp_token: Setting[str | None]
    mcp_max_wait_s: Setting[float]
    mcp_max_body_bytes: Setting[int]
    mcp_header_timeout_s: Setting[float]
    mcp_body_timeout_s: Setting[float]
    mcp_body_deadline_s: Setting[float]
    tasks_key: Setting[str | None]

    def all(self) -> list[Setting[object]]:
        """The settings in table order."""
        return [getattr(self, f.name) for f in fields(self)]


SETTINGS = Settings(
    home=Setting("MASSGEN_HOME", _path, None,
                 "record folder; default ./.massgen (the user data folder where the working "
                 "directory cannot be written); its config.yaml is the project's team",
                 "a folder path"),
    local_ports=Setting("MASSGEN_LOCAL_PORTS", _ports, None,
                        "ports probed for local OpenAI-compatible servers (default: Ollama "
                        "11434, LM Studio 1234, vLLM 8000, llama.cpp 8080)",
                        "comma-separated port numbers, e.g. 11434,1234"),
    # Kept (issue 50, measured 2026-11-27 on the scripted server, 20-call medians, CPU per
    # call): direct 2.4-2.9 ms whole and 2.6-3.4 ms streamed for a vote; litellm 6.9-7.2 ms
    # whole and 21-23 ms streamed, 249-262 ms against 14-15 ms for a streamed 2,000
    # characters. So direct stays the default. A server only litellm reads is reachable
    # without the switch (hosted_vllm/ at the same base_url: same replies, kinds and
    # retryability; a whole run completes), but litellm words its failures there as
    # "Hosted_vllmException - <the body>" and prices none of its whole calls. The switch is
    # also the reference the parity tests and bench/run.py's streaming section hold the direct
    # path to: litellm reading the same openai/ wire (tests/providers/test_streaming.py and
    # test_direct.py).
    openai_direct=Setting("MASSGEN_OPENAI_DIRECT", _switch, True,
                          "an openai/ model at a base_url is called over plain HTTP, not "
                          "through litellm (0: through litellm, for a server whose replies "
                          "only litellm reads)", "0 or 1"),
    max_parallel_per_provider=Setting(
        "MASSGEN_MAX_PARALLEL_PER_PROVIDER", _positive_int, 16,
        "model calls at once per provider endpoint, in this process", "a whole number >= 1"),
    local_model=Setting("MASSGEN_LOCAL_MODEL", _model_choice, None,
                        "the default team's embedded model instead of the bundled one: a "
                        "pulled model's name (massgen-mcp models list), or the absolute path "
                        "of a .gguf file (local/<its stem>)",
                        "a name from massgen-mcp models list, or the absolute path of a .gguf "
                        "file"),
    # 512 is llama.cpp's own limit (GGML_MAX_N_THREADS).
    local_threads=Setting("MASSGEN_LOCAL_THREADS", _between(int, 1, 512), None,
                          "CPU threads the embedded model runs on (default: one less than the "
                          "cores, from 1 to 8); fewer keeps it fast on a machine that is busy "
                          "with other work",
                          "a whole number from 1 to 512"),
    hf_endpoint=Setting("MASSGEN_HF_ENDPOINT", _base_url, "https://huggingface.co",
                        "where `massgen-mcp models pull` downloads from: a Hugging Face hub "
                        "mirror (files are still checked against their pinned SHA-256)",
                        "an http(s):// URL, e.g. https://huggingface.co"),
    models_file=Setting("MASSGEN_MODELS_FILE", _path, None,
                        "a YAML list of more GGUF models for `massgen-mcp models` (name, repo, "
                        "revision, file, size, sha256, license each)", "a path to a YAML file"),
    clis=Setting("MASSGEN_CLIS", _names, None,
                 "which coding-agent CLIs are looked for (default all: claude,codex,gemini; "
                 "none: no CLI); MASSGEN_<NAME>_PATH pins one CLI's executable",
                 "comma-separated CLI names, e.g. claude,codex, or none"),
    redis_url=Setting("MASSGEN_REDIS_URL", _text, None,
                      "a worker pool's Redis (as --redis); never passed to child processes",
                      "a redis:// or rediss:// URL"),
    pool_recheck_s=Setting("MASSGEN_POOL_RECHECK_S", _seconds(0.05, 3600), 2.0,
                           "a pool front end re-reads a waited-on run at least this often",
                           "seconds between 0.05 and 3600 (default 2)"),
    early_initialize=Setting("MASSGEN_EARLY_INITIALIZE", _switch, True,
                             "stdio: answer the host's initialize before the imports finish "
                             "(0 turns it off)", "0 or 1"),
    mcp_token=Setting("MASSGEN_MCP_TOKEN", _strong_secret, None,
                      "the bearer token HTTP clients must send (required off loopback; at "
                      f"least {SECRET_MIN_CHARS} characters and about {SECRET_MIN_BITS} bits)",
                      f"a long random string, e.g. from {MAKE_SECRET}", secret=True),
    mcp_max_wait_s=Setting("MASSGEN_MCP_MAX_WAIT_S", _seconds(0, 86_400), 50.0,
                           "the longest one get_status call waits (wait_s is capped to it)",
                           "seconds between 0 and 86400"),
    mcp_max_body_bytes=Setting("MASSGEN_MCP_MAX_BODY_BYTES", _positive_int, 4 * 1024 * 1024,
                               "the largest HTTP request body accepted", "a number of bytes"),
    mcp_header_timeout_s=Setting("MASSGEN_MCP_HEADER_TIMEOUT_S", _seconds(0.001, 86_400), 10.0,
                                 "HTTP: time allowed to connect and send the request headers",
                                 "seconds, more than 0"),
    mcp_body_timeout_s=Setting("MASSGEN_MCP_BODY_TIMEOUT_S", _seconds(0.001, 86_400), 30.0,
                               "HTTP: time allowed between two pieces of a request body",
                               "seconds, more than 0"),
    mcp_body_deadline_s=Setting("MASSGEN_MCP_BODY_DEADLINE_S", _seconds(0.001, 86_400), 120.0,
                                "HTTP: the most time a whole request body may take (past the "
                                "time between two pieces, it must also keep up 1 KiB/s)",
                                "seconds, more than 0"),
    tasks_key=Setting("FASTMCP_TASKS_ENCRYPTION_KEY", _strong_secret, None,
                      "encrypts MCP task results a pool's front ends share (with --redis and "
                      "a token; as strong as MASSGEN_MCP_TOKEN)",
                      f"a long random string, e.g. from {MAKE_SECRET}", secret=True),
)


def markdown_table() -> str:
    """The settings as docs/config.md's table."""
    rows = ["| Variable | Default | What it does |", "|---|---|---|"]
    rows += [f"| `{s.env}` | {s.default_text} | {s.doc} |" for s in SETTINGS.all()]
    return "\n".join(rows) + "\n"
