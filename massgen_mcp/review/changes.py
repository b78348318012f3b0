"""What to review: a unified diff (with context), the files it changes and the repository it
belongs to, collected from git or read from a patch, checked before any model sees it.

One function, :func:`collect`, for every way a person names the work:

* nothing: the working tree's changes against ``HEAD``, staged and unstaged (untracked files
  are not in it: ``git add -N`` them, or name them as paths);
* ``staged``: what is staged (``git diff --cached``);
* ``base``: the branch's commits since its merge base with ``base`` (``git diff MB HEAD``);
* ``commit``: one commit against its first parent;
* ``patch``: a patch file, or ``-`` for stdin (``gh pr diff 123 | massgen-mcp review -``);
* ``paths``: files as they are (each shown whole, as an added file, so lines are numbered).

Everything is refused with one line that names the input and the fix, and nothing outside
the repository is read: not a git repository, an unknown ref, a diff that is not UTF-8 text
or holds NUL bytes, a diff over :data:`MAX_DIFF_BYTES` (refused, never cut), a patch whose
paths leave the repository (``..``, absolute, through a link) or name files that do not
exist, and an empty diff ("nothing to review"). Files on the secret-file deny-list
(:data:`massgen_mcp.tools.workspace.DENY_NAMES`: ``.env``, keys, credentials) and anything
under ``.git/`` never go to a model: their sections are dropped and named in
:attr:`Changes.left_out`; so are binary files (those holding NUL bytes: git diffs every file
as text, so a change's ``.gitattributes`` cannot call a text file binary).

Git runs hardened (:mod:`massgen_mcp.tools.git`): the repository's config executes nothing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely
from massgen_mcp.core.spec import MAX_CONTEXT_CHARS
from massgen_mcp.tools.git import (
    MAX_OUTPUT_BYTES,
    Git,
    GitFailed,
    OutputOverCap,
    filter_overrides,
    plain_parts,
    through_link,
)
from massgen_mcp.tools.workspace import is_denied, is_hidden

# What one review sends: the diff goes into the run's context, whose limit is
# MAX_CONTEXT_CHARS; the rest is room for the notes around it. Larger is refused, with how
# to narrow it (issue 55: never silently truncated).
MAX_DIFF_BYTES = MAX_CONTEXT_CHARS - 20_000
CONTEXT_LINES = 5  # lines of context around each change (git's default is 3)
DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-color", f"--unified={CONTEXT_LINES}",
                "--src-prefix=a/", "--dst-prefix=b/", "--no-relative", "-M",
                "--ignore-submodules=all",  # no child git in a submodule, with its config
                # Every file as text: the change's own .gitattributes ("-diff", "binary")
                # must not hide a text file as "Binary files differ"; a section with NUL
                # bytes is what is binary (mark_binary).
                "--text")
NARROW = ("narrow it: name fewer files (massgen-mcp review PATH ...), review one commit "
          "(--commit SHA), or split the patch")
_HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_QUOTED_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f",
                   "r": "\r", '"': '"', "\\": "\\"}


@dataclass(frozen=True)
class Changes:
    """The work under review.

    ``diff``: a unified diff with context, UTF-8 text, at most :data:`MAX_DIFF_BYTES`,
    without the sections of :attr:`left_out` files; ``files``: the paths it changes,
    relative to ``root`` (POSIX separators); ``root``: the repository's top folder;
    ``described``: what was collected, in words (``the working tree against HEAD``);
    ``left_out``: one note per file whose changes were dropped, and why."""

    root: Path
    described: str
    diff: str
    files: tuple[str, ...]
    left_out: tuple[str, ...] = ()
    commit: str | None = None  # the reviewed side, when it is a commit (not the working tree)


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


def git_said(exc: GitFailed) -> str:
    """Git's first line of complaint, for a one-line error."""
    said = [line.removeprefix("fatal: ").removeprefix("error: ")
            for line in exc.stderr.splitlines() if line.strip()]
    return said[0][:200] if said else str(exc)[:200]


