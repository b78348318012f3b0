"""massgen-mcp: a team of models answers, votes, and agrees on one answer.

Importing this package is cheap: neither fastmcp nor litellm is loaded until a server or a
model call needs it.
"""

from massgen_mcp.errors import (
    ConfigError,
    MassgenError,
    ProviderError,
    SessionNotFoundError,
    SessionStateError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "MassgenError",
    "ProviderError",
    "SessionNotFoundError",
    "SessionStateError",
    "__version__",
]
