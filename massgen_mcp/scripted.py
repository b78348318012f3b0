"""Moved to :mod:`massgen_mcp.testing.scripted`; this path keeps ``python -m
massgen_mcp.scripted`` and old imports working for one release."""

from massgen_mcp.testing.scripted import *  # noqa: F403
from massgen_mcp.testing.scripted import main

if __name__ == "__main__":
    main()
