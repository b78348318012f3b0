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
or holds NUL bytes, a diff over :data:`MAX_REVIEW_BYTES` (refused, never cut), a patch whose
paths leave the repository (``..``, absolute, through a link) or name files that do not
exist, and an empty diff ("nothing to review"). Files a model may not see
(:func:`massgen_mcp.tools.workspace.withheld`: the secret-file deny-list, ``.env``, keys,
credentials; anything under ``.git/`` or ``.massgen/``; and, by content, a section holding a
private key) never go to a model: their sections are dropped and named in
:attr:`Changes.left_out`; so are massgen-mcp's own records (:func:`is_records`, counted, not
named one by one) and binary files (those holding NUL bytes: git diffs every file as text, so
a change's ``.gitattributes`` cannot call a text file binary).

Git runs hardened (:mod:`massgen_mcp.tools.git`): the repository's config executes nothing.
The diff parser and its limits are :mod:`massgen_mcp.review.diff`; reading and checking a
person's patch is :mod:`massgen_mcp.review.patch`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely
from massgen_mcp.review.diff import (
    MAX_REVIEW_BYTES,
    FileDiff,
    check_diff_text,
    mark_binary,
    narrow,
    quote,
    split_diff,
)
from massgen_mcp.review.patch import check_patch_paths, given_patch, read_patch
from massgen_mcp.tools.git import (
    MAX_OUTPUT_BYTES,
    Git,
    GitFailed,
    OutputOverCap,
    check_git_files,
    filter_overrides,
    plain_parts,
    through_link,
)
from massgen_mcp.tools.workspace import withheld, withheld_content

# Why the repository's review rules leave the file at a path out, or None (review/rules.py).
Ignore = Callable[[str], str | None]
RECORDS = ".massgen"  # the records folder's name (the project's config sits in it too)
PROJECT_CONFIG = "config.yaml"
CONTEXT_LINES = 5  # lines of context around each change (git's default is 3)
DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-color", f"--unified={CONTEXT_LINES}",
                "--src-prefix=a/", "--dst-prefix=b/", "--no-relative", "-M",
                "--ignore-submodules=all",  # no child git in a submodule, with its config
                # The order file the repository's config names (diff.orderFile) is not read:
                # /dev/zero there is read whole, until memory runs out.
                "-O/dev/null",
                # Every file as text: the change's own .gitattributes ("-diff", "binary")
                # must not hide a text file as "Binary files differ"; a section with NUL
                # bytes is what is binary (mark_binary).
                "--text")


