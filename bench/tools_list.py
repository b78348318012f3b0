"""The size of the ``tools/list`` payload a host puts in its model's context
(``python bench/run.py --only tools_list``).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any


def bench_tools_list(quick: bool) -> dict[str, Any]:
    """Size of the tools/list payload a host puts in its model's context."""
    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    async def listed() -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            async with Client(create_server(home=Path(tmp)), mode="legacy") as client:
                return [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                        for t in await client.list_tools()]

    tools = asyncio.run(listed())
    chars = len(json.dumps(tools, separators=(",", ":")))
    # Claude Code and Codex turn each MCP tool into a function definition for their model:
    # name, description and input schema; the rest (annotations, _meta) stays in the host.
    in_context = len(json.dumps([{k: t[k] for k in ("name", "description", "inputSchema")}
                                 for t in tools], separators=(",", ":")))
    return {"tools": len(tools), "chars": chars, "tokens_approx": chars // 4,
            "model_context_chars": in_context, "target_chars": 13_000}  # the suite's budget


def print_tools_list(data: dict[str, Any]) -> None:
    print(f"\ntools/list: {data['tools']} tools, {data['chars']} characters "
          f"(~{data['tokens_approx']} tokens at 4 characters per token; target <= "
          f"{data['target_chars']}); name + description + input schema, what Claude Code and "
          f"Codex give their model: {data['model_context_chars']} characters")
