"""A read-only copy of the reviewed side's tracked files: the working folder of a review
run's coding-CLI members (built once per run and removed with it by the run's owner,
:func:`massgen_mcp.executors.local.review_folder`), in place of the empty folder a CLI gets in
any other run.

:func:`build` copies the files git tracks (``git ls-files``: the working tree's content; with
``commit``, the commit's tree through ``git ls-tree`` and ``git cat-file --batch``, so the
working tree is not read at all) into a new temporary folder and returns it with what it left
out, and why:

* files a model may not see (:func:`massgen_mcp.tools.workspace.withheld`: the secret-file
  deny-list, ``.env``, keys, credentials; anything under ``.git/`` or ``.massgen/``; and, by
  content, a file holding a private key): never copied, so a member that asks for ``.env``
  finds nothing there;
* a coding CLI's project settings (``.claude/``, ``.codex/``, ``.gemini/``, ``.agents/``,
  ``.mcp.json``): what a CLI member working in the copy would load (hooks, MCP servers);
* links (a tracked link, or a working-tree file reached through one): not followed, not
  copied; submodules; files that are not regular (a FIFO) or have other names (hard links);
* files over :data:`MAX_FILE_BYTES`, and whatever would take the copy past
  :data:`MAX_TOTAL_BYTES`;
* with ``commit``, a name a crafted tree holds twice (or as a file and a folder) after its
  first, and a blob a partial clone lacks (never fetched: git runs without transport).

Files are made read-only and owner-only (0400) and folders 0500: a member's tools cannot
change the copy (its own sandbox is the other guard), and no other local user can read it (a
private repository's source). :func:`snapshot` is the context manager that builds one and
removes it, read-only bits and all. Git runs hardened (:mod:`massgen_mcp.tools.git`).

Where copies go: ``<temp>/massgen-mcp-<uid>/<pid>-<start>/massgen-review-<hex>``. The first
folder is this user's alone (:func:`~massgen_mcp.core.files.private_folder`: 0700, refused
when another user, or a link, got there first); the second names the process that built the
copy (its pid, and its start so that a pid used again is not taken for it); both go with the
last copy in them. A builder killed outright (``kill -9``, a power cut) removes nothing, so
every build first removes the builders' folders whose process is gone (:func:`sweep`), and
leaves the live ones alone. On
Windows the first folder is ``%TEMP%\\massgen-mcp``, private by the ACL of the user's own temp
folder (the mode bits are only the read-only attribute there).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from massgen_mcp.core import portable
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import UnsafeFileError, private_folder, read_bytes_safely
from massgen_mcp.tools.git import (
    Git,
    GitFailed,
    OutputOverCap,
    check_git_files,
    filter_overrides,
    plain_parts,
    through_link,
)
from massgen_mcp.tools.workspace import is_hidden, withheld, withheld_content

MAX_FILE_BYTES = 1_000_000  # a source file; larger ones are data, left out
# The whole copy (under the 64 MiB a git child may print: the commit's files come as one
# stream).
MAX_TOTAL_BYTES = 50_000_000
MAX_FILES = 100_000
UNSAFE_NAME = "a name git would not check out (an empty, '.' or '..' part)"
# A crafted tree object may name a path twice, or as a file and as a folder: the first is
# copied (a conflicted merge's index lists a path once per stage too: its one working-tree
# file is copied once).
LISTED_TWICE = "named twice in the commit's tree (a crafted tree object)"
MISSING = "not in the repository (a partial clone's missing object)"
# A coding CLI's project settings: what a CLI working in the copy could load from it (hooks,
# MCP servers, a tool-discovery command, a model endpoint), each a way for the reviewed code
# to run a program or send the member's prompts elsewhere. The CLIs' flags already skip most
# (a trusted folder's .gemini/settings.json is the exception); the copy holds none anyway.
CLI_SETTINGS_DIRS = (".claude", ".codex", ".gemini", ".agents")
CLI_SETTINGS_FILES = (".mcp.json",)
# A builder's folder in the private one: its pid, and its start where it could be read
# (portable.process_started).
_BUILDER = re.compile(r"([0-9]+)(?:-([0-9]+))?")


@dataclass(frozen=True)
class Snapshot:
    """A built copy: its folder, and one ``(path, why)`` per tracked file left out."""

    path: Path
    left_out: tuple[tuple[str, str], ...]
    files: int
    bytes: int


def _refused(relative: str) -> str | None:
    path = PurePosixPath(relative)
    why = withheld(path)
    if why is not None:
        return why
    if is_hidden(path, CLI_SETTINGS_DIRS) or path.name.lower() in CLI_SETTINGS_FILES:
        return "a coding CLI's project settings"
    return None


def private_parent() -> Path:
    """This user's folder for snapshots in the temporary folder (see the module), made or
    checked; a :class:`ConfigError` naming the fix when what is there is not private."""
    if sys.platform == "win32":
        name, variable = "massgen-mcp", "TEMP"
    else:
        name, variable = f"massgen-mcp-{os.getuid()}", "TMPDIR"
    folder = Path(tempfile.gettempdir()) / name
    try:
        return private_folder(folder)
    except UnsafeFileError as exc:
        raise ConfigError(f"the review's snapshot is not made there: {exc} (or set "
                          f"{variable} to a folder of your own)") from None
    except OSError as exc:
        raise ConfigError(f"the review's snapshot cannot be made in {folder}: "
                          f"{exc.strerror or exc}") from None


def sweep(parent: Path) -> None:
    """Remove the copies in ``parent`` whose builder is gone (its pid ended, or is another
    process's now): a copy holds a repository's source, and nothing else would ever remove
    one whose builder was killed outright. A live builder's copies are left alone."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        found = _BUILDER.fullmatch(entry.name)
        if found is None or not entry.is_dir(follow_symlinks=False):
            continue
        started = None if found[2] is None else int(found[2])
        if not portable.still_running(int(found[1]), started):
            with contextlib.suppress(OSError):  # another build's sweep got there first
                _remove_tree(Path(entry.path))


def _new_folder() -> Path:
    """A new private folder ``massgen-review-<hex>`` in this process's folder under
    :func:`private_parent` (orphans swept first), as :func:`tempfile.mkdtemp` makes one but
    named with letters and digits only: a member quotes the name back in Markdown, where
    mkdtemp's ``_`` starts an emphasis and the name comes back without it."""
    pid = os.getpid()
    started = portable.process_started(pid)
    while True:
        parent = private_parent()
        sweep(parent)
        builder = parent / (str(pid) if started is None else f"{pid}-{started}")
        # FileNotFoundError: removed meanwhile with another copy, the last in it
        with contextlib.suppress(FileNotFoundError):
            with contextlib.suppress(FileExistsError):
                builder.mkdir(mode=0o700)
            folder = builder / f"massgen-review-{secrets.token_hex(6)}"
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o700)
                return folder


