"""A unified diff read into file sections: the parser every way of naming the work shares.

Git's diffs, a patch file and a patch given as text all reach the review as bytes; this
module turns those bytes into one :class:`FileDiff` per file (its paths, lines and whether
it is binary), reading hunks by their line counts so that a changed line never reads as a
header, and holds the limits a diff must meet (UTF-8 text, no NUL bytes, at most
:data:`MAX_DIFF_BYTES`). It reads no file and runs no git: what to collect is
:mod:`massgen_mcp.review.changes`, a person's patch is :mod:`massgen_mcp.review.patch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.spec import MAX_CONTEXT_CHARS

# What one review sends: the diff goes into the run's context, whose limit is
# MAX_CONTEXT_CHARS; the rest is room for the notes around it. Larger is refused, with how
# to narrow it (issue 55: never silently truncated).
MAX_DIFF_BYTES = MAX_CONTEXT_CHARS - 20_000
# What a review takes in all: a diff over what one run sends is reviewed in parts
# (massgen_mcp.review.parts), up to git's output cap; larger is refused, with how to narrow it.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
# How to make each kind of review smaller, in the options that fit the one asked for (a
# --commit review was once told to review one commit).
_WAYS = {
    "worktree": "review fewer files as they are (massgen-mcp review PATH ...), or stage a "
                "part and review --staged",
    "staged": "stage fewer files (git restore --staged PATH) and review --staged again",
    "base": "review one commit at a time (--commit SHA), or give a nearer --base",
    "commit": "review its files a few at a time as they are (massgen-mcp review PATH ...), "
              "or split the commit",
    "patch": "split the patch into smaller ones (a few files each)",
    "paths": "name fewer files",
}


def narrow(kind: str) -> str:
    """How to narrow a review of ``kind`` (worktree, staged, base, commit, patch, paths)
    that is too large: only ways that fit it."""
    return f"narrow it: {_WAYS[kind]}"
_HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_QUOTED_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f",
                   "r": "\r", '"': '"', "\\": "\\"}
_ESCAPE_OF = {char: "\\" + name for name, char in _QUOTED_ESCAPES.items()}


@dataclass
class FileDiff:
    """One file's section of a diff: its header lines and hunks, as given."""

    old: str | None = None  # None: /dev/null (an added file) or not known
    new: str | None = None
    lines: list[bytes] = field(default_factory=list)
    binary: bool = False
    git_header: bool = False  # started by "diff --git"
    skipped: str | None = None  # why a named file is left out (a link in a folder, ...)

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys((self.old, self.new)) if p]

    @property
    def path(self) -> str:
        return self.new or self.old or "?"


def check_diff_text(data: bytes, described: str) -> bytes:
    """``data`` when it is UTF-8 text without NUL bytes, else a ConfigError."""
    if b"\0" in data:
        raise ConfigError(f"diff: {described} holds NUL bytes (binary data); give a text "
                          "diff (git diff without --binary)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"diff: {described} is not UTF-8 text (line {line}); convert it "
                          "to UTF-8, or leave that file out") from None
    return data


def mark_binary(sections: list[FileDiff]) -> list[FileDiff]:
    """``sections`` with those holding NUL bytes marked binary (git diff --text prints a
    binary file's bytes): what a file's content is decides, not the change's attributes."""
    for section in sections:
        if any(b"\0" in line for line in section.lines):
            section.binary = True
    return sections


def split_diff(data: bytes, described: str) -> list[FileDiff]:
    """The file sections of a unified diff (git's, or plain ``---``/``+++`` ones). Hunks are
    read by their line counts, so a removed line that reads ``-- x`` is not taken for a
    header. Text before the first section (a mail's headers, a commit message) is kept as
    a section with no path."""
    sections: list[FileDiff] = []
    current: FileDiff | None = None
    left = (0, 0)  # lines of the current hunk still to come: old side, new side
    lines = diff_lines(data)
    for i, line in enumerate(lines):
        if left != (0, 0) and current is not None:
            left, taken = _hunk_line(line, left)
            if taken:
                current.lines.append(line)
                continue
        current, left = _header_line(sections, current, lines, i, described)
        current.lines.append(line)
    return sections


def diff_lines(data: bytes) -> list[bytes]:
    """``data``'s lines as git counts them, each with its newline: broken at ``\\n`` only.
    ``bytes.splitlines`` also breaks at a lone CR, so a changed line holding one (a
    committed ``.env`` template's) would end its hunk early and let what follows it read
    as a new ``diff --git`` section: denied content kept, or real changes dropped."""
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]  # what follows the last newline ("" when data ends with one)
    return lines if lines[-1] else lines[:-1]


def _hunk_line(line: bytes, left: tuple[int, int]) -> tuple[tuple[int, int], bool]:
    """A line inside a hunk: the counts left after it, and whether it belongs to the hunk
    (a short hunk ends at a line that is none of its kinds)."""
    old, new = left
    kind = line[:1]
    if kind in (b" ", b"\n", b"\r"):
        return (max(old - 1, 0), max(new - 1, 0)), True
    if kind == b"-":
        return (max(old - 1, 0), new), True
    if kind == b"+":
        return (old, max(new - 1, 0)), True
    if kind == b"\\":  # "\ No newline at end of file"
        return left, True
    return (0, 0), False


