"""Text and JSON from outside, checked once where they come in.

Everything massgen-mcp records is UTF-8 JSON, and Python's JSON and YAML code recurses: a
string that cannot be encoded (a lone surrogate, which is what an undecodable byte in a
command-line argument or a ``"\\ud800"`` escape becomes) or a document nested thousands deep
would fail far from where it came in, as a traceback or a run ended ``internal_error``. So every
edge (questions and context, HTTP bodies, eval files, models' JSON replies) goes through these
functions, and bad input is refused there with a message that names it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from massgen_mcp.core.errors import ConfigError

# No request, reply or file massgen-mcp reads needs more; far below Python's recursion limit,
# so whatever handles the value afterwards (pydantic, json.dumps) cannot recurse too deep.
MAX_JSON_DEPTH = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
_DECODER = json.JSONDecoder()


class UnsafeJson(ValueError):
    """JSON that is not well-formed, nests deeper than :data:`MAX_JSON_DEPTH` or holds a
    string that is not text. The message is one line that says which."""


class NotJson(UnsafeJson):
    """Not well-formed JSON at all (as opposed to JSON that parses but is not usable)."""


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be kept as UTF-8 text (None when it can)."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    what = (f"the byte 0x{code - 0xDC00:02x}, which is not UTF-8" if 0xDC80 <= code <= 0xDCFF
            else f"a lone surrogate (U+{code:04X}), which is not a character")
    return f"character {found.start() + 1} is {what}; send UTF-8 text"


def check_text(text: str, field: str) -> str:
    """``text`` unchanged, or a ConfigError naming ``field`` if it is not UTF-8 text."""
    problem = text_problem(text)
    if problem:
        raise ConfigError(f"{field}: {problem}")
    return text


def load_json(text: str | bytes) -> object:
    """``json.loads`` for input from outside: UnsafeJson instead of a RecursionError, a
    document nested too deep or a string that is not text."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotJson(f"byte {exc.start + 1} is not UTF-8") from None
    value, end = decode_json(text, 0)
    if text[end:].strip():
        raise NotJson(f"not JSON (extra data at character {end + 1})")
    return value


def decode_json(text: str, start: int) -> tuple[object, int]:
    """``JSONDecoder.raw_decode`` (one value from ``start``; it and where it ended) with the
    checks of :func:`load_json`."""
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise NotJson(f"not JSON ({exc.msg} at character {exc.pos + 1})") from None
    except RecursionError:
        raise UnsafeJson(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise UnsafeJson(f"not usable JSON ({exc})") from None
    _check_value(value)
    return value, end


def find_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``, which may wrap it in prose or code fences (as models
    do): the value at the first ``{`` from which well-formed JSON parses, whatever follows it.

    None when no ``{`` starts one. A ``{`` that does not parse is skipped; the first one that
    parses but is not usable (nested too deep, a string that is not text) raises
    :class:`UnsafeJson` rather than being skipped, so the caller can say why.
    """
    start = text.find("{")
    while start != -1:
        try:
            value = decode_json(text, start)[0]
        except NotJson:
            start = text.find("{", start + 1)
            continue
        assert isinstance(value, dict)  # a value that starts with "{" is an object
        return value
    return None


def nests_deeper(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a decoded ``value`` nests dicts or lists more than ``limit`` deep: for a
    parser that caps nothing itself (``tomllib``), before the value reaches code that
    recurses."""
    return any(isinstance(item, dict | list) and depth >= limit for item, depth in _walk(value))


def _check_value(value: object) -> None:
    """Depth and text of a decoded value."""
    for item, depth in _walk(value):
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                raise UnsafeJson(f"a string: {problem}")
        elif isinstance(item, dict | list) and depth >= MAX_JSON_DEPTH:
            raise UnsafeJson(f"nested deeper than {MAX_JSON_DEPTH} levels")


def _walk(value: object) -> Iterator[tuple[object, int]]:
    """Every value within ``value`` (itself, dict keys included) and its depth, depth first,
    without recursion: the walk must not fail on the depth it is there to measure. A
    container's children are taken only once the caller has seen it, so a caller that stops
    at a container too deep never walks below it."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        yield item, depth
        if isinstance(item, dict | list):
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


# What a terminal obeys rather than shows: C0 controls but tab and newline (ESC starts every
# ANSI sequence, BEL ends OSC ones, CR rewrites the line), DEL, C1 controls (CSI, OSC, ...) and
# the bidirectional overrides that reorder what is shown.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e"
                       "\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` for a terminal: every control character written as a visible escape
    (``\\x1b]0;evil\\x07``) instead of obeyed, so model output cannot retitle the window,
    clear the screen, rewrite earlier lines or hide text. Newlines and tabs stay; a Windows
    line end is a newline."""
    return _CONTROLS.sub(_escape, text.replace("\r\n", "\n"))


def without_controls(text: str) -> str:
    """``text`` with every character :func:`terminal_safe` would escape removed: for model
    text that is shown in terminals, Markdown and SARIF viewers alike (a review's findings)."""
    return _CONTROLS.sub("", text.replace("\r\n", "\n"))


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a character :func:`terminal_safe` would escape (newline and tab
    aside): a config value that should never have one (a URL, a command) is refused."""
    return _CONTROLS.search(text.replace("\r\n", "\n")) is not None


def json_terminal_safe(text: str) -> str:
    """JSON text with the characters :func:`terminal_safe` escapes written as ``\\uXXXX``:
    the same JSON for a program, nothing for a terminal to obey (``json.dumps`` escapes only
    C0 controls)."""
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# GitHub's runner reads a workflow command in every log line: one that starts with "::" once
# its leading blanks are gone, and the legacy "##[name]" anywhere in a line (actions/runner,
# ActionCommandManager.TryProcessCommand: TryParseV2, then TryParse).
_COMMAND_LINE = re.compile(r"^(?=[ \t]*::)", re.MULTILINE)
_LEGACY_COMMAND = "##["
_ZWSP = "\u200b"  # not blank to the runner (.NET's char.IsWhiteSpace), unseen by a reader


def workflow_inert(text: str) -> str:
    """``text`` (one or more lines) as a GitHub Actions log shows it and never obeys it: a
    line that would start a workflow command (``::add-mask::``, ``::set-output``) gets a
    zero-width space first, and a legacy ``##[`` one inside. Lines only massgen-mcp writes
    whole (review ``--format github``'s annotations) are the commands it means."""
    return _COMMAND_LINE.sub(_ZWSP, text).replace(_LEGACY_COMMAND, "##" + _ZWSP + "[")


def workflow_inert_json(text: str) -> str:
    """JSON text whose strings hold no legacy ``##[`` command, losslessly (``[`` as the
    escape ``\\u005b``, which only a string can hold; a JSON line never starts with ``::``)."""
    return text.replace(_LEGACY_COMMAND, "##\\u005b")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