async def repository(cwd: Path) -> Path:
    """The top folder of the git repository ``cwd`` is in, or a ConfigError saying so.

    The top must be the folder that holds that repository: a ``core.worktree`` in its
    config can name any other folder (another repository, the user's home), and every
    later git command and the members' workspace tools would run there. So ``cwd`` must be
    inside the top, and git, asked from the top itself, must find the same repository."""
    query = ("rev-parse", "--absolute-git-dir", "--show-toplevel")
    try:
        out = await Git(cwd).run(*query)
    except GitFailed as exc:
        raise ConfigError(f"repository: {cwd} is not inside a git repository "
                          f"(git: {git_said(exc)}); run massgen-mcp review in the project's "
                          "folder") from None
    found = out.decode("utf-8", "surrogateescape").splitlines()
    if len(found) < 2 or not found[1].strip():
        raise ConfigError(f"repository: {cwd} is inside a git folder, not a working tree; "
                          "run massgen-mcp review in the project's folder")
    top = Path(found[1].strip()).resolve()
    elsewhere = ConfigError(f"repository: its working tree is set to {top} (core.worktree), "
                            f"not the folder that holds it; review from {top}, or remove "
                            "core.worktree from its config")
    if not cwd.resolve().is_relative_to(top):
        raise elsewhere
    try:
        again = (await Git(top).run(*query)).decode("utf-8", "surrogateescape").splitlines()
    except GitFailed:
        raise elsewhere from None
    if (len(again) < 2 or Path(again[0]).resolve() != Path(found[0]).resolve()
            or Path(again[1].strip()).resolve() != top):
        raise elsewhere
    return top


async def collect(cwd: Path, *, staged: bool = False, base: str | None = None,
                  commit: str | None = None, patch: str | None = None,
                  paths: Sequence[str] = (), stdin: BinaryIO | None = None,
                  patch_text: str | None = None) -> Changes:
    """What to review, as the arguments name it (at most one of them; none: the working
    tree's changes against HEAD). ``patch`` is a file path or ``-`` (read from ``stdin``,
    default ``sys.stdin``); ``patch_text`` is a patch itself (the MCP tool's and the Python
    API's ``patch``: a caller that is a model or a program holds the diff, not a file);
    ``paths`` are files or folders, relative to ``cwd``."""
    given = [name for name, value in (("--staged", staged), ("--base", base),
                                      ("--commit", commit),
                                      ("patch", patch or patch_text is not None),
                                      ("paths", list(paths))) if value]
    if len(given) > 1:
        raise ConfigError(f"{given[1]}: give one of --staged, --base, --commit, a patch or "
                          f"paths, not {' and '.join(given)}")
    root = await repository(cwd)
    try:
        if patch_text is not None:
            return _patch(root, *given_patch(patch_text))
        return await _collect(root, cwd, staged, base, commit, patch, paths, stdin)
    except GitFailed as exc:  # a FIFO at a tracked path, a blobless clone's missing blob...
        raise ConfigError(f"git: {git_said(exc)}; fix that in the repository (or review "
                          "another way: a patch, named files)") from None


async def _collect(root: Path, cwd: Path, staged: bool, base: str | None,
                   commit: str | None, patch: str | None, paths: Sequence[str],
                   stdin: BinaryIO | None) -> Changes:
    git = Git(root, await filter_overrides(root))
    if patch is not None:
        return _patch(root, *read_patch(patch, cwd, stdin))
    if paths:
        return await whole_files(git, root, cwd, paths)
    head = await resolve(git, "HEAD", "HEAD", missing_ok=True)
    reviewed: str | None = None
    if staged:
        described = "the staged changes"
        args = ["diff", "--cached", *DIFF_OPTIONS, head or await empty_tree(git)]
    elif base is not None:
        theirs = await resolve(git, base, "--base")
        if head is None or theirs is None:
            raise ConfigError("--base: this repository has no commit yet; commit first, or "
                              "review the working tree (no option)")
        try:
            merge_base = (await git.run("merge-base", head, theirs)).decode().strip()
        except GitFailed:
            raise ConfigError(f"--base: HEAD and {base!r} have no common ancestor; give the "
                              "branch this one started from") from None
        described = f"the commits since the merge base with {base}"
        args, reviewed = ["diff", *DIFF_OPTIONS, merge_base, head], head
    elif commit is not None:
        oid = await resolve(git, commit, "--commit")
        assert oid is not None
        parents = (await git.run("rev-list", "--parents", "-n", "1", oid)).decode().split()
        parent = parents[1] if len(parents) > 1 else await empty_tree(git)
        described = f"commit {commit}"
        args, reviewed = ["diff", *DIFF_OPTIONS, parent, oid], oid
    else:
        described = "the working tree against HEAD"
        args = ["diff", *DIFF_OPTIONS, head or await empty_tree(git)]
    try:
        # Binary files come as text and are dropped after: read past the review's limit,
        # which finish applies to what is kept.
        data = await git.run(*args, "--", cap=MAX_OUTPUT_BYTES)
    except OutputOverCap:
        raise ConfigError(f"diff: {described} is more than {MAX_OUTPUT_BYTES:,} bytes, "
                          f"more than a review sends; {NARROW}") from None
    sections = mark_binary(split_diff(data, described))
    check_diff_text(b"".join(b"".join(s.lines) for s in sections if not s.binary),
                    f"diff of {described}")
    changes = finish(root, described, sections)
    return Changes(changes.root, changes.described, changes.diff, changes.files,
                   changes.left_out, commit=reviewed)


