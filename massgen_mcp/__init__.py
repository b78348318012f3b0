"""massgen-mcp: a team of models answers, votes, and agrees on one answer.

Importing this package is cheap: neither fastmcp nor litellm is loaded until a server or a
model call needs it. ``run``/``arun`` (:mod:`massgen_mcp.api.python`) and ``register_with_litellm``
(:mod:`massgen_mcp.api.litellm_team`) load on first use.
"""

import os as _os
from typing import Any

from massgen_mcp._version import __version__
from massgen_mcp.core.errors import (
    ConfigError,
    MassgenError,
    ProviderError,
    SessionNotFoundError,
    SessionStateError,
)

# fastmcp's settings are pydantic-settings that read a ".env" in the working folder
# (FASTMCP_*): a cloned repository's .env would configure the server, FASTMCP_LOG_LEVEL=DEBUG
# logging every tool call's arguments. Only the project config that consent governs may, so
# the file is pointed at nothing before fastmcp is first imported (it reads the name at import),
# as load_litellm does for litellm's .env. A path the user set, absolute, stays theirs.
if not _os.path.isabs(_os.environ.get("FASTMCP_ENV_FILE", "")):
    _os.environ["FASTMCP_ENV_FILE"] = _os.devnull

__all__ = [
    "ConfigError",
    "MassgenError",
    "ProviderError",
    "SessionNotFoundError",
    "SessionStateError",
    "__version__",
    "arun",
    "register_with_litellm",
    "run",
]


def __getattr__(name: str) -> Any:
    """The Python API, imported when first used (it brings the service and pydantic models)."""
    if name in ("run", "arun"):
        from massgen_mcp.api import python as api

        return getattr(api, name)
    if name == "register_with_litellm":
        from massgen_mcp.api.litellm_team import register_with_litellm

        return register_with_litellm
    raise AttributeError(f"module 'massgen_mcp' has no attribute {name!r}")
