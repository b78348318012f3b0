"""The environment a run sees: the process environment plus the working directory's ``.env``.

A ``.env`` file is read, never copied into ``os.environ``: a value it holds reaches exactly the
code that asks for it by name (a provider key, a ``${VAR}`` in a config), not every library and
child process. Real variables win over the file. The file is re-read only when it changes, and
every value it holds under a credential-like name is registered for redaction at once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from massgen_mcp.core.secrets import looks_secret, register_secret
from massgen_mcp.core.settings import SETTINGS

# The worker pool's Redis URL: a credential, so no child process (a coding CLI) inherits it.
POOL_URL_ENV = SETTINGS.redis_url.env
# ``${NAME}``: a reference to an environment variable in a config file.
VAR_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_cache: dict[Path, tuple[int, dict[str, str]]] = {}


def dotenv_values(path: Path | None = None) -> dict[str, str]:
    """``KEY=VALUE`` lines of ``.env`` (default: in the working directory); {} if none."""
    path = (path or Path.cwd() / ".env").resolve()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return {}
    cached = _cache.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, str] = {}
    for line in lines:
        match = _ENV_LINE.match(line)
        if not match or line.lstrip().startswith("#"):
            continue
        name, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[name] = value
        if looks_secret(name):
            register_secret(value)
    _cache[path] = (mtime, values)
    return values


def getenv(name: str) -> str | None:
    """The variable from the real environment, else from ``.env``; None if neither sets it."""
    if name in os.environ:
        return os.environ[name]
    return dotenv_values().get(name)


def user_config_dir() -> Path:
    """The user's own massgen-mcp folder (``~/.config/massgen-mcp`` on Linux): their default
    team, named teams, and the consent file live there."""
    import platformdirs

    return Path(platformdirs.user_config_dir("massgen-mcp"))