def _header_line(sections: list[FileDiff], current: FileDiff | None, lines: list[bytes],
                 i: int, described: str) -> tuple[FileDiff, tuple[int, int]]:
    """A line outside hunks: the section it belongs to (a new one at a file header) and the
    counts of the hunk it opens, if it does."""
    line = lines[i]
    text = line.decode("utf-8", "replace").rstrip("\r\n")  # a binary file's line too
    following = lines[i + 1] if i + 1 < len(lines) else b""
    if text.startswith("diff --git "):
        current = FileDiff(git_header=True)
        current.old, current.new = header_paths(text[len("diff --git "):])
        sections.append(current)
    elif text.startswith("--- ") and following.startswith(b"+++ "):
        if current is None or not current.git_header or any(
                existing.startswith(b"--- ") for existing in current.lines):
            current = FileDiff()
            sections.append(current)
        current.old = patch_path(text[4:])
    elif current is None:
        current = FileDiff()  # the preamble
        sections.append(current)
    elif text.startswith("+++ "):
        current.new = patch_path(text[4:])
    elif text.startswith("@@ "):
        match = _HUNK.match(line)
        if match is None:
            raise ConfigError(f"diff: {described} has a malformed hunk header at line "
                              f"{i + 1}; give a unified diff (git diff)")
        return current, (int(match.group(1) or b"1"), int(match.group(2) or b"1"))
    elif text.startswith(("Binary files ", "GIT binary patch")):
        current.binary = True
    elif current.git_header:
        for word, side in (("rename from ", "old"), ("rename to ", "new"),
                           ("copy from ", "old"), ("copy to ", "new")):
            if text.startswith(word):
                setattr(current, side, unquote(text[len(word):]))
        if text.startswith("new file mode"):
            current.old = None
        elif text.startswith("deleted file mode"):
            current.new = None
    return current, (0, 0)


def header_paths(rest: str) -> tuple[str | None, str | None]:
    """The two paths of a ``diff --git a/X b/Y`` header (the ``---``/``+++`` lines, when the
    section has them, override these)."""
    if rest.startswith('"'):
        end = _quoted_end(rest)
        old = unquote(rest[:end])
        new = unquote(rest[end:].strip())
        return strip_prefix(old), strip_prefix(new)
    if rest.endswith('"') and ' "' in rest:  # a quoted second path (else: a stray quote)
        start = rest.rindex(' "')
        return strip_prefix(rest[:start]), strip_prefix(unquote(rest[start + 1:]))
    half = (len(rest) - 1) // 2  # "a/P b/P": the same path twice
    if len(rest) % 2 == 1 and rest[half] == " " and rest[2:half] == rest[half + 3:]:
        return strip_prefix(rest[:half]), strip_prefix(rest[half + 1:])
    old, _, new = rest.partition(" b/")
    return strip_prefix(old), strip_prefix("b/" + new) if new else None


def _quoted_end(text: str) -> int:
    i = 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def patch_path(text: str) -> str | None:
    """The path of a ``---``/``+++`` line's rest: quoted or not, without a timestamp after a
    tab and without its ``a/``/``b/`` prefix; None for ``/dev/null``."""
    if text.startswith('"'):
        text = unquote(text[:_quoted_end(text)])
    else:
        text = text.split("\t", 1)[0].rstrip()
    return None if text == "/dev/null" else strip_prefix(text)


def strip_prefix(path: str) -> str | None:
    if path == "/dev/null":
        return None
    return path[2:] if path.startswith(("a/", "b/")) else path


def quote(path: str) -> str:
    """``path`` as git writes it in a diff header (``core.quotePath``): in double quotes,
    C-style, when it holds a control character, a quote, a backslash or a byte past ASCII;
    as it is otherwise. A name with a newline or an escape sequence then stays one plain
    line, which :func:`unquote` reads back."""
    data = path.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b >= 0x7F or b in b'"\\' for b in data):
        return path
    out = [_ESCAPE_OF.get(chr(b)) or (f"\\{b:03o}" if b < 0x20 or b >= 0x7F else chr(b))
           for b in data]
    return '"' + "".join(out) + '"'


def unquote(text: str) -> str:
    """Git's C-style quoted path (``"a/\\303\\251t\\303\\251.txt"``), unquoted."""
    if not (len(text) >= 2 and text.startswith('"') and text.endswith('"')):
        return text
    out = bytearray()
    body = text[1:-1]
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567" and i + 3 < len(body) + 1 and body[i + 1:i + 4].isdigit():
                out.append(int(body[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            out += _QUOTED_ESCAPES.get(nxt, nxt).encode()
            i += 2
            continue
        out += char.encode()
        i += 1
    return out.decode("utf-8", "replace")