async def build(root: Path, commit: str | None = None) -> Snapshot:
    """Copy the tracked files of the repository at ``root`` (with ``commit``: of that
    commit) into a new read-only temporary folder; the caller removes it
    (:func:`remove`, or use :func:`snapshot`)."""
    check_git_files(root)  # a resumed run's repository is read again
    git = Git(root, await filter_overrides(root))
    folder = _new_folder()
    try:
        if commit is None:
            left_out, files, size = await _copy_worktree(git, root, folder)
        else:
            left_out, files, size = await _copy_commit(git, commit, folder)
        _make_read_only(folder)
    except BaseException:
        remove(folder)
        raise
    return Snapshot(folder, tuple(left_out), files, size)


async def _copy_worktree(git: Git, root: Path, folder: Path
                         ) -> tuple[list[tuple[str, str]], int, int]:
    out = await git.run("ls-files", "-z", "--cached", "--full-name", "-s")
    left_out: list[tuple[str, str]] = []
    files = total = 0
    seen: set[str] = set()
    for entry in out.rstrip(b"\n").split(b"\0"):
        if not entry:
            continue
        info, _, name = entry.partition(b"\t")
        relative = name.decode("utf-8", "surrogateescape")
        if relative in seen:  # stages 1, 2 and 3 of a conflicted merge: one file
            continue
        seen.add(relative)
        mode = info.split(b" ", 1)[0]
        why = _refused(relative) or {b"120000": "a link", b"160000": "a submodule"}.get(mode)
        source = root / relative
        if why is None and plain_parts(relative) is None:
            why = UNSAFE_NAME
        if why is None and through_link(root, relative):
            why = "reached through a link"
        if why is None and total >= MAX_TOTAL_BYTES:
            why = f"over the copy's {MAX_TOTAL_BYTES:,} bytes"
        data = b""
        if why is None:
            try:
                data = read_bytes_safely(source, min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - total))
            except UnsafeFileError as exc:
                why = (f"over {MAX_FILE_BYTES:,} bytes" if exc.reason == "too_big"
                       else str(exc).removeprefix(f"{source.name} "))
            except FileNotFoundError:
                continue  # deleted in the working tree: not on the reviewed side
            except OSError as exc:
                why = f"not readable ({exc.strerror})"
            else:
                why = withheld_content(data)
        if why is not None:
            left_out.append((relative, why))
            continue
        _write(folder, relative, data)
        files += 1
        total += len(data)
    return left_out, files, total


