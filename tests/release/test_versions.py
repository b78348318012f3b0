"""One version, in massgen_mcp/_version.py: every release file that carries a version says the
same, and CHANGELOG.md keeps Keep a Changelog's shape."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from massgen_mcp._version import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "massgen_mcp/_version.py"


def test_every_release_file_says_the_same_version() -> None:
    def read(name: str) -> Any:
        return json.loads((ROOT / name).read_text(encoding="utf-8"))

    assert read(".claude-plugin/plugin.json")["version"] == __version__
    assert read("manifest.json")["version"] == __version__
    server = read("server.json")
    assert [server["version"], *(p["version"] for p in server["packages"])] == [
        __version__] * (1 + len(server["packages"]))
    assert read(".claude-plugin/marketplace.json")["metadata"]["version"] == __version__


def test_the_changelog_keeps_keep_a_changelog_shape() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    releases = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert releases and releases[0] == "[Unreleased]", releases
    for heading in releases[1:]:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", heading), heading
    kinds = set(re.findall(r"^### (.+)$", text, flags=re.MULTILINE))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
