"""Keep API keys out of every record, log line, event, result, error message and output.

Redaction is by *value*: whatever name a key was read under (``OPENAI_API_KEY``, an
``api_key_env: LLM_CRED``, a ``${VAR}`` in a config, an inline ``api_key``), the value itself is
registered the moment a run resolves it (the agent's own key:
:meth:`~massgen_mcp.core.agent.AgentSpec.own_api_key`; its provider's variable:
:func:`massgen_mcp.providers.kinds.api_key`) and masked wherever it appears, together with the
encodings a provider or a library may echo it in (URL-quoted, JSON-escaped, base64).
Environment variables whose names look like credentials are masked too, and so is anything
shaped like a well-known key format.

Every way out calls :func:`redact`: model output as it enters the engine (so an echoed key never
reaches a peer from another provider), the record files, the live status, events handed to the
CLI, tool errors, CLI output, and log lines (:class:`RedactingFormatter`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CRED)", re.IGNORECASE)
# Well-known token shapes, one compiled alternation, so a text is scanned once whatever the
# number of shapes (the hot path: every draft excerpt, status write and log line goes through
# it). detect-secrets' pattern set was the other candidate; it is a repository scanner that
# runs one regex per plugin per line with entropy filters, many passes where this is one, and
# its high-entropy plugins would mask hashes and ids in answers. The shapes are the vendors'
# documented prefixes: model providers (``sk-``, ``AIza``, ...), GitHub (``ghp_ gho_ ghu_ ghs_
# ghr_`` classic tokens, ``github_pat_`` fine-grained), GitLab (``glpat-``), Slack
# (``xoxb- xoxp- xoxa- xoxr- xoxs- xoxo-``), AWS access key ids (``AKIA``, ``ASIA``, ...),
# Hugging Face (``hf_``) and npm (``npm_``). The one list: a child process's environment is
# filtered by it too (:func:`has_key_shape`).
# A token starts a word, or follows an escape of JSON text (``\\n``, ``\\t``...): model output
# is redacted as its tool call's JSON arguments, where a token at the start of a line comes
# after the letter of ``\\n``, which ``\\b`` alone takes for part of the word. Written as
# one lookbehind (no word character before, unless it ends such an escape): ~60 % of the time of
# ``(?:\\b|(?<=...))``, which every redaction of a run's text pays.
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_](?<!\\[nrtbf]))(?:(?:sk|pk|rk|gsk|xai)[-_][A-Za-z0-9_\-]{12,}"
    r"|AIza[A-Za-z0-9_\-]{20,}"  # Google's: AIzaSy... (no separator after the prefix)
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposre]-[A-Za-z0-9\-]{10,}"
    r"|(?:hf|npm)_[A-Za-z0-9]{30,}"
    r"|(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b)")
# The password in a URL's userinfo (``redis://:PASSWORD@host``, ``postgres://u:PASSWORD@h``).
_URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.\-]*://[^\s/?#@:]*:)[^\s/?#@]+@", re.IGNORECASE)
# A URL's whole userinfo, up to the last ``@`` of its authority (a password may hold an ``@``):
# ``https://TOKEN@host`` carries a token as its user (git remotes do), and so does
# ``https://TOKEN:x-oauth-basic@host``. See :func:`_mask_userinfo` for what stays readable.
# The scheme's slashes may come JSON-escaped (``https:\/\/TOKEN@host``, as PHP writes them).
_URL_USERINFO = re.compile(
    r"\b([a-z][a-z0-9+.\-]*:(?://|\\/\\/))([^\s/\\?#@]*(?:@[^\s/\\?#@]*)*)@", re.IGNORECASE)
# A user name shown beside a masked password: ``app``, ``oauth2``, ``x-access-token``.
_PLAIN_USER = re.compile(r"[A-Za-z][A-Za-z0-9._\-]{0,14}")
# A credential in a URL's query (``redis://h/0?password=PW``, ``postgresql://u@h/db?sslpassword=
# PW``, ``https://h/?access_token=T``): redis-py and libpq read a password from there as from the
# userinfo. Any parameter whose name holds one of these words counts; masking a harmless one
# (``ssl_keyfile=``) costs a path in a message, missing one costs the credential.
_URL_QUERY_SECRET = re.compile(
    r"([?&;][\w.\-]*(?:pass|pwd|secret|token|key|auth|cred|sig)[\w.\-]*=)[^\s&;#'\"<>]+",
    re.IGNORECASE)
_MIN_SECRET_LEN = 6
MASK = "***"

_lock = threading.Lock()
_registered: set[str] = set()
_generation = 0  # bumped whenever _registered grows
# What _known_secrets found last, and what it found it from: the environment's raw mapping
# (copied) and _registered's generation. Every redaction asks for the known secrets, and
# reading the whole environment each time (decoding and matching every name) was ~12 % of a
# pool worker's CPU; comparing the raw mapping with the copy is one C-level dict compare.
_known: tuple[dict[Any, Any] | None, int, list[str]] = (None, -1, [])


def has_key_shape(text: str) -> bool:
    """Whether ``text`` holds a token of a well-known shape (see :data:`_KEY_SHAPES`)."""
    return _KEY_SHAPES.search(text) is not None


def looks_secret(name: str) -> bool:
    """Whether a variable's name says it holds a credential (``*KEY*``, ``*TOKEN*``, ...)."""
    return _SECRET_NAME.search(name) is not None


