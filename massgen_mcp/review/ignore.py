"""Path patterns in gitignore syntax, matched against a repository's relative paths.

A repository's review rules name the files to leave out (``review.ignore``) and the files an
instruction is for (``review.instructions``) the way its ``.gitignore`` names files, so that
nobody learns a second syntax. The rules are git's (``gitignore(5)``), for paths that are
always relative to the repository's top folder:

* a blank line matches nothing; ``#`` starts a comment (``\\#`` is a ``#``); trailing spaces
  are dropped unless escaped (``\\ ``);
* ``!`` negates: a path a later ``!pattern`` matches is included again, except a path under
  a folder that is itself excluded (git does not look inside it);
* a pattern with a ``/`` at its start or in its middle is anchored at the top folder
  (``/build``, ``docs/api``); one without matches a name at any depth (``*.lock``);
* a trailing ``/`` matches only a folder, and so every file under it (``vendor/``);
* ``*`` is any run of characters but ``/``, ``?`` one such character, ``[a-z]`` and
  ``[!a-z]`` a class; ``**/`` at the start matches in every folder, ``/**`` at the end
  everything inside, ``/**/`` in the middle zero or more folders; any other ``**`` is ``*``;
* matching is case-sensitive, as git's is by default.

A pattern only ever compares names: it reads nothing, so it cannot reach a file. One that
could never match a path inside the repository (a ``..`` part, a drive letter) is refused
by :func:`check_pattern` with the rule's key, as a mistake to say rather than a no-op.

The suite checks this against ``git check-ignore --no-index`` itself
(``tests/review/test_ignore.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from massgen_mcp.core.errors import ConfigError


@dataclass(frozen=True)
class Pattern:
    """One compiled pattern: as written, whether it negates, whether only a folder matches."""

    written: str
    regex: re.Pattern[str]
    negated: bool
    folder_only: bool


def check_pattern(written: str, where: str) -> None:
    """Refuse a pattern no path inside the repository can match: one that climbs out of it
    (a ``..`` part) or names a drive (``C:``); ``where`` names the rule's key."""
    body = written.removeprefix("!").strip()
    parts = [p for p in body.replace("\\", "/").split("/") if p]
    if ".." in parts:
        raise ConfigError(f"{where}: {written!r} leaves the repository ('..'); patterns are "
                          "relative to the repository's top folder and match only paths "
                          "inside it")
    if re.match(r"^[A-Za-z]:", body) or body.startswith("//"):
        raise ConfigError(f"{where}: {written!r} is an absolute path; patterns are relative "
                          "to the repository's top folder ('/docs' is the top's docs)")


def _trim(line: str) -> str:
    """The pattern without its trailing spaces, unless the last one is escaped."""
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        if end >= 2 and line[end - 2] == "\\":
            break
        end -= 1
    return line[:end]


def _class(body: str, start: int) -> tuple[str, int] | None:
    """The regex of the ``[...]`` class that starts at ``body[start]``, and the index past
    it; None when it is not closed (then ``[`` is itself)."""
    i = start + 1
    out = "["
    if i < len(body) and body[i] in "!^":
        out += "^"
        i += 1
    if i < len(body) and body[i] == "]":  # a ']' first is a member
        out += r"\]"
        i += 1
    while i < len(body) and body[i] != "]":
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            out += re.escape(body[i + 1])
            i += 2
            continue
        out += char if char == "-" else re.escape(char)
        i += 1
    if i >= len(body):
        return None
    return out + "]", i + 1


def _body_regex(body: str) -> str:
    """The regex of an anchored pattern body (no leading ``/``, no trailing ``/``)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if body.startswith("**", i):
            before = i == 0 or body[i - 1] == "/"
            after = i + 2 == len(body) or body[i + 2] == "/"
            if before and after:
                if i + 2 == len(body):  # "**" at the end: everything (below the prefix)
                    out.append(".*")
                    i += 2
                else:  # "**/" at the start or "/**/" in the middle: zero or more folders
                    out.append("(?:.*/)?")
                    i += 3
                continue
            out.append("[^/]*")
            while i < len(body) and body[i] == "*":
                i += 1
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            found = _class(body, i)
            if found is not None:
                out.append(found[0])
                i = found[1]
                continue
            out.append(r"\[")
        elif char == "\\" and i + 1 < len(body):
            out.append(re.escape(body[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def compile_pattern(line: str) -> Pattern | None:
    """The pattern a gitignore line holds, or None for a blank line or a comment."""
    written = line
    line = _trim(line.rstrip("\r\n"))
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]
    folder_only = line.endswith("/") and not line.endswith("\\/")
    line = line.rstrip("/") if folder_only else line
    if not line:
        return None
    anchored = "/" in line
    body = _body_regex(line.lstrip("/") if anchored else line)
    regex = body if anchored else f"(?:.*/)?{body}"
    return Pattern(written, re.compile(regex, re.DOTALL), negated, folder_only)


class PathRules:
    """A list of gitignore patterns, in order (the last that matches decides)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.patterns = [p for line in lines if (p := compile_pattern(line)) is not None]

    def _last(self, path: str, folder: bool) -> Pattern | None:
        found = None
        for pattern in self.patterns:
            if pattern.folder_only and not folder:
                continue
            if pattern.regex.fullmatch(path):
                found = pattern
        return found

    def match(self, path: str) -> Pattern | None:
        """The pattern that excludes the file ``path`` (relative, ``/``-separated), or None
        when it is not excluded: a folder above it that is excluded excludes it whatever
        follows (git does not look inside), else the last pattern matching it decides."""
        parts = path.split("/")
        for depth in range(1, len(parts)):
            above = self._last("/".join(parts[:depth]), folder=True)
            if above is not None and not above.negated:
                return above
        last = self._last(path, folder=False)
        return last if last is not None and not last.negated else None

    def matches(self, path: str) -> bool:
        """Whether any pattern names ``path`` (negation aside): how an instruction's glob
        picks its files."""
        return self.match(path) is not None