async def _copy_commit(git: Git, commit: str, folder: Path
                       ) -> tuple[list[tuple[str, str]], int, int]:
    out = await git.run("ls-tree", "-r", "-z", "--long", "--full-tree", commit)
    wanted: list[tuple[str, str]] = []  # (object id, path)
    left_out: list[tuple[str, str]] = []
    total = 0
    placed: set[str] = set()  # the files wanted so far
    folders: set[str] = set()  # and the folders above them
    for entry in out.rstrip(b"\n").split(b"\0"):
        if not entry:
            continue
        info, _, name = entry.partition(b"\t")
        mode, kind, oid, size = info.decode().split()
        relative = name.decode("utf-8", "surrogateescape")
        why = _refused(relative) or {"120000": "a link", "160000": "a submodule"}.get(mode)
        parts = plain_parts(relative)
        if why is None and parts is None:
            why = UNSAFE_NAME
        if why is None and not size.isdigit():  # ls-tree's "BAD": the blob is not here
            why = MISSING
        if why is None and parts is not None:
            above = {"/".join(parts[:i]) for i in range(1, len(parts))}
            if relative in placed or relative in folders or not above.isdisjoint(placed):
                why = LISTED_TWICE
            else:
                placed.add(relative)
                folders |= above
        if why is None and kind == "blob" and int(size) > MAX_FILE_BYTES:
            why = f"over {MAX_FILE_BYTES:,} bytes"
        if why is None and total + int(size) > MAX_TOTAL_BYTES:
            why = f"over the copy's {MAX_TOTAL_BYTES:,} bytes"
        if why is not None:
            left_out.append((relative, why))
            continue
        wanted.append((oid, relative))
        total += int(size)
    if len(wanted) > MAX_FILES:
        raise ConfigError(f"--commit: the commit holds {len(wanted):,} files; a snapshot "
                          f"copies at most {MAX_FILES:,}")
    try:
        blobs = await git.run("cat-file", "--batch",
                              stdin="".join(f"{oid}\n" for oid, _ in wanted).encode(),
                              cap=total + 200 * (len(wanted) + 1))
    except (GitFailed, OutputOverCap) as exc:
        raise ConfigError(f"--commit: the commit's files could not be read ({exc})") from None
    at = 0
    files = 0
    for _, relative in wanted:  # "<oid> blob <size>\n<content>\n", in the order asked
        end = blobs.index(b"\n", at)
        header = blobs[at:end].split()
        if len(header) != 3 or not header[2].isdigit():  # "<oid> missing": gone since
            raise ConfigError(f"--commit: {relative!r} could not be read from the "
                              f"repository ({blobs[at:end][:100].decode(errors='replace')})")
        length = int(header[2])
        data = blobs[end + 1:end + 1 + length]
        at = end + 1 + length + 1
        why = withheld_content(data)
        if why is not None:
            left_out.append((relative, why))
            total -= length
            continue
        _write(folder, relative, data)
        files += 1
    return left_out, files, total


def _write(folder: Path, relative: str, data: bytes) -> None:
    """Write ``relative`` as a new file under ``folder``, which must be where it lands: a
    name with an empty, ``.`` or ``..`` part is refused (callers leave those out first),
    each folder on the way is made here (never an existing link followed), and the file is
    created new without following a link (O_EXCL, O_NOFOLLOW)."""
    parts = plain_parts(relative)
    if parts is None:
        raise ConfigError(f"snapshot: {relative!r} is not a path inside the repository")
    parent = folder
    for part in parts[:-1]:
        parent = parent / part
        if parent.is_symlink():
            raise ConfigError(f"snapshot: {relative!r} is reached through a link")
        parent.mkdir(mode=0o700, exist_ok=True)
    target = parent / parts[-1]
    if not Path(os.path.realpath(target.parent)).is_relative_to(os.path.realpath(folder)):
        raise ConfigError(f"snapshot: {relative!r} lands outside the snapshot's folder")
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_BINARY", 0))
    with os.fdopen(os.open(target, flags, 0o600), "wb") as handle:
        handle.write(data)


def _make_read_only(folder: Path) -> None:
    """Owner-only and read-only, whatever the umask made: files 0400, folders 0500."""
    for current, dirs, names in os.walk(folder, topdown=False):
        for name in names:
            os.chmod(os.path.join(current, name), stat.S_IRUSR)
        for name in dirs:
            os.chmod(os.path.join(current, name), stat.S_IRUSR | stat.S_IXUSR)
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)


def remove(folder: Path) -> None:
    """Delete a snapshot (see :func:`_remove_tree`), then its builder's folder and the
    private one above when they hold nothing else: nothing is left in the temporary folder
    while no review runs."""
    _remove_tree(folder)
    if _BUILDER.fullmatch(folder.parent.name):
        with contextlib.suppress(OSError):  # another copy is in it
            folder.parent.rmdir()
            folder.parent.parent.rmdir()


def _remove_tree(folder: Path) -> None:
    """Delete ``folder``, its read-only bits taken off first (Windows will not delete a
    read-only file; POSIX will not delete inside a read-only folder); a link in it is
    removed, never followed (``os.chmod`` would change what it points to)."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(folder, stat.S_IRWXU)
        for current, dirs, names in os.walk(folder):
            for name in dirs:
                if not os.path.islink(path := os.path.join(current, name)):
                    os.chmod(path, stat.S_IRWXU)
            for name in names:
                if not os.path.islink(path := os.path.join(current, name)):
                    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        shutil.rmtree(folder)


@contextlib.asynccontextmanager
async def snapshot(root: Path, commit: str | None = None) -> AsyncIterator[Snapshot]:
    """:func:`build` a snapshot for the ``with`` block, removed when it ends."""
    built = await build(root, commit)
    try:
        yield built
    finally:
        remove(built.path)