def encodings(value: str) -> set[str]:
    """``value`` and the forms it takes when a library or a provider echoes it."""
    raw = value.encode()
    forms = {
        value,
        quote(value, safe=""),
        json.dumps(value)[1:-1],
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
    }
    return {form for form in forms if len(form) >= _MIN_SECRET_LEN}


def register_secret(value: str | None) -> None:
    """Remember a credential value so it is masked everywhere from now on."""
    global _generation
    if value and len(value) >= _MIN_SECRET_LEN:
        forms = encodings(value)
        with _lock:
            if not forms <= _registered:
                _registered.update(forms)
                _generation += 1


def is_registered(value: str) -> bool:
    """Whether ``value`` is a credential some agent resolved (whatever its variable's name)."""
    with _lock:
        return value in _registered


def _known_secrets() -> list[str]:
    """Every value to mask, longest first (callers must not change the list). Computed
    again whenever the environment or the registered values changed since the last call:
    ``os.environ``'s raw mapping is what every change to it (``os.environ[...] = ``,
    ``putenv`` through it, ``del``) writes, so an equal copy means the same environment."""
    global _known
    raw = getattr(os.environ, "_data", None)
    env, generation, secrets = _known
    if isinstance(raw, dict) and generation == _generation and raw == env:
        return secrets
    with _lock:
        generation = _generation
        registered = set(_registered)
    env_values = [
        value
        for name, value in os.environ.items()
        if looks_secret(name) and len(value) >= _MIN_SECRET_LEN
    ]
    # Longest first, so a key that contains another is masked whole.
    secrets = sorted(set(env_values) | registered, key=len, reverse=True)
    _known = (dict(raw) if isinstance(raw, dict) else None, generation, secrets)
    return secrets


def redact(text: str) -> str:
    """Return ``text`` with every known secret and anything shaped like an API key masked."""
    return _redact(text, _known_secrets()) if text else text


# A key shape cut off by the end of a text still being written, before it is long enough
# for _KEY_SHAPES to know it: ``sk-proj-A1b2``.
_KEY_SHAPE_BEGUN = re.compile(
    r"\b(?:(?:sk|pk|rk|gsk|xai)[-_]|AIza|gh[pousr]_|github_pat_|glpat-|xox[abposre]-"
    r"|(?:AKIA|ASIA)(?=[A-Z0-9]*$))[A-Za-z0-9_\-]*$")


def redact_excerpt(text: str, *, cut_start: bool) -> str:
    """``text``, an excerpt of a text still being written (a live draft), redacted as by
    :func:`redact`, and safe at its edges too: a known secret the excerpt's end cuts off (so
    far only its first characters were written) is held back until it is whole (then masked),
    and, when ``cut_start`` (the excerpt lost its start), a secret whose start was cut off is
    masked. Without this a draft shows a key but its last character while it streams."""
    if not text:
        return text
    secrets = _known_secrets()
    text = _redact(text, secrets)
    end = len(text)
    for secret in secrets:  # the longest proper prefix of a secret that ends the text
        for i in range(max(0, len(text) - len(secret) + 1), end):
            if secret.startswith(text[i:]):
                end = i
                break
    begun = _KEY_SHAPE_BEGUN.search(text, 0, end)
    text = text[:begun.start() if begun else end]
    start = 0
    if cut_start:
        for secret in secrets:  # the longest proper suffix of a secret that starts the text
            for i in range(min(len(secret) - 1, len(text)), start, -1):
                if secret.endswith(text[:i]):
                    start = i
                    break
    return (MASK + text[start:]) if start else text


def redactor() -> Callable[[str], str]:
    """:func:`redact` with the known secrets gathered once, for many texts at a time (each
    :func:`redact` reads the whole environment)."""
    secrets = _known_secrets()
    return lambda text: _redact(text, secrets) if text else text


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return mask_url_credentials(_KEY_SHAPES.sub(MASK, text))


