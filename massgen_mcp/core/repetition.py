"""A reply caught in a loop: the same run of words said over and over at its end.

Small models, the embedded one above all, fall into loops ("... which is 16, which is 16,
which is 16, ...") and would write them until their token cap or the call's timeout. One rule
serves both places that need it: the embedded model stops generating as soon as its text ends
in a loop (:mod:`massgen_mcp.providers.llamacpp_provider`), and the engine treats an answer
that ends in one, from any provider, as too long: one corrective retry, and a second loop is
kept only up to its first copy (:mod:`massgen_mcp.consensus.actions`).

A loop is a unit of 1 to :data:`MAX_UNIT_WORDS` words (punctuation counts as a word) repeated
back to back at the end of the text, at least :data:`MIN_REPEATS` times and over at least
:data:`MIN_LOOP_WORDS` words, so a short list, a table's separator row or a refrain said twice
is not one. Comparison ignores case; numbers must repeat exactly ("16, 17, 18" is no loop).
"""

from __future__ import annotations

import re

MAX_UNIT_WORDS = 32
MIN_REPEATS = 3
MIN_LOOP_WORDS = 48
# Only the end of the text is read: a loop long enough to count fits in it, and a check made
# after every few streamed tokens stays cheap however long the reply grows.
TAIL_CHARS = 4000
_WORD = re.compile(r"\w+|[^\w\s]")


def loop_start(text: str) -> int | None:
    """Where the loop at the end of ``text`` begins to repeat: the character offset just past
    the unit's first copy (so ``text[:offset]`` says it once), or None if ``text`` does not
    end in a loop."""
    offset = max(0, len(text) - TAIL_CHARS)
    words = list(_WORD.finditer(text, offset))
    tokens = [w.group().lower() for w in words]
    n = len(tokens)
    best: tuple[int, int] | None = None  # (words kept, unit) of the longest loop found
    for unit in range(1, min(MAX_UNIT_WORDS, n // MIN_REPEATS) + 1):
        same = 0  # how many words at the end equal the word one unit before them
        while same < n - unit and tokens[n - 1 - same] == tokens[n - 1 - same - unit]:
            same += 1
        span = same + unit
        if span >= MIN_LOOP_WORDS and span >= MIN_REPEATS * unit:
            kept = n - same  # the words before the loop, and its first copy
            if best is None or kept < best[0]:
                best = (kept, unit)
    if best is None:
        return None
    return words[best[0] - 1].end()


def without_loop(text: str) -> str:
    """``text`` with the loop at its end said once (``text`` itself if it has none)."""
    start = loop_start(text)
    return text if start is None else text[:start]
