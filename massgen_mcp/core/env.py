"""The environment a run sees: the process environment plus the working directory's ``.env``.

A ``.env`` file is read, never copied into ``os.environ``: a value it holds reaches exactly the
code that asks for it by name (a provider key, a ``${VAR}`` in a config), not every library and
child process. Real variables win over the file. The file is re-read only when it changes, and
every value it holds under a credential-like name is registered for redaction at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from massgen_mcp.core.errors import ConfigError
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


def expand_vars(text: str, where: str, *, read: Callable[[str, str], object] | None = None,
                credential_fix: Callable[[str], str] | None = None) -> str:
    """``text`` with each ``${NAME}`` replaced by :func:`getenv`'s value: the one reading of a
    ``${VAR}`` in a config, for a team's fields and an MCP server's ``env`` and ``headers``
    alike. An unset variable is a ConfigError naming ``where`` and the variable.

    The callers differ only in what a value may do next, so that is theirs to say. ``read``
    hears each ``(name, value)`` as it is read (to record where it went, or to register it
    for redaction). With ``credential_fix``, a credential-named variable is refused before it
    is read, the error ending with ``credential_fix(name)``: a field that is not a key
    would carry its value as plain text."""
    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if credential_fix is not None and looks_secret(name):
            raise ConfigError(f"{where}: ${{{name}}} looks like a credential; "
                              f"{credential_fix(name)}")
        value = getenv(name)
        if value is None:
            raise ConfigError(f"{where}: environment variable {name} is not set")
        if read is not None:
            read(name, value)
        return value
    return VAR_REFERENCE.sub(sub, text)


def user_config_dir() -> Path:
    """The user's own massgen-mcp folder (``~/.config/massgen-mcp`` on Linux): their default
    team, named teams, and the consent file live there."""
    import platformdirs

    return Path(platformdirs.user_config_dir("massgen-mcp"))
