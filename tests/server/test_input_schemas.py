"""The input schemas the server hands the MCP SDK (for its ``Mcp-Param-*`` header check) are
the ones its ``tools/list`` gives, so the SDK no longer lists every tool on every call."""

from __future__ import annotations

from pathlib import Path

from fastmcp import Client

from massgen_mcp.server.app import create_server


async def test_the_lookup_gives_what_the_listing_gives(tmp_path: Path) -> None:
    mcp = create_server(root=tmp_path)
    lookup = mcp._mcp_server.get_tool_input_schema
    assert lookup is not None
    async with Client(mcp) as client:
        tools = await client.list_tools()
    assert tools
    for tool in tools:
        assert lookup(tool.name) == tool.input_schema, tool.name
    assert lookup("no_such_tool") is None
