"""The real MCP clients and the browser the tests drive: the npm packages of tests/clients
(``npm ci`` there), Debian's Chromium, and the command a client starts our stdio server with."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENTS = Path(__file__).parent / "clients"


def stdio_command() -> str:
    script = Path(sys.executable).parent / "massgen-mcp"
    command = str(script) if script.exists() else shutil.which("massgen-mcp")
    assert command is not None, "massgen-mcp is not installed"
    return command


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


PLAYWRIGHT = CLIENTS / "node_modules" / "playwright-core"


needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("MASSGEN_REQUIRE_BROWSER"),
    reason="install Debian's chromium to test the report in a real browser")


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp / 'profile'}",
         *args], capture_output=True, text=True, timeout=120)