@dataclass(frozen=True)
class Changes:
    """The work under review.

    ``diff``: a unified diff with context, UTF-8 text, at most :data:`MAX_REVIEW_BYTES`,
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
    check_git_files(cwd)
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
                  patch_text: str | None = None, ignore: Ignore | None = None) -> Changes:
    """What to review, as the arguments name it (at most one of them; none: the working
    tree's changes against HEAD). ``patch`` is a file path or ``-`` (read from ``stdin``,
    default ``sys.stdin``); ``patch_text`` is a patch itself (the MCP tool's and the Python
    API's ``patch``: a caller that is a model or a program holds the diff, not a file);
    ``paths`` are files or folders, relative to ``cwd``. ``ignore``: why the repository's
    review rules leave a file out (:mod:`massgen_mcp.review.rules`), applied after the
    files a model may not see are dropped."""
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
            return _patch(root, *given_patch(patch_text), ignore)
        return await _collect(root, cwd, staged, base, commit, patch, paths, stdin, ignore)
    except GitFailed as exc:  # a FIFO at a tracked path, a blobless clone's missing blob...
        raise ConfigError(f"git: {git_said(exc)}; fix that in the repository (or review "
                          "another way: a patch, named files)") from None


async def _collect(root: Path, cwd: Path, staged: bool, base: str | None,
                   commit: str | None, patch: str | None, paths: Sequence[str],
                   stdin: BinaryIO | None, ignore: Ignore | None = None) -> Changes:
    git = Git(root, await filter_overrides(root))
    if patch is not None:
        return _patch(root, *read_patch(patch, cwd, stdin), ignore)
    if paths:
        return await whole_files(git, root, cwd, paths, ignore)
    head = await resolve(git, "HEAD", "HEAD", missing_ok=True)
    reviewed: str | None = None
    kind = "staged" if staged else "base" if base is not None else (
        "commit" if commit is not None else "worktree")
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
                          f"more than a review sends; {narrow(kind)}") from None
    if staged and not data.strip():
        raise ConfigError("--staged: nothing is staged; stage what to review (git add PATH), "
                          "or review the working tree's changes (no option)")
    sections = mark_binary(split_diff(data, described))
    check_diff_text(b"".join(b"".join(s.lines) for s in sections if not s.binary),
                    f"diff of {described}")
    changes = finish(root, described, sections, kind, ignore)
    return Changes(changes.root, changes.described, changes.diff, changes.files,
                   changes.left_out, commit=reviewed)


def _patch(root: Path, data: bytes, described: str, ignore: Ignore | None = None) -> Changes:
    sections = split_diff(data, described)
    check_patch_paths(root, sections)
    return finish(root, described, sections, "patch", ignore)


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


def is_records(path: str) -> bool:
    """Whether ``path`` (relative, '/'-separated) is inside a :data:`RECORDS` folder and
    not the project's config there: what massgen-mcp writes (records committed before the
    folder ignored itself, say) is never part of what a review reviews, nor of its size.
    (The config itself is withheld too, by :func:`~massgen_mcp.tools.workspace.withheld`: it
    may hold a key; it is named as left out rather than counted with the records.)"""
    parts = PurePosixPath(path).parts
    if RECORDS not in parts[:-1]:
        return False
    return not (parts[-1] == PROJECT_CONFIG and parts[-2] == RECORDS)


def finish(root: Path, described: str, sections: list[FileDiff], kind: str,
           ignore: Ignore | None = None) -> Changes:
    """The :class:`Changes` of ``sections``: massgen-mcp's records (:func:`is_records`)
    counted and dropped; the files a model may not see
    (:func:`~massgen_mcp.tools.workspace.withheld`: by either path of the section;
    :func:`~massgen_mcp.tools.workspace.withheld_content`: by what its lines hold), the files
    the repository's rules ``ignore`` and binary files dropped and named; the rest joined; an
    empty result refused (one that the rules emptied, in words of its own: not an approval),
    and one too large with the ways to narrow a review of ``kind`` (:func:`narrow`)."""
    kept: list[FileDiff] = []
    left_out: list[str] = []
    ignored = 0
    records = 0
    for section in sections:
        if any(is_records(p) for p in section.paths):
            records += 1
            continue
        why = next((w for p in section.paths if (w := withheld(PurePosixPath(p)))), None)
        if why is None and not section.binary and not section.skipped:
            why = withheld_content(b"".join(section.lines))
        rule = ignore(section.path) if why is None and ignore is not None else None
        if rule is not None:
            ignored += 1
            left_out.append(f"{section.path}: {rule}")
        elif why is not None:
            left_out.append(f"{section.path}: {why} (its changes are never sent to a model)")
        elif section.binary:
            left_out.append(f"{section.path}: binary (a diff shows no lines of it)")
        elif section.skipped:
            left_out.append(f"{section.path}: {section.skipped}")
        else:
            kept.append(section)
    if records:
        left_out.append(f"{RECORDS}/: {records} file(s) of massgen-mcp's own records (what "
                        "a run or review writes is never reviewed)")
    files = tuple(dict.fromkeys(s.path for s in kept if s.paths))
    diff = b"".join(b"".join(s.lines) for s in kept).decode("utf-8")
    if not files and ignored:
        raise ConfigError(f"review: nothing was reviewed, and this is not an approval: the "
                          f"repository's review rules ignore every file {described} changes "
                          f"that could be sent ({ignored} ignored); change review.ignore in "
                          ".massgen/config.yaml (review --explain-config shows the rules)")
    if not files:
        why = f" ({'; '.join(left_out)})" if left_out else ""
        raise ConfigError(f"diff: nothing to review: {described} changes no file that can "
                          f"be sent{why}")
    if len(diff.encode()) > MAX_REVIEW_BYTES:
        raise ConfigError(f"diff: {described} is {len(diff.encode()):,} bytes; the limit is "
                          f"{MAX_REVIEW_BYTES:,}; {narrow(kind)}")
    return Changes(root, described, diff, files, tuple(left_out))


async def whole_files(git: Git, root: Path, cwd: Path, names: Sequence[str],
                      ignore: Ignore | None = None) -> Changes:
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
        if withheld(PurePosixPath(relative)) or (ignore is not None and ignore(relative)):
            continue  # never read
        if plain_parts(relative) is None or through_link(root, relative):
            section.skipped = "reached through a link (not followed)"
            continue
        try:
            data = read_bytes_safely(root / relative, MAX_REVIEW_BYTES)
        except UnsafeFileError as exc:
            if exc.reason == "too_big":
                raise ConfigError(f"paths: {relative!r} is more than {MAX_REVIEW_BYTES:,} "
                                  f"bytes, more than a review sends; {narrow('paths')}"
                                  ) from None
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
        # Quoted as git quotes a name: a newline or an escape sequence in it stays plain text
        # in one header line, not a line of its own the model reads as the diff's.
        old, new = quote(f"a/{relative}"), quote(f"b/{relative}")
        header = (f"diff --git {old} {new}\nnew file\n--- /dev/null\n+++ {new}\n"
                  f"@@ -0,0 +1,{len(body)} @@\n")
        section.lines = [(header + "".join(f"+{line}\n" for line in body)).encode()]
    return finish(root, f"the files {', '.join(names)}", sections, "paths", ignore)
