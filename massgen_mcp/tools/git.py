"""Git as a child process, hardened for a repository nobody vetted.

A repository under review may be a clone of anyone's. Its ``.git/config`` (and files it
``include``s) can name programs that plain read commands run: ``core.fsmonitor`` (run by
``git diff`` and ``git ls-files`` to list changed files), ``diff.external`` and
``diff.<driver>.command`` (run instead of the built-in diff), ``diff.<driver>.textconv``
(run on each file's content), ``filter.<driver>.clean``/``process`` (run by ``git diff`` on
working-tree files whose stat data changed), ``pager.<command>`` and ``core.pager``, and, in a
partial clone, a lazy fetch of missing objects that runs ``core.sshCommand`` or a remote
helper. Every git command here therefore runs:

* with ``-c`` overrides (command-line config wins over the repository's):
  ``core.fsmonitor=false``, ``core.hooksPath=/dev/null``, ``diff.external=``,
  ``core.pager=cat``, ``protocol.allow=never`` (no transport at all, so no lazy fetch),
  ``safe.bareRepository=explicit`` (a bare repository planted inside the tree is not
  entered), ``core.attributesFile=`` (a file the config names for git to read, such as
  ``/dev/zero``, read until memory runs out), colour off, and for every
  ``filter.<driver>`` the repository's config defines, empty ``clean``/``smudge``/
  ``process`` commands (:func:`filter_overrides`; through ``--config-env`` for a driver
  named with ``=``, which ``-c`` splits at);
* by git's absolute path on ``PATH``, never one inside the folder under review
  (:func:`program`: Windows looks a bare ``git`` up in the current folder first);
* with ``--no-pager`` and ``--literal-pathspecs``, and the diff commands with
  ``--no-ext-diff --no-textconv``;
* in an environment without the caller's ``GIT_*`` variables (a ``GIT_DIR`` or
  ``GIT_EXTERNAL_DIFF`` of a hook that called us) or credentials (:func:`environment`),
  with ``GIT_CONFIG_NOSYSTEM=1`` (the machine's config is not read),
  ``GIT_NO_LAZY_FETCH=1``, ``GIT_TERMINAL_PROMPT=0`` and ``GIT_OPTIONAL_LOCKS=0`` (a read
  never rewrites the index);
* as a child with an owner, a timeout and a clean kill: spawned and ended through
  :func:`massgen_mcp.core.supervisor.run_child` (the coding CLIs' supervisor, on
  :mod:`massgen_mcp.core.children`), its output capped while it is read, so a 50 MB diff is
  never held whole.

The user's own global config (``~/.gitconfig``) is still read: it is theirs, and holds
``safe.directory`` and identity settings a review needs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from massgen_mcp.core.errors import ConfigError, ProviderError
from massgen_mcp.core.secrets import is_credential
from massgen_mcp.core.supervisor import OutputTooLarge, run_child

GIT_TIMEOUT_S = 30.0  # one git command on a large repository: far below this
MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # a listing (ls-files, ls-tree) of a very large tree

HARDENING = (
    "--no-pager",
    "--literal-pathspecs",  # a path is a path: a folder named "*" or ":(top)" is that folder
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "diff.external=",
    "-c", "core.pager=cat",
    "-c", "protocol.allow=never",
    "-c", "safe.bareRepository=explicit",
    "-c", "color.ui=false",
    "-c", "core.quotePath=true",
    # A file the repository's config names for git to read: /dev/zero (read whole, or as
    # one endless line) took gigabytes a second. diff.orderFile is diff's -O (DIFF_OPTIONS).
    "-c", "core.attributesFile=",
)
# The values of filter overrides given by "--config-env" (git 2.31+; an older git refuses
# the option rather than ignoring it), for driver names holding "=".
_VALUE_VARIABLES = {"": "MASSGEN_GIT_EMPTY", "false": "MASSGEN_GIT_FALSE"}
ENV = {"MASSGEN_GIT_EMPTY": "", "MASSGEN_GIT_FALSE": "false",
       "GIT_CONFIG_NOSYSTEM": "1", "GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0",
       "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat", "PAGER": "cat"}


class GitFailed(Exception):
    """Git exited with an error; ``stderr`` is its last words (for the caller to word)."""

    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr.strip() or f"git exited with status {code}")
        self.code = code
        self.stderr = stderr


class OutputOverCap(Exception):
    """Git printed more than the caller's cap; it was stopped there."""


