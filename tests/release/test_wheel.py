"""The wheel alone, installed in a fresh venv and run from a folder outside the checkout, is the
product: its command, its version, the files it reads at run time (presets, the early-reply
snapshot, the default-team table, the session view), an MCP conversation over stdio and a run
on a scripted team (tests/wheels.py says how the venv is made)."""

from __future__ import annotations

import json
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from mcp import Client as SdkClient
from mcp.client.stdio import StdioServerParameters

from massgen_mcp._version import __version__
from massgen_mcp.testing.scripted import agree
from tests.helpers import Scripted
from tests.servers import models_for
from tests.wheels import WheelVenv

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="the dependency view is made of symlinks"),
]

# What the product reads beside its modules at run time; each must be in the wheel.
RUNTIME_FILES = (
    "massgen_mcp/_configs/fast_cheap.yaml",
    "massgen_mcp/_configs/offline_embedded.yaml",
    "massgen_mcp/data/default_models.yaml",
    "massgen_mcp/data/eval_sample.jsonl",
    "massgen_mcp/server/early_replies.json",
    "massgen_mcp/server/session_view.html",
)


def test_the_wheel_holds_what_the_product_reads_and_says_one_version(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = Parser().parsestr(archive.read(
            f"massgen_mcp-{__version__}.dist-info/METADATA").decode())
    assert set(RUNTIME_FILES) <= names, set(RUNTIME_FILES) - names
    assert metadata["Version"] == __version__
    assert wheel.name == f"massgen_mcp-{__version__}-py3-none-any.whl"
    assert not any(name.startswith(("tests/", "docs/")) for name in names)


def test_the_installed_wheel_answers_from_outside_the_checkout(
        wheel_venv: WheelVenv, scripted: Scripted, home: Path) -> None:
    version = wheel_venv.run(home, "massgen-mcp", "--version")
    assert version.stdout.strip() == f"massgen-mcp {__version__}", version.stderr
    where = wheel_venv.run(home, "python", "-c",
                           "import json, massgen_mcp, importlib.metadata as m;"
                           "from massgen_mcp.server.handshake import load_snapshot;"
                           "print(json.dumps([massgen_mcp.__file__, m.version('massgen-mcp'),"
                           " load_snapshot() is not None]))")
    module, installed, early_replies = json.loads(where.stdout)
    assert Path(module).is_relative_to(wheel_venv.root), module  # the wheel's copy, not ours
    assert installed == __version__
    assert early_replies, "the wheel's early-reply snapshot does not match its own sources"

    preset = wheel_venv.run(home, "massgen-mcp", "validate", "@offline_embedded")
    assert preset.returncode == 0 and "3 agent(s)" in preset.stdout, preset.stderr

    server = scripted(agree)
    run = wheel_venv.run(home, "massgen-mcp", "run", "What is 6*7?", "--models",
                         ",".join(models_for(server)), "--quiet")
    assert run.returncode == 0 and run.stdout.startswith("Final: "), run.stderr


async def test_the_installed_wheel_serves_mcp_over_stdio(
        wheel_venv: WheelVenv, scripted: Scripted, home: Path) -> None:
    server = scripted(agree)
    params = StdioServerParameters(command=str(wheel_venv.bin / "massgen-mcp"), args=["serve"],
                                   env=wheel_venv.env(home), cwd=wheel_venv.outside)
    async with SdkClient(params, mode="legacy") as client:
        assert client.server_info is not None
        assert (client.server_info.name, client.server_info.version) == ("massgen", __version__)
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"run_consensus", "get_result", "review_changes"} <= tools
        done = await client.call_tool("run_consensus", {
            "question": "What is 6*7?", "models": models_for(server), "wait_s": 50})
    assert done.structured_content is not None
    assert done.structured_content["status"] == "completed", done.structured_content
    assert done.structured_content["result"]["final_answer"].startswith("Final: ")
