"""Our entry merged into a host's config text, JSON or TOML, and nothing else changed.

A host's config holds the user's other servers and settings, in whatever spelling they
wrote: numbers Python would round (``1e400``, ``0.1000000000000000055``), one TOML table
spelled a dozen ways (quoted or spaced headers, dotted keys, an inline table, sub-tables
elsewhere in the file). So each merge edits the text only as a candidate, and hands it back
only if it parses to exactly the old document with our entry set, else refuses in one line
with what to do by hand: a config is never written half-right. An entry already exactly ours
leaves the file as it is (``unchanged``).
"""

from __future__ import annotations

import json
import re
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from massgen_mcp.core.edges import MAX_JSON_DEPTH, NotJson, UnsafeJson, load_json, nests_deeper
from massgen_mcp.core.errors import ConfigError

SERVER_NAME = "massgen"
Change = Literal["added", "updated", "unchanged"]


def _exact_json(text: str) -> Any:
    """JSON as its text says it: every number exactly (a Decimal, not the nearest float), and
    no ``NaN`` or ``Infinity`` (which are not JSON)."""
    def not_json(token: str) -> Any:
        raise ValueError(token)

    return json.loads(text, parse_float=Decimal, parse_constant=not_json)


def merge_json(existing: str | None, key: str, entry: dict[str, Any], path: Path,
                host_id: str) -> tuple[str | None, Change]:
    """The new text of a JSON config with our entry, and what that does to it (``unchanged``:
    the entry is already exactly ours, and the file is left as it is).

    Python reads a JSON number as the nearest float, so ``1e400`` would come back as
    ``Infinity`` (which no host can parse) and ``0.1000000000000000055`` as ``0.1``. As on the
    TOML side, the new text is written only if it reads, exactly, as the old document with our
    entry and nothing else changed."""
    data: Any = {}
    if existing is not None and existing.strip():
        try:
            data = load_json(existing)  # no RecursionError: nesting is capped
        except NotJson as exc:  # "not JSON (... at character N)"
            raise ConfigError(f"{path} is {exc}; fix it or move it away, then install "
                              "again") from None
        except UnsafeJson as exc:  # nested too deep, a string that is not text
            raise ConfigError(f"{path}: {exc}; fix it or move it away, then install "
                              "again") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} does not hold a JSON object; fix it or move it away")
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: '{key}' is not an object; fix it or move it away")
    if servers.get(SERVER_NAME) == entry:
        return existing, "unchanged"
    change: Change = "updated" if SERVER_NAME in servers else "added"
    servers[SERVER_NAME] = entry
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        meant = _exact_json(existing) if existing is not None and existing.strip() else {}
        meant.setdefault(key, {})[SERVER_NAME] = entry
        same = _exact_json(text) == meant
    except ValueError:
        same = False
    if not same:
        raise ConfigError(f"{path} holds a number (or NaN, Infinity) that would not be written "
                          f"back exactly as it is; nothing was written: add the entry "
                          f"`massgen-mcp install {host_id} --print` shows by hand")
    return text, change


# A TOML key part (bare, "basic" or 'literal'), and a key of more parts than the nesting
# limit: tomllib's time and memory grow with the square of a dotted key's length (a 20 KB key
# of 10,000 parts takes 400 MB and 3 s, 200 KB would exhaust memory), so it is refused before
# tomllib sees it. Possessive quantifiers and a start at a key's first character keep the
# search linear. A string value shaped like such a key is refused too (never seen in a host
# config).
_KEY_PART = r"""(?:[A-Za-z0-9_-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')"""
_DEEP_KEY = re.compile(rf"(?<![A-Za-z0-9_-]){_KEY_PART}(?:[ \t]*+\.[ \t]*+{_KEY_PART})"
                       rf"{{{MAX_JSON_DEPTH}}}")
_HEADER_LINE = re.compile(r"[ \t]*\[")
_KEY_LINE = re.compile(r"[ \t]*[A-Za-z0-9_\"'-]")
_OURS = ("mcp_servers", SERVER_NAME)


def _load_toml(text: str, path: Path) -> dict[str, Any]:
    """``tomllib.loads`` for a config anyone may have written: one line naming the file
    instead of a traceback, whatever the nesting."""
    problem = None
    if _DEEP_KEY.search(text):
        problem = f"a key nests deeper than {MAX_JSON_DEPTH} levels"
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            problem = f"is not valid TOML ({exc})"
        except RecursionError:
            problem = "nests too deep"
        else:
            if not nests_deeper(data, MAX_JSON_DEPTH):
                return data
            problem = f"nests deeper than {MAX_JSON_DEPTH} levels"
    raise ConfigError(f"{path} {problem}; fix it or move it away, then install again")