def mask_url_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it masked: the userinfo
    (``redis://:***@h``, ``https://***@host`` for a token given as the user) and
    credential-named query parameters (``?password=***``)."""
    if ":" not in text and "=" not in text:  # neither pattern can match: most record
        return text  # strings (ids, labels, phases), at a fraction of two regex scans
    return _URL_QUERY_SECRET.sub(rf"\1{MASK}", _URL_USERINFO.sub(_mask_userinfo, text))


def _mask_userinfo(match: re.Match[str]) -> str:
    """A user name stays readable only beside a password, and only when it is short and
    plain (``postgres://app:***@db``); a user alone is a token as often as a name (``https://
    ghp_...@github.com``, a bare token in a git remote), so it is masked, and so is a long
    or percent-encoded one (``https://TOKEN:x-oauth-basic@host``)."""
    scheme, userinfo = match.group(1), match.group(2)
    if not userinfo:
        return match.group(0)
    user, colon, password = userinfo.partition(":")
    if colon and password and (not user or _PLAIN_USER.fullmatch(user)):
        return f"{scheme}{user}:{MASK}@"
    return f"{scheme}{MASK}@"


def carries_credential(value: str) -> bool:
    """Whether ``value`` holds a registered credential or a URL with a password in it (in the
    userinfo or the query; a variable that does is not handed to a child process, whatever
    its name)."""
    if _URL_PASSWORD.search(value) or _URL_QUERY_SECRET.search(value):
        return True
    with _lock:
        return any(secret in value for secret in _registered)


def redact_data(value: Any) -> Any:
    """JSON-ready data with every string (keys included) redacted: unlike redacting the JSON
    text, this can never break the document's structure, whatever the secret looks like.
    The known secrets are gathered once per call (reading the environment for every string
    was most of the CPU a record write cost)."""
    return _redact_data(value, _known_secrets())


def _redact_data(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return _redact(value, secrets) if value else value
    if isinstance(value, list):
        return [_redact_data(v, secrets) for v in value]
    if isinstance(value, dict):
        return {_redact(str(k), secrets): _redact_data(v, secrets) for k, v in value.items()}
    return value


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output (message, arguments and traceback) is redacted and
    terminal-safe: a log line can quote what a model, a file name or an MCP server wrote,
    and it goes to a person's terminal (stderr) or a file read with ``cat``, where an escape
    sequence would be obeyed (:func:`~massgen_mcp.core.edges.terminal_safe`)."""

    def format(self, record: logging.LogRecord) -> str:
        from massgen_mcp.core.edges import terminal_safe

        return terminal_safe(redact(super().format(record)))


# Names that hold a credential beyond looks_secret's (*KEY*, *TOKEN*, *SECRET*, *PASSWORD*,
# *CRED*): REDISCLI_AUTH, DB_PASS, SMTP_PASSWD, GPG_PASSPHRASE, SENTRY_DSN, *_COOKIE,
# *_SESSION, *_CONNECTION_STRING (Azure's holds AccountKey=...), *_PRIVATE.
_CREDENTIAL_NAME = re.compile(
    r"(?:^|_)(?:PASS|PASSWD|PASSPHRASE|PASSCODE|PW|AUTH|AUTHORIZATION|DSN|COOKIE|SESSION|"
    r"CONNECTION_STRING|CONN_STR|PRIVATE|SIGNATURE|OTP)(?:_|$)", re.IGNORECASE)
# ... kept all the same: a path to the SSH agent's socket (git over SSH), not a credential.
_NOT_CREDENTIALS = frozenset({"SSH_AUTH_SOCK"})
# Values shaped like a credential, whatever their name, beyond the token shapes redaction
# knows (core.secrets.has_key_shape): a JWT, a PEM private key, a basic/bearer header, a URL
# carrying a bare token as its user (https://TOKEN@host). A URL with a password is
# carries_credential's.
_CREDENTIAL_VALUE = re.compile(
    r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|^(?:Basic|Bearer)\s+\S{12,}"
    r"|://[^\s/?#@:]{16,}@")


def is_credential(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` must not reach a child (a coding CLI, git): by
    its name (as :func:`looks_secret` and more) or by its value (a registered key, a URL
    with a password, a known token shape), so a credential under an unexpected name stays
    behind too."""
    if name in _NOT_CREDENTIALS:
        return False
    return (looks_secret(name) or _CREDENTIAL_NAME.search(name) is not None
            or carries_credential(value) or has_key_shape(value)
            or _CREDENTIAL_VALUE.search(value) is not None)
