"""``massgen-mcp run`` on a terminal: one live line per agent, redrawn in place.

The progress lines (one per event, :func:`massgen_mcp.render.text.describe_event`) scroll as
they always have; below them each agent has one line saying what it is doing now, with the end
of its draft while its model call streams::

    agent_b  writing its answer… 412 tokens  "…the cache is keyed by the full path, so"

Only when stderr is a terminal that moves its cursor (not ``TERM=dumb``): anywhere else the
plain lines are all there is, as before. The lines are redrawn by moving the cursor up over
them and clearing to the end of the screen, so each must fit one row: every line is cut to the
terminal's width, counted in columns (a wide character takes two). Drafts are model output:
their whitespace is folded and their control characters escaped before they are placed in a
line, so no draft can move the cursor or retitle the window.
"""

from __future__ import annotations

import os
import shutil
import unicodedata
from collections.abc import AsyncIterator
from typing import TextIO

from massgen_mcp.core.edges import terminal_safe
from massgen_mcp.core.records import CallPurpose, Event
from massgen_mcp.core.run_state import AgentStatus, StatusRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.render.text import describe_event

_UP_AND_CLEAR = "\r\x1b[{}A\x1b[J"  # to the start of the line N rows up, then clear below


class LiveLines:
    """The agents' live lines under the scrolling progress lines of one run."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.board: list[str] = []  # the agent lines as last drawn
        self.drawn = 0  # rows of the board now on the screen

    @classmethod
    def on_terminal(cls, stream: TextIO) -> LiveLines | None:
        """Live lines on ``stream`` if it is a terminal that moves its cursor, else None."""
        if not stream.isatty() or os.environ.get("TERM", "") in ("", "dumb"):
            return None
        return cls(stream)

    def event(self, _session_id: str, event: Event) -> None:
        """The run's event listener: the event's progress line, above the board."""
        line = describe_event(event)
        if line:  # events reach listeners masked; redact again, cheaply
            self._draw([redact(line)])

    async def follow(self, statuses: AsyncIterator[StatusRecord]) -> None:
        """Redraw the board for every status (the service's watch) until the run ends."""
        async for status in statuses:
            width = max([len(aid) for aid in status.agents] + [5])
            self.board = [agent_line(aid.ljust(width), agent)
                          for aid, agent in status.agents.items()]
            self._draw([])

    def clear(self) -> None:
        """Take the board off the screen (the run is over: its outcome follows)."""
        self.board = []
        self._draw([])

    def _draw(self, above: list[str]) -> None:
        columns = shutil.get_terminal_size().columns
        out = [_UP_AND_CLEAR.format(self.drawn)] if self.drawn else []
        out += [terminal_safe(line) + "\n" for line in above]
        out += [fit(line, columns - 1) + "\n" for line in self.board]
        self.drawn = len(self.board)
        if out:
            self.stream.write("".join(out))
            self.stream.flush()


def agent_line(name: str, agent: AgentStatus) -> str:
    """``agent_b  writing its answer… 412 tokens  "…tail"``, or its phase when not writing."""
    draft = agent.draft
    if draft is None:
        # The activity quotes a tool call's argument (a path the model chose): folded to one
        # row like a draft, since a newline would leave a line the redraw never clears.
        activity = " ".join((agent.activity or "").split())
        return f"{name}  {agent.phase}" + (f" · {activity}" if activity else "")
    tail = redact(" ".join(draft.text.split()))
    tokens = f"{draft.tokens} token{'' if draft.tokens == 1 else 's'}"
    return f"{name}  {_DOING[draft.purpose]}… {tokens}" + (f'  "…{tail}"' if tail else "")


# What an agent with a draft is doing, in words (CallPurpose is the record's).
_DOING = {CallPurpose.ANSWER: "writing its answer", CallPurpose.EVALUATE: "reviewing",
          CallPurpose.FINAL: "writing the final answer", CallPurpose.CHECK: "checking it",
          CallPurpose.EVIDENCE: "reading"}


def fit(line: str, columns: int) -> str:
    """``line`` in at most ``columns`` terminal columns, made terminal-safe. A line ending
    in a quoted draft keeps the draft's end (the newest text) and loses its start."""
    line = terminal_safe(line)
    if _width(line) <= columns:
        return line
    if line.endswith('"') and '  "…' in line:
        head, tail = line[:-1].split('  "…', 1)
        room = columns - _width(head) - 5  # the quotes, the gap and the ellipsis
        if room > 0:
            return f'{head}  "…{_last(tail, room)}"'
    return _first(line, columns)


def _columns(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _width(text: str) -> int:
    return sum(_columns(c) for c in text)


def _first(text: str, columns: int) -> str:
    used = 0
    for i, char in enumerate(text):
        used += _columns(char)
        if used > columns:
            return text[:i]
    return text


def _last(text: str, columns: int) -> str:
    used = 0
    for i in range(len(text) - 1, -1, -1):
        used += _columns(text[i])
        if used > columns:
            return text[i + 1:]
    return text
