"""A host's config file as install finds it: read once, bounded, never through a link.

Host configs are where a cloned project can plant something for install to trip on: a
``.mcp.json`` that is a link to a file holding a secret, a ``.codex`` folder linked to the
user's own ``~/.codex``, a link to ``/dev/zero``, a FIFO, or a file too large to parse in
seconds. So the config is read here, before any merge sees it: a project's linked config
folder is refused, and the file itself goes through :func:`massgen_mcp.core.files.open_safely`
(no link followed, a regular file with no other name, a size cap by scope and format), with
every refusal said in one line that names the file and the fix.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import MIB, UnsafeFileError, open_safely

Scope = Literal["project", "user"]


# The most a host's config may hold, by scope and format. A project's configs are files a
# cloned repository can ship (`.mcp.json`, `.codex/config.toml`): real ones are a few KiB, and
# the cap keeps the worst a planted one costs to seconds (256 KiB of the worst TOML found,
# parsed before and after the edit, took 1-7 s on a loaded 2-core machine; 4 MiB of
# `[0,0,...]` JSON about 4 s and 180 MB).
# The user's own files are larger: Claude Code keeps its history in ~/.claude.json, reported
# at 65-101 MB, and ~/.codex/config.toml lists every trusted project.
MAX_CONFIG_BYTES: dict[tuple[Scope, bool], int] = {  # (scope, is TOML)
    ("project", False): 4 * MIB, ("project", True): 256 * 1024,
    ("user", False): 512 * MIB, ("user", True): 16 * MIB,
}


def refuse_linked_folders(path: Path, project: Path) -> None:
    """A project's config folder (``.codex``, ``.vscode``, ...) that is a link is refused: a
    cloned project can point it at the user's own folder (``.codex`` at ``~/.codex``), and
    install would rewrite the user's config there. A user-scope folder may be a link
    (dotfiles managers make them). The write itself (``replace_file(...,
    folder_may_be_link=False)``) refuses a project's folder swapped for a link after this
    check."""
    for folder in path.parents:
        if folder == project or project not in folder.parents:
            return
        if folder.is_symlink():
            raise ConfigError(f"{folder} is a link, which install does not follow in a "
                              "project (a cloned project can plant one); replace it with a "
                              "folder, or install with --scope user (nothing was written)")


@dataclass(frozen=True)
class Existing:
    """A config as it was read: its text, and the permissions its rewrite keeps."""

    text: str
    mode: int  # its permissions, kept by the rewrite and the backup


def read_config(path: Path, host_id: str, max_bytes: int) -> Existing | None:
    """The config as it is (None when missing), read through :func:`open_safely`: never
    through a link, only a regular file with no other name, at most ``max_bytes``, and an
    open that cannot wait on a FIFO.

    A link is refused, not followed: the rewrite renames a new file over the config's name,
    so a followed link would become a plain copy of what it points to, in the project folder
    and in the backup (a link to a file holding a secret copies the secret). Writing through
    the link instead would let a cloned project choose which of the user's files is
    rewritten. A file with other names (hard links) is refused for the same reason. The
    permissions come from the open file, so a private config stays private."""
    by_hand = f"add the entry `massgen-mcp install {host_id} --print` shows by hand"
    try:
        with open_safely(path, max_bytes) as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    except UnsafeFileError as exc:
        why = {"link": "is a link, which install neither follows nor replaces (a cloned "
                       f"project can plant one to a file holding a secret); {by_hand} to "
                       "the file it points to",
               "not_regular": "is not a regular file (a device, a FIFO or a folder); move "
                              "it away and install again",
               "hard_links": "has other names (hard links), which a rewrite would split "
                             f"from it; {by_hand}",
               "too_big": f"is over {max_bytes} bytes, the limit for this host's config; "
                          "move it away and install again"}
        raise ConfigError(f"{path} {why.get(exc.reason, str(exc))} (nothing was written)"
                          ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}; fix its permissions "
                          "or move it") from None
    if len(data) > max_bytes:  # it grew since it was opened
        raise ConfigError(f"{path} is over {max_bytes} bytes, the limit for this host's "
                          "config; move it away and install again (nothing was written)")
    try:
        return Existing(data.decode("utf-8"), mode)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: byte {exc.start + 1} is not UTF-8; fix it or move it "
                          "away, then install again") from None
