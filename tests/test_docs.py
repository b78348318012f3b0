"""The skill, llms.txt and plugin manifest follow their formats and point at things that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def github_anchors(markdown: str) -> set[str]:
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_skill_frontmatter() -> None:
    path = ROOT / "skills" / "massgen-consensus" / "SKILL.md"
    text = path.read_text()
    front = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    assert front, "frontmatter"
    fields = dict(line.split(": ", 1) for line in front.group(1).splitlines())
    assert fields["name"] == path.parent.name
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", fields["name"])
    assert 1 <= len(fields["description"]) <= 1024 and "Use when" in fields["description"]
    assert len(text.splitlines()) < 500
    for tool in ("run_consensus", "get_status", "get_result", "cancel_session"):
        assert tool in text


def test_llms_txt_structure_and_links() -> None:
    text = (ROOT / "llms.txt").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# ") and lines[2].startswith("> ")
    anchors = github_anchors((ROOT / "README.md").read_text())
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), link
        if anchor:
            assert anchor in anchors, link


def test_plugin_manifest_points_at_the_skill() -> None:
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == "massgen"
    for skill in plugin["skills"]:
        assert (ROOT / skill / "SKILL.md").is_file()
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"][0]["name"] == plugin["name"]


def test_readme_lists_every_setting() -> None:
    """The README's settings table is the code's table (core/settings.py), row for row."""
    from massgen_mcp.core.settings import markdown_table

    assert markdown_table() in (ROOT / "README.md").read_text()
