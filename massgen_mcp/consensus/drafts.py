"""What each agent is writing right now: the live drafts of streaming model calls.

A draft is kept in memory only, for ``get_status`` and the live views: the record keeps
answers, never drafts (a draft is half a thought, and the record must read the same whether a
provider streamed or not). Each draft holds the end of the text so far, redacted when read:
a key the model echoes is masked like everywhere else, even one the window cuts in two, since
the window keeps enough text before its start to recognise any known secret whole; a key
still being written is held back until it is whole, and one whose start fell out of the
kept text (keys masked to ``***`` shrink it) is masked too.

An answer written through the ``new_answer`` tool streams as the JSON of the tool call's
arguments (``{"content": "The answer is…``), a vote as ``{"answer": "B1", "reason": "…``, and
a model without tool calling writes the same as JSON text: the draft shows the answer's text,
or the vote's reason, unescaped as it comes (:class:`_Unwrap`), and nothing while only the
JSON's keys have come. A reply that is not such JSON shows as written.

When a call ends its draft goes, and :meth:`Drafts.end` reports its pace for the ``call``
event: the time to the first text and the tokens per second after it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from massgen_mcp.core.records import CallPurpose
from massgen_mcp.core.run_state import Draft
from massgen_mcp.core.secrets import redact_excerpt

DRAFT_CHARS = 400  # what a draft shows: the last few hundred characters
_KEPT_CHARS = 4 * DRAFT_CHARS  # kept, so a secret across the window's edge is masked whole
_SNIFF_CHARS = 200  # how far into a reply that opens with "{" its "content" key may start
_CONTENT = re.compile(r'"(?:content|reason)"\s*:\s*"')  # an answer's text, a vote's reason
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}


def _hex(digits: str) -> int:
    """Four hex digits as a number; -1 if they are not."""
    try:
        return int(digits, 16) if len(digits) == 4 else -1
    except ValueError:
        return -1


@dataclass
class _Unwrap:
    """The text of a JSON reply's ``"content"`` string, decoded as the pieces come (an
    escape may be cut in two); any other reply passes through unchanged."""

    mode: str = "sniff"  # sniff, plain, string (inside "content"), done (after it)
    pending: str = ""  # sniffed text, or the start of an escape cut off by a piece's end

    def feed(self, text: str) -> str:
        if self.mode == "sniff":
            self.pending += text
            head = self.pending.lstrip()
            if not head.startswith("{"):
                self.mode, text, self.pending = "plain", self.pending, ""
                return text
            found = _CONTENT.search(self.pending)
            if found is None:
                if len(self.pending) < _SNIFF_CHARS:
                    return ""
                self.mode, text, self.pending = "plain", self.pending, ""
                return text
            self.mode, text, self.pending = "string", self.pending[found.end():], ""
        if self.mode == "plain":
            return text
        if self.mode == "done":
            return ""
        return self._decode(text)

    def _decode(self, text: str) -> str:
        text, self.pending = self.pending + text, ""
        out: list[str] = []
        i = 0
        while i < len(text):
            char = text[i]
            if char == '"':
                self.mode = "done"
                break
            if char != "\\":
                out.append(char)
                i += 1
                continue
            if i + 1 >= len(text) or (text[i + 1] == "u" and i + 6 > len(text)):
                self.pending = text[i:]  # the rest of the escape is in the next piece
                break
            if text[i + 1] == "u":
                code = _hex(text[i + 2:i + 6])
                if 0xD800 <= code < 0xDC00:  # a pair's first half: its second follows
                    if i + 12 > len(text):
                        self.pending = text[i:]
                        break
                    low = _hex(text[i + 8:i + 12]) if text[i + 6:i + 8] == "\\u" else -1
                    if 0xDC00 <= low < 0xE000:
                        out.append(chr(0x10000 + ((code - 0xD800) << 10) + low - 0xDC00))
                        i += 12
                        continue
                    code = -1
                out.append(chr(code) if code >= 0 and not 0xDC00 <= code < 0xE000
                           else "\ufffd")  # a broken or lone escape: a visible mark
                i += 6
            else:
                out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
                i += 2
        return "".join(out)

    def rest(self) -> str:
        """What a reply still sniffed shows: nothing while it may yet be JSON to unwrap (its
        keys are protocol, not the agent's words)."""
        return self.pending if self.mode == "sniff" and not self.pending.lstrip().startswith(
            "{") else ""


@dataclass
class _Writing:
    purpose: CallPurpose
    started: float
    first_token: float | None = None
    tokens: int = 0
    chars: int = 0
    tail: str = ""
    unwrap: _Unwrap = field(default_factory=_Unwrap)


@dataclass(frozen=True)
class Pace:
    """How a finished call streamed: None fields when it did not stream."""

    first_token_s: float | None
    tokens_per_s: float | None


class Drafts:
    """The drafts of one run, by agent. Every method runs on the event loop's thread."""

    def __init__(self) -> None:
        self._writing: dict[str, _Writing] = {}
        self.revision = 0  # bumped on every change, for live views

    def begin(self, agent_id: str, purpose: CallPurpose) -> None:
        """A model call starts (or is retried): an empty draft, so far without text."""
        self._writing[agent_id] = _Writing(purpose, time.monotonic())

    def add(self, agent_id: str, text: str, tokens: int) -> None:
        """Text streamed in for ``agent_id``'s call (ignored once the call has ended)."""
        draft = self._writing.get(agent_id)
        if draft is None or not text:
            return
        if draft.first_token is None:
            draft.first_token = time.monotonic()
        draft.tokens += max(tokens, 0)
        shown = draft.unwrap.feed(text)
        draft.chars += len(shown)
        draft.tail = (draft.tail + shown)[-_KEPT_CHARS:]
        self.revision += 1

    def end(self, agent_id: str) -> Pace:
        """The call returned, failed or was cancelled: its draft goes."""
        draft = self._writing.pop(agent_id, None)
        if draft is None or draft.first_token is None:
            return Pace(None, None)
        self.revision += 1
        now = time.monotonic()
        streaming_s = now - draft.first_token
        return Pace(round(draft.first_token - draft.started, 3),
                    round(draft.tokens / streaming_s, 1) if streaming_s > 0 else None)

    def records(self) -> dict[str, Draft]:
        """The drafts with text so far, redacted, for the live status."""
        now = time.monotonic()
        return {
            aid: Draft(purpose=d.purpose,
                       text=redact_excerpt(d.tail + d.unwrap.rest(),
                                           cut_start=d.chars > len(d.tail))[-DRAFT_CHARS:],
                       chars=d.chars,
                       tokens=d.tokens,
                       first_token_s=round(d.first_token - d.started, 3),
                       elapsed_s=round(now - d.started, 3))
            for aid, d in self._writing.items() if d.first_token is not None
        }
