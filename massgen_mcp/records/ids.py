"""Session ids: ULIDs, made, dated and checked.

A ULID sorts by creation time, carries 80 random bits, and contains only ``0-9A-Z``, so it is
safe as a folder name and cannot traverse paths.
"""

from __future__ import annotations

import re
import secrets
import time

from massgen_mcp.core.errors import SessionNotFoundError

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
SESSION_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
ID_PREFIX = re.compile(r"[0-9A-HJKMNP-TV-Z]{1,26}")


def new_session_id(now: float | None = None) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, Crockford base32."""
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def session_time(session_id: str) -> float:
    """When a session id was made (its first 48 bits: milliseconds since the epoch)."""
    millis = 0
    for char in session_id[:10]:
        millis = millis * 32 + _CROCKFORD.index(char)
    return millis / 1000


def check_session_id(session_id: str, field: str = "session_id") -> str:
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise SessionNotFoundError(
            f"{field} {str(session_id)[:60]!r} is not a session id; ids are 26 characters "
            "like 01JD3V6Y8T2K6Q3M1R5X0B7N4C"
        )
    return session_id