def _patch(root: Path, data: bytes, described: str) -> Changes:
    sections = split_diff(data, described)
    check_patch_paths(root, sections)
    return finish(root, described, sections)


def given_patch(text: str) -> tuple[bytes, str]:
    """A patch given as text: its bytes, at most :data:`MAX_DIFF_BYTES` (refused, not cut),
    checked as a file's are."""
    data = text.encode("utf-8", "surrogatepass")
    described = "the given patch"
    if len(data) > MAX_DIFF_BYTES:
        raise ConfigError(f"patch: {described} is {len(data):,} bytes, more than the "
                          f"{MAX_DIFF_BYTES:,} a review sends (refused, not cut); {NARROW}")
    return check_diff_text(data, described), described


async def resolve(git: Git, ref: str, field_name: str, *, missing_ok: bool = False
                  ) -> str | None:
    """The commit id ``ref`` names, or a ConfigError naming ``field_name``
    (``missing_ok``: None for an unborn HEAD)."""
    if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
        raise ConfigError(f"{field_name}: {ref!r} is not a ref; give a branch, tag or commit "
                          "hash")
    try:
        out = await git.run("rev-parse", "--verify", "--quiet", "--end-of-options",
                            f"{ref}^{{commit}}")
    except GitFailed:
        if missing_ok:
            return None
        raise ConfigError(f"{field_name}: {ref!r} is not a commit in this repository; give a "
                          "branch, tag or commit hash that git log shows") from None
    return out.decode().strip()


async def empty_tree(git: Git) -> str:
    """The id of the empty tree (SHA-1 or SHA-256, as the repository uses), computed, not
    written."""
    return (await git.run("hash-object", "-t", "tree", "--stdin")).decode().strip()


def read_patch(name: str, cwd: Path, stdin: BinaryIO | None) -> tuple[bytes, str]:
    """The bytes of the patch file ``name`` (``-``: stdin), at most :data:`MAX_DIFF_BYTES`."""
    if name == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        data = stream.read(MAX_DIFF_BYTES + 1)
        described = "the patch on stdin"
    else:
        path = cwd / name
        described = f"the patch {name}"
        try:
            data = read_bytes_safely(path, MAX_DIFF_BYTES, follow_link=True)
        except UnsafeFileError as exc:
            if exc.reason == "too_big":
                raise ConfigError(f"patch: {described} is {exc.size or 0:,} bytes, more than "
                                  f"the {MAX_DIFF_BYTES:,} a review sends (refused, not cut); "
                                  f"{NARROW}") from None
            raise ConfigError(f"patch: {name!r} cannot be read ({exc}); give a regular "
                              "file") from None
        except FileNotFoundError:
            raise ConfigError(f"patch: {name!r} does not exist; give a patch file, or - to "
                              "read one from stdin") from None
        except OSError as exc:
            raise ConfigError(f"patch: {name!r} cannot be read ({exc.strerror})") from None
    if len(data) > MAX_DIFF_BYTES:
        raise ConfigError(f"patch: {described} is more than {MAX_DIFF_BYTES:,} bytes, more "
                          f"than a review sends (refused, not cut); {NARROW}")
    return check_diff_text(data, described), described


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


def check_patch_paths(root: Path, sections: list[FileDiff]) -> None:
    """Refuse a patch that names a path outside ``root`` (``..``, absolute, through a link)
    or changes a file that does not exist there. Only names are resolved; no file is read."""
    for section in sections:
        for path in section.paths:
            where = inside(root, path, "patch")
            if is_hidden(PurePosixPath(path), (".git",)) or is_denied(PurePosixPath(path)):
                continue  # dropped by finish, named in its note
            if path == section.old and not where.is_file():  # the side it changes
                raise ConfigError(f"patch: it changes {path!r}, which does not exist in "
                                      f"{root}; check out the branch the patch was made "
                                      "against")


def inside(root: Path, path: str, field_name: str) -> Path:
    """``root / path`` when ``path`` is relative, without ``..``, and resolves (links
    followed) inside ``root``; else a ConfigError naming ``field_name``."""
    if (PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()
            or PureWindowsPath(path).drive or path.startswith("\\")):
        raise ConfigError(f"{field_name}: {path!r} is an absolute path; a patch names files "
                          "relative to the repository (a/..., b/...)")
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        raise ConfigError(f"{field_name}: {path!r} leaves the repository ('..'); a patch "
                          "may only change files inside it")
    try:
        resolved = (root / path).resolve()
    except (OSError, RuntimeError):  # a link loop
        raise ConfigError(f"{field_name}: {path!r} is a link loop") from None
    if not resolved.is_relative_to(root):
        raise ConfigError(f"{field_name}: {path!r} leads outside the repository through a "
                          "link; a patch may only change files inside it")
    return resolved


