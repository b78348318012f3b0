"""The CPU of ``redact()`` on the hot path's texts (``python bench/run.py --only redaction``),
with today's key shapes and with those of before.
"""

from __future__ import annotations

import time
from typing import Any

# The key shapes redaction masked before trust round 3: the baseline for the one alternation.
_OLD_KEY_SHAPES = r"\b(sk|pk|rk|gsk|xai|AIza)[-_][A-Za-z0-9_\-]{12,}"


def bench_redaction(quick: bool) -> dict[str, Any]:
    """CPU per call of redact() on the hot path's texts: a 4 KB answer and a 400-character
    draft excerpt (every draft tick and status write goes through it), with today's shapes
    and with the provider-only shapes of before, on the same text."""
    import re

    from massgen_mcp.core import secrets

    answer = ("The service reads its settings from config/app.yaml and retries with backoff; "
              "see https://example.com/docs?q=retry for details. ") * 32
    excerpt = answer[:400]
    reps = 2_000 if quick else 20_000
    out: dict[str, Any] = {}
    current = secrets._KEY_SHAPES
    for label, pattern in (("before", re.compile(_OLD_KEY_SHAPES)), ("now", current)):
        secrets._KEY_SHAPES = pattern
        try:
            clean = secrets.redactor()
            for name, text in (("answer_4k", answer), ("excerpt_400", excerpt)):
                start = time.process_time()
                for _ in range(reps):
                    clean(text)
                out[f"{label}_{name}_us"] = round((time.process_time() - start) / reps * 1e6, 2)
        finally:
            secrets._KEY_SHAPES = current
    return out


def print_redaction(data: dict[str, Any]) -> None:
    print("redact() CPU per call (us)      before    now")
    for name in ("answer_4k", "excerpt_400"):
        print(f"  {name:<28} {data[f'before_{name}_us']:>8} {data[f'now_{name}_us']:>6}")
