"""Keep API keys out of every record, log line, event, result and error message.

Provider error texts sometimes echo part of a key, and configs may carry keys inline. Rather
than trusting each call site, every string that leaves the engine goes through :func:`redact`,
which masks every secret value we know of: keys from config files (registered when the config
is loaded) and any environment variable whose name looks like it holds a credential.
"""

from __future__ import annotations

import os
import re
import threading

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(sk|pk|rk|gsk|xai|AIza)[-_][A-Za-z0-9_\-]{12,}")
_MIN_SECRET_LEN = 6
MASK = "***"

_lock = threading.Lock()
_registered: set[str] = set()


def looks_secret(name: str) -> bool:
    """Whether a variable's name says it holds a credential (``*KEY*``, ``*TOKEN*``, ...)."""
    return _SECRET_NAME.search(name) is not None


def register_secret(value: str | None) -> None:
    """Remember a secret value (e.g. an ``api_key`` from a config) so it is always masked."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _registered.add(value)


def _known_secrets() -> list[str]:
    env_values = [
        value
        for name, value in os.environ.items()
        if looks_secret(name) and len(value) >= _MIN_SECRET_LEN
    ]
    with _lock:
        values = set(env_values) | _registered
    # Longest first, so a key that contains another is masked whole.
    return sorted(values, key=len, reverse=True)


def redact(text: str) -> str:
    """Return ``text`` with every known secret and anything shaped like an API key masked."""
    if not text:
        return text
    for secret in _known_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    return _KEY_SHAPES.sub(MASK, text)
