"""The MCP server: tools and resources over the consensus service, stdio and HTTP."""
