"""The one bearer-token check of the HTTP server: /mcp, the live pages and /v1 all ask here.

One constant-time comparison in one place, so no door of the server can compare a token with
``==`` (which leaks its length and prefix through timing) or forget the "no token set" case.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping


def token_matches(given: str, token: str | None) -> bool:
    """True when no token is required or ``given`` is it (compared in constant time)."""
    if token is None:
        return True
    return hmac.compare_digest(given.encode(), token.encode())


def bearer_of(headers: Mapping[str, str]) -> str:
    """The token an ``Authorization: Bearer <token>`` header carries ("" without one)."""
    return headers.get("authorization", "").removeprefix("Bearer ").strip()
