"""The package version, in a module of its own so that anything may import it without
loading the package's public face (``massgen_mcp/__init__.py``)."""

__version__ = "0.1.0"
