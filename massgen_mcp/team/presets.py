"""The presets shipped in ``configs/``, and how a config reference names one (``@name``).

A preset's name must be a plain file name (letters, digits, ``_`` and ``-``), so a reference
cannot reach outside the folder. A reference that names no file but is close to a preset's name
gets a hint, because ``fast_cheap`` for ``@fast_cheap`` is the common slip.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from massgen_mcp.core.errors import ConfigError


def presets_dir() -> Path:
    """Where the ``configs/`` presets live (inside the wheel, or the source checkout)."""
    here = Path(__file__).resolve().parent.parent  # the massgen_mcp package
    packaged = here / "_configs"
    return packaged if packaged.is_dir() else here.parent / "configs"


def resolve_config_path(ref: str) -> Path:
    """``@name`` names a preset in ``configs/``; anything else is a file path."""
    if not ref.startswith("@"):
        if not Path(ref).exists() and (hint := preset_hint(ref)):
            raise ConfigError(f"config file {ref!r} does not exist{hint}")
        return Path(ref)
    name = ref[1:]
    path = presets_dir() / f"{name}.yaml"
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", name) or not path.is_file():
        known = sorted(p.stem for p in presets_dir().glob("*.yaml"))
        raise ConfigError(f"config {ref!r}: no such preset; presets: "
                          + ", ".join(f"@{k}" for k in known))
    return path


def preset_hint(ref: str) -> str:
    """``"; did you mean '@fast_cheap' (a preset)?"`` when ``ref``, which names no file, is a
    preset's name without its ``@`` (or close to one), else ``""``."""
    if "/" in ref or "\\" in ref:
        return ""
    known = sorted(p.stem for p in presets_dir().glob("*.yaml"))
    close = difflib.get_close_matches(ref.removesuffix(".yaml"), known, n=1, cutoff=0.8)
    return f"; did you mean '@{close[0]}' (a preset)?" if close else ""
