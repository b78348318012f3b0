"""The MCP bundle for Claude Desktop (manifest.json, MCPB 0.4, ``server.type: "uv"``): the npm
``mcpb`` tool validates and packs it; the bundle holds what ``uv run`` needs to build and start
the server and nothing of the checkout's tests or tooling; the provider keys are sensitive,
optional settings that reach the server as its usual environment variables."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from massgen_mcp._version import __version__
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV
from massgen_mcp.server.app import create_server
from tests.npm_clients import CLIENTS

ROOT = Path(__file__).resolve().parents[2]
MCPB = CLIENTS / "node_modules" / ".bin" / "mcpb"

needs_mcpb = pytest.mark.skipif(
    not MCPB.exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
    reason="run 'npm ci' in tests/clients to check the bundle with mcpb")


def manifest() -> Any:
    return json.loads((ROOT / "manifest.json").read_text(encoding="utf-8"))


async def test_the_manifest_declares_the_keys_and_the_tools_the_server_has() -> None:
    data = manifest()
    assert (data["manifest_version"], data["version"]) == ("0.4", __version__)
    server = data["server"]
    assert server["type"] == "uv"
    assert server["mcp_config"]["command"] == "uv"
    assert server["mcp_config"]["args"][-2:] == ["massgen-mcp", "serve"]
    keys = {names[0] for names in PROVIDER_KEY_ENV.values()}
    env = server["mcp_config"]["env"]
    assert set(env) == keys
    for name, value in env.items():
        setting = data["user_config"][name.lower()]
        assert value == f"${{user_config.{name.lower()}}}"
        assert (setting["type"], setting["sensitive"], setting["required"]) == (
            "string", True, False)
    assert set(data["user_config"]) == {name.lower() for name in keys}
    async with Client(create_server()) as client:
        tools = [tool.name for tool in await client.list_tools()]
    assert [tool["name"] for tool in data["tools"]] == tools


@needs_mcpb
def test_mcpb_validates_and_packs_the_bundle(tmp_path: Path) -> None:
    checked = subprocess.run([str(MCPB), "validate", str(ROOT / "manifest.json")],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    bundle = tmp_path / f"massgen-mcp-{__version__}.mcpb"
    packed = subprocess.run([str(MCPB), "pack", str(ROOT), str(bundle)],
                            capture_output=True, text=True, timeout=300)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        packed_manifest = json.loads(archive.read("manifest.json"))
    assert {"manifest.json", "pyproject.toml", "README.md", "massgen_mcp/__main__.py",
            "massgen_mcp/_version.py", "configs/offline_embedded.yaml"} <= names
    tops = {name.split("/")[0] for name in names}
    assert tops == {"manifest.json", "pyproject.toml", "README.md", "CHANGELOG.md",
                    "massgen_mcp", "configs"}, tops
    assert not any("__pycache__" in name for name in names)
    assert packed_manifest == manifest()