def environment() -> dict[str, str]:
    """The caller's environment without its ``GIT_*`` variables and without credentials,
    plus :data:`ENV`. Git here reads and never fetches, so it needs no key, token or
    password; should a repository's config ever run a program despite :data:`HARDENING`,
    that program finds none (by name, ``*KEY*``, ``*TOKEN*``..., and by value: a registered
    key, a URL with a password, a known token shape: :func:`is_credential`, as for a coding
    CLI's child)."""
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("GIT_") and not is_credential(k, v)}
    env.update(ENV)
    return env


def program(cwd: Path) -> str:
    """The absolute path of the git to run, found on ``PATH`` alone and outside both
    ``cwd`` and the current folder: a bare ``"git"`` is looked up in the current folder
    first on Windows (and through a ``.`` entry of ``PATH`` anywhere), where the
    repository under review could have put a ``git.exe`` of its own."""
    found = shutil.which("git", path=os.environ.get("PATH", os.defpath))
    if found is None:
        raise ConfigError("git: not found on PATH; install git to review changes")
    where = Path(found).resolve()
    for folder in {cwd.resolve(), Path.cwd().resolve()}:
        if where.is_relative_to(folder):
            raise ConfigError(f"git: the git found on PATH ({where}) is inside {folder}, the "
                              "folder under review; put an installed git first on PATH")
    return str(where)


@dataclass(frozen=True)
class Git:
    """Git in the folder ``cwd``, with the hardening above and the repository's own filter
    drivers neutralised (``overrides``, from :func:`filter_overrides`)."""

    cwd: Path
    overrides: tuple[str, ...] = ()

    async def run(self, *args: str, stdin: bytes = b"", cap: int = MAX_OUTPUT_BYTES,
                  timeout_s: float = GIT_TIMEOUT_S) -> bytes:
        """Git's stdout for ``args``; :class:`GitFailed` on a non-zero exit,
        :class:`OutputOverCap` past ``cap`` bytes (git is then killed), a ConfigError when
        git is missing or takes longer than ``timeout_s``."""
        lines: list[bytes] = []
        total = 0

        def keep(line: bytes) -> None:
            nonlocal total
            total += len(line) + 1
            if total > cap:
                raise OutputOverCap
            lines.append(line)

        argv = [program(self.cwd), *HARDENING, *self.overrides, *args]
        try:
            async with asyncio.timeout(timeout_s):
                code, _, stderr = await run_child(argv, stdin, self.cwd, environment(),
                                                  on_line=keep)
        except TimeoutError:
            raise ConfigError(f"git {args[0]}: took more than {timeout_s:.0f} s in "
                              f"{self.cwd}; stopped") from None
        except OutputTooLarge:  # one line past the supervisor's own cap
            raise OutputOverCap from None
        except ProviderError:  # could not start
            raise ConfigError("git: not found on PATH; install git to review changes"
                              ) from None
        if code != 0:
            raise GitFailed(code, stderr.decode("utf-8", "replace"))
        # Lines come without their newline; git ends every output with one.
        return b"\n".join(lines) + b"\n" if lines else b""


async def filter_overrides(cwd: Path) -> tuple[str, ...]:
    """``-c`` (or ``--config-env``) options that empty every filter driver the
    repository's config defines (its ``include``s too): a driver's ``clean`` command is
    what ``git diff`` runs on a changed working-tree file. Reading config runs nothing."""
    try:
        out = await Git(cwd).run("config", "--includes", "--name-only", "-z",
                                 "--get-regexp", r"^filter\.")
    except GitFailed:  # status 1: no such key
        return ()
    names = out.decode("utf-8", "surrogateescape").split("\0")  # the bytes, round-trip
    drivers = {name.rsplit(".", 1)[0] for name in names
               if name.startswith("filter.") and name.count(".") >= 2}
    options: list[str] = []
    for driver in sorted(drivers):
        for key, value in (("clean", ""), ("smudge", ""), ("process", ""),
                           ("required", "false")):
            if "=" in driver:  # "-c K=V" splits at the first "=", "--config-env" at the last
                options.append(f"--config-env={driver}.{key}={_VALUE_VARIABLES[value]}")
            else:
                options += ["-c", f"{driver}.{key}={value}"]
    return tuple(options)


