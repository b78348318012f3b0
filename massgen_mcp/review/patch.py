"""A patch a person gives (a file, stdin, or text): read within the review's limit and
checked against the repository before anything in it is believed.

A patch names its own paths, so it is untrusted input: a path that is absolute, holds
``..``, or leads out through a link is refused, and so is a change to a file that does
not exist (the patch was made against another branch). Only names are resolved; no file
the patch names is read. Collecting from git needs none of this
(:mod:`massgen_mcp.review.changes`).
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely
from massgen_mcp.review.diff import MAX_REVIEW_BYTES, FileDiff, check_diff_text, narrow
from massgen_mcp.tools.workspace import withheld


def given_patch(text: str) -> tuple[bytes, str]:
    """A patch given as text: its bytes, at most :data:`MAX_REVIEW_BYTES` (refused, not cut),
    checked as a file's are."""
    data = text.encode("utf-8", "surrogatepass")
    described = "the given patch"
    if len(data) > MAX_REVIEW_BYTES:
        raise ConfigError(f"patch: {described} is {len(data):,} bytes, more than the "
                          f"{MAX_REVIEW_BYTES:,} a review sends (refused, not cut); "
                          f"{narrow('patch')}")
    return check_diff_text(data, described), described


def read_patch(name: str, cwd: Path, stdin: BinaryIO | None) -> tuple[bytes, str]:
    """The bytes of the patch file ``name`` (``-``: stdin), at most :data:`MAX_REVIEW_BYTES`."""
    if name == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        data = stream.read(MAX_REVIEW_BYTES + 1)
        described = "the patch on stdin"
    else:
        path = cwd / name
        described = f"the patch {name}"
        try:
            data = read_bytes_safely(path, MAX_REVIEW_BYTES, follow_link=True)
        except UnsafeFileError as exc:
            if exc.reason == "too_big":
                raise ConfigError(f"patch: {described} is {exc.size or 0:,} bytes, more than "
                                  f"the {MAX_REVIEW_BYTES:,} a review sends (refused, not cut); "
                                  f"{narrow('patch')}") from None
            raise ConfigError(f"patch: {name!r} cannot be read ({exc}); give a regular "
                              "file") from None
        except FileNotFoundError:
            raise ConfigError(f"patch: {name!r} does not exist; give a patch file, or - to "
                              "read one from stdin") from None
        except OSError as exc:
            raise ConfigError(f"patch: {name!r} cannot be read ({exc.strerror})") from None
    if len(data) > MAX_REVIEW_BYTES:
        raise ConfigError(f"patch: {described} is more than {MAX_REVIEW_BYTES:,} bytes, more "
                          f"than a review sends (refused, not cut); {narrow('patch')}")
    return check_diff_text(data, described), described


def check_patch_paths(root: Path, sections: list[FileDiff]) -> None:
    """Refuse a patch that names a path outside ``root`` (``..``, absolute, through a link)
    or changes a file that does not exist there. Only names are resolved; no file is read."""
    for section in sections:
        for path in section.paths:
            where = inside(root, path, "patch")
            if withheld(PurePosixPath(path)):
                continue  # dropped by finish, named in its note
            if path == section.old and not where.is_file():  # the side it changes
                raise ConfigError(f"patch: it changes {path!r}, which does not exist in "
                                      f"{root}; check out the branch the patch was made "
                                      "against")


def inside(root: Path, path: str, field_name: str) -> Path:
    """``root / path`` when ``path`` is relative, without ``..``, and resolves (links
    followed) inside ``root``; else a ConfigError naming ``field_name``. The one rule for a
    patch's paths and for the paths a model's call names (:mod:`.start`)."""
    if (PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()
            or PureWindowsPath(path).drive or path.startswith("\\")):
        raise ConfigError(f"{field_name}: {path!r} is an absolute path; name files relative "
                          "to the repository (a patch's: a/..., b/...)")
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        raise ConfigError(f"{field_name}: {path!r} leaves the repository ('..'); name "
                          "files inside it")
    try:
        resolved = (root / path).resolve()
    except (OSError, RuntimeError):  # a link loop
        raise ConfigError(f"{field_name}: {path!r} is a link loop") from None
    if not resolved.is_relative_to(root):
        raise ConfigError(f"{field_name}: {path!r} leads outside the repository through a "
                          "link; name files inside it")
    return resolved
