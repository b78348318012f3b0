"""The MCP Apps view of a session: one static HTML page that hosts render inline.

Hosts that support MCP Apps (extension ``io.modelcontextprotocol/ui``) see ``_meta.ui`` on
``get_result``, read :data:`VIEW_URI`, and run the page in a sandboxed iframe. The page holds
no session data: the host passes it the tool's input and result, and it asks the host for the
session's report resource, so the report has one renderer (:mod:`massgen_mcp.render.html`) whether
it is read from disk, from the live page or inline. Hosts without MCP Apps ignore the metadata.
"""

from __future__ import annotations

import functools
from pathlib import Path

from massgen_mcp._version import __version__
from massgen_mcp.render.html import CSS, DARK_COLOURS, LIGHT_COLOURS

VIEW_URI = "ui://massgen/session.html"

# The host may say which theme it shows; that overrides the OS preference the report follows.
_HOST_THEME_CSS = (f":root[data-theme=light]{{{LIGHT_COLOURS}}}"
                   f":root[data-theme=dark]{{{DARK_COLOURS}}}")


@functools.cache
def view_html() -> str:
    template = Path(__file__).with_name("session_view.html").read_text(encoding="utf-8")
    return (template.replace("/*CSS*/", CSS + _HOST_THEME_CSS)
            .replace("__VERSION__", __version__))
