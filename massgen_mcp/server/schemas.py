"""The tools' input schemas, for the MCP SDK's check of ``Mcp-Param-*`` headers.

On the 2026-07-28 HTTP transport the SDK checks every ``tools/call``'s ``Mcp-Param-*`` headers
against the called tool's input schema. Unless the server hands it a lookup, it finds that
schema by running a whole ``tools/list`` through the server first: every tool's schema built
and dereferenced, the middleware run, on every call. That was the largest share of a pool
front end's CPU per run (each run is at least two calls). Our tools are fixed once the server
is built and are the same for every caller, so the schemas are built once, the first time a
call asks, exactly as the listing gives them (dereferenced as fastmcp's listing middleware
does); tests/server compares them with a real client's listing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp import FastMCP


def serve_input_schemas(mcp: FastMCP) -> None:
    """Give the SDK a lookup of the tools' input schemas instead of a listing per call."""
    from fastmcp.tools import Tool
    from fastmcp.utilities.json_schema import dereference_refs

    schemas: dict[str, Mapping[str, Any] | None] = {}

    def input_schema(name: str) -> Mapping[str, Any] | None:
        if name not in schemas:
            # The local provider holds every tool (registered before the server serves).
            tool = mcp.local_provider._get_component(f"tool:{name}@")
            if not isinstance(tool, Tool):
                return None  # not ours: the call itself is refused as an unknown tool
            parameters = tool.parameters
            if "$defs" in parameters or _has_ref(parameters):
                parameters = dereference_refs(parameters)
            schemas[name] = parameters
        return schemas[name]

    mcp._mcp_server.get_tool_input_schema = input_schema


def _has_ref(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "$ref" in schema or any(_has_ref(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_ref(v) for v in schema)
    return False