# Files of a repository's git folder that git reads whole (or as lines as long as they are)
# before any setting could stop it, in every command: ``/dev/zero`` linked there is read until
# memory runs out (gigabytes a second), a FIFO holds git to its timeout. Found by trying
# each with git 2.39 (info/grafts, shallow, packed-refs, info/exclude, index and config
# failed fast or were not read).
GIT_DIR_FILES = ("commondir", "objects/info/alternates", "info/attributes")
MAX_GIT_DIR_FILE_BYTES = 4_000_000


def check_git_files(start: Path) -> None:
    """Refuse, in one line, the repository ``start`` is in when one of its
    :data:`GIT_DIR_FILES` (in its git folder, and in the common folder ``commondir`` names)
    is not a small regular file. The git folder is found as git finds it (the first
    ``.git`` folder, or ``.git`` file's ``gitdir:``, from ``start`` up), by reading names
    only: git itself reads ``commondir`` before anything else. A repository nobody vetted
    (an archive's ``.git``, a shared folder) can hold such files; a clone cannot."""
    folder = start.absolute()
    for place in (folder, *folder.parents):
        dot_git = place / ".git"
        if dot_git.is_dir():
            git_dir = dot_git
            break
        if dot_git.is_file():
            pointer = _small_file(dot_git).decode("utf-8", "replace").strip()
            if not pointer.startswith("gitdir:"):
                return  # git refuses it itself
            git_dir = place / pointer.removeprefix("gitdir:").strip()
            break
    else:
        return  # not in a repository: git says so itself
    folders = [git_dir]
    if (git_dir / "commondir").exists() or (git_dir / "commondir").is_symlink():
        common = _small_file(git_dir / "commondir").decode("utf-8", "replace").strip()
        folders.append(git_dir / common)
    for where in folders:
        for name in GIT_DIR_FILES:
            _small_file(where / name)


def _small_file(path: Path) -> bytes:
    """The bytes of ``path`` when it is missing (b"") or a regular file (not a link) of at
    most :data:`MAX_GIT_DIR_FILE_BYTES`; else a ConfigError."""
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            why = "is not a regular file (a link, a FIFO, a device)"
        elif info.st_size > MAX_GIT_DIR_FILE_BYTES:
            why = f"is {info.st_size:,} bytes"
        else:
            with path.open("rb") as handle:
                return handle.read(MAX_GIT_DIR_FILE_BYTES)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        why = f"cannot be read ({exc.strerror})"
    raise ConfigError(f"repository: {path} {why}; git would read it whole (a link to "
                      "/dev/zero, a FIFO); remove it, or review another way (a patch)")


def plain_parts(relative: str) -> tuple[str, ...] | None:
    """The parts of a path git listed, or None when one is empty, ``.`` or ``..`` or the
    path is absolute (or, on Windows, holds a drive or a backslash): names git itself would
    not check out, which a crafted tree object can still hold."""
    parts = tuple(relative.split("/"))
    if any(part in ("", ".", "..") for part in parts):
        return None
    if os.name == "nt" and any("\\" in part or ":" in part for part in parts):
        return None
    return parts


def through_link(root: Path, relative: str) -> bool:
    """Whether the folder of ``root/relative`` is reached through a link (a tracked folder
    swapped for a link to elsewhere): its real path is not the one its name gives. A safe
    read refuses only a final link; this covers the folders above it."""
    parent = PurePosixPath(relative).parent.parts
    expected = os.path.join(os.path.realpath(root), *parent).rstrip(os.sep)
    return os.path.realpath((root / relative).parent) != expected