def finish(root: Path, described: str, sections: list[FileDiff]) -> Changes:
    """The :class:`Changes` of ``sections``: denied, ``.git/`` and binary files dropped and
    named; the rest joined; an empty result refused."""
    kept: list[FileDiff] = []
    left_out: list[str] = []
    for section in sections:
        paths = section.paths
        if any(is_hidden(PurePosixPath(p), (".git",)) for p in paths):
            left_out.append(f"{section.path}: inside .git/ (the repository's internals; "
                            "never sent)")
        elif any(is_denied(PurePosixPath(p)) for p in paths):
            left_out.append(f"{section.path}: on the secret-file deny-list (its changes are "
                            "never sent to a model)")
        elif section.binary:
            left_out.append(f"{section.path}: binary (a diff shows no lines of it)")
        elif section.skipped:
            left_out.append(f"{section.path}: {section.skipped}")
        else:
            kept.append(section)
    files = tuple(dict.fromkeys(s.path for s in kept if s.paths))
    diff = b"".join(b"".join(s.lines) for s in kept).decode("utf-8")
    if not files:
        why = f" ({'; '.join(left_out)})" if left_out else ""
        raise ConfigError(f"diff: nothing to review: {described} changes no file that can "
                          f"be sent{why}")
    if len(diff.encode()) > MAX_DIFF_BYTES:
        raise ConfigError(f"diff: {described} is {len(diff.encode()):,} bytes; the limit is "
                          f"{MAX_DIFF_BYTES:,}; {NARROW}")
    return Changes(root, described, diff, files, tuple(left_out))


async def whole_files(git: Git, root: Path, cwd: Path, names: Sequence[str]) -> Changes:
    """The files ``names`` give (a folder: its tracked files), each as an added file, so
    that its lines are numbered as a diff's are."""
    found: list[str] = []
    for name in names:
        path = (cwd / name)
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            raise ConfigError(f"paths: {name!r} is a link loop") from None
        if not resolved.is_relative_to(root):
            raise ConfigError(f"paths: {name!r} is outside the repository {root}; name files "
                              "inside it")
        relative = resolved.relative_to(root).as_posix()
        if resolved.is_dir():
            out = await git.run("ls-files", "-z", "--", relative or ".")
            found += [p for p in out.decode("utf-8", "surrogateescape").rstrip("\n").split("\0")
                      if p]
        elif resolved.is_file():
            if path.is_symlink():  # a link to a file inside: name the file itself
                raise ConfigError(f"paths: {name!r} is reached through a link; name the file "
                                  f"itself ({relative})")
            found.append(relative)
        else:
            raise ConfigError(f"paths: {name!r} does not exist or is not a file or folder")
    sections: list[FileDiff] = []
    for relative in dict.fromkeys(found):
        section = FileDiff(old=None, new=relative, git_header=True)
        sections.append(section)
        if is_denied(PurePosixPath(relative)) or is_hidden(PurePosixPath(relative), (".git",)):
            continue  # never read
        if plain_parts(relative) is None or through_link(root, relative):
            section.skipped = "reached through a link (not followed)"
            continue
        try:
            data = read_bytes_safely(root / relative, MAX_DIFF_BYTES)
        except UnsafeFileError as exc:
            if exc.reason == "too_big":
                raise ConfigError(f"paths: {relative!r} is more than {MAX_DIFF_BYTES:,} "
                                  f"bytes, more than a review sends; {NARROW}") from None
            section.skipped = f"not read ({str(exc).removeprefix(Path(relative).name + ' ')})"
            continue
        except FileNotFoundError:
            raise ConfigError(f"paths: {relative!r} does not exist (a tracked file deleted "
                              "from the working tree?)") from None
        if b"\0" in data[:8000]:
            section.binary = True
            continue
        text = check_diff_text(data, relative).decode("utf-8")
        body = text.split("\n")  # lines as git counts them (not str.splitlines's \f, \x1c...)
        if body[-1] == "":
            body.pop()
        header = (f"diff --git a/{relative} b/{relative}\nnew file\n--- /dev/null\n"
                  f"+++ b/{relative}\n@@ -0,0 +1,{len(body)} @@\n")
        section.lines = [(header + "".join(f"+{line}\n" for line in body)).encode()]
    return finish(root, f"the files {', '.join(names)}", sections)