def _key_path(line: str) -> tuple[str, ...] | None:
    """The key path a line names as TOML itself reads it: a table header
    (``[mcp_servers."massgen".env]``, ``[[a.b]]``, any quoting or spacing) or a key/value pair
    (``massgen.command = "x"``, ``massgen = { command = "x" }``); None when the line is not
    one on its own (a line of a multi-line array or string, say)."""
    try:
        value: Any = tomllib.loads(line)
    except (tomllib.TOMLDecodeError, RecursionError):
        return None
    keys: list[str] = []
    while isinstance(value, dict) and len(value) == 1:
        key, value = next(iter(value.items()))
        keys.append(key)
    return tuple(keys) if keys else None


def _replace_our_entry(text: str, section: str) -> str:
    """``text`` without what defines ``mcp_servers.massgen`` (its tables and sub-tables,
    however their headers are spelled and wherever they are; one-line dotted keys or an
    inline table at the top level or under ``[mcp_servers]``), and ``section`` where its
    first table was, else at the end. A candidate only: :func:`merge_toml` checks what it
    parses to, so a spelling this misses (a value over several lines, a header inside a
    multi-line string) is refused, not written. Header lines are parsed one by one, key
    lines only where they spell our name."""
    kept: list[str] = []
    comments: list[str] = []  # the comments that end our table: they belong to the next
    table = ""  # the header line of the table the current line is in ("" at the top)
    ours = inserted = False
    for line in text.splitlines(keepends=True):
        if _HEADER_LINE.match(line) and (header := _key_path(line)) is not None:
            table, ours = line, header[:2] == _OURS
            if ours and not inserted:
                kept.append(section)
                inserted = True
            if ours:
                comments = []
                continue
            if comments and kept and kept[-1] is section:
                kept.append("\n")  # a blank line between our table and the next
            kept.extend(comments)
            comments = []
        elif ours:
            if line.lstrip().startswith("#"):
                comments.append(line)
            else:
                comments = []
            continue
        elif _KEY_LINE.match(line) and SERVER_NAME in line:
            context = _key_path(table) if table else ()
            path = _key_path(line)
            if context is not None and path is not None and (context + path)[:2] == _OURS:
                continue
        if kept and kept[-1] is section and line.strip():
            kept.append("\n")  # a blank line between our table and the next
        kept.append(line)
    body = "".join(kept)
    if inserted:
        return body
    separator = "" if not body or body.endswith("\n\n") else (
        "\n" if body.endswith("\n") else "\n\n")
    return body + separator + section


def _same(a: object, b: object) -> bool:
    """Equal as TOML values (a NaN equals a NaN; a date never equals a string)."""
    def canonical(value: object) -> str:
        return json.dumps(value, sort_keys=True,
                          default=lambda item: f"{type(item).__name__}:{item}")
    return canonical(a) == canonical(b)


def merge_toml(existing: str | None, section: str, path: Path, host_id: str
                ) -> tuple[str | None, Change]:
    """The new text of a Codex config with our table, and what that does to it.

    TOML spells one table many ways (quoted or spaced headers, dotted keys, an inline
    table, sub-tables elsewhere in the file), so the text is edited only as a candidate: it
    is written only if TOML parses it to exactly the old document with ``mcp_servers.massgen``
    set to our entry, nothing else changed. A spelling this edit cannot rewrite is refused
    with what to do, never written half-right."""
    text = existing or ""
    data = _load_toml(text, path)
    servers = data.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: 'mcp_servers' is not a table; fix it or move it away")
    wanted = tomllib.loads(section)["mcp_servers"][SERVER_NAME]
    current = servers.get(SERVER_NAME)
    if current is not None and _same(current, wanted):
        return existing, "unchanged"
    change: Change
    if current is None:
        separator = "" if not text or text.endswith("\n\n") else (
            "\n" if text.endswith("\n") else "\n\n")
        candidate, change = text + separator + section, "added"
    else:
        candidate, change = _replace_our_entry(text, section), "updated"
    expected = {**data, "mcp_servers": {**servers, SERVER_NAME: wanted}}
    try:
        result: object = tomllib.loads(candidate)
    except (tomllib.TOMLDecodeError, RecursionError):
        result = None
    if result is None or not _same(result, expected):
        raise ConfigError(
            f"{path}: install cannot edit its mcp_servers safely (an inline table, or a "
            "value over several lines); nothing was written: make massgen a "
            f"[mcp_servers.massgen] table, as `massgen-mcp install {host_id} --print` shows, "
            "by hand, or move the file away and install again")
    return candidate, change
