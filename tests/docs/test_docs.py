"""The docs, the skill, llms.txt and plugin manifest follow their formats and point at what exists.

The README leads and the reference lives in docs/*.md, so a link is only as good as the file
and heading it names: every relative link of these pages must reach an existing file and, when
it names one, a heading of that file (GitHub's anchors).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "skills" / "massgen-consensus" / "SKILL.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(markdown: str) -> str:
    """The text outside fenced code blocks: a ``# comment`` in a shell block is no heading."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings (lower case, punctuation dropped, spaces to
    hyphens; a repeated heading gets -1, -2, ...)."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", prose(markdown), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in anchors:
            n += 1
            unique = f"{slug}-{n}"
        anchors.add(unique)
    return anchors


def broken_links(page: Path, text: str) -> list[str]:
    """Each relative link of ``text`` (read from ``page``) whose file or anchor does not exist."""
    broken = []
    for link in LINK.findall(prose(text)):
        if re.match(r"^[a-z]+:", link):
            continue  # https:, mailto: and the like are not ours to check offline
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target}")
        elif anchor and anchor not in github_anchors(target.read_text()):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    return broken


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
    assert len(LINK.findall(text)) >= 10
    assert broken_links(ROOT / "llms.txt", text) == []
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in LINK.findall(text)}
    assert set(PAGES[:-1]) - linked == set(), "llms.txt lists every docs page"


def test_every_relative_link_resolves() -> None:
    """README.md, docs/*.md and the skill: every relative link reaches a file and a heading."""
    assert len(PAGES) > 10
    broken = [f"{page.relative_to(ROOT)}: {problem}"
              for page in PAGES for problem in broken_links(page, page.read_text())]
    assert broken == []


def test_readme_contents_lists_every_docs_page() -> None:
    """The README leads: its contents reach every page of docs/."""
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in LINK.findall(readme)}
    pages = set((ROOT / "docs").glob("*.md"))
    assert pages and pages - linked == set()


def test_link_checker_catches_a_missing_file_and_a_missing_heading() -> None:
    page = ROOT / "docs" / "cli.md"
    assert broken_links(page, "[a](nowhere.md) [b](team.md#no-such-heading) [c](team.md)") == [
        f"nowhere.md: no file {ROOT / 'docs' / 'nowhere.md'}",
        "team.md#no-such-heading: no heading #no-such-heading in docs/team.md"]
    assert github_anchors("# A / B\n## Reading `show`\n```\n# not a heading\n```\n# A / B\n") == {
        "a--b", "reading-show", "a--b-1"}


def test_plugin_manifest_points_at_the_skill() -> None:
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == "massgen"
    for skill in plugin["skills"]:
        assert (ROOT / skill / "SKILL.md").is_file()
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"][0]["name"] == plugin["name"]


def test_docs_list_every_setting() -> None:
    """docs/config.md's settings table is the code's table (core/settings.py), row for row."""
    from massgen_mcp.core.settings import markdown_table

    assert markdown_table() in (ROOT / "docs" / "config.md").read_text()


def test_docs_has_a_contents_page_that_lists_every_page() -> None:
    """docs/ opens on its contents (GitHub shows a folder's README.md), and it reaches every
    page there."""
    contents = ROOT / "docs" / "README.md"
    linked = {(contents.parent / link.partition("#")[0]).resolve()
              for link in LINK.findall(contents.read_text())}
    assert set((ROOT / "docs").glob("*.md")) - {contents} - linked == set()


def test_development_states_no_test_count_that_goes_stale() -> None:
    """A count in the present tense is wrong after the next merge: the suite's line gives the
    command that counts them, and a measured figure says when."""
    text = (ROOT / "docs" / "development.md").read_text()
    suite = next(line for line in text.splitlines() if "# the whole suite" in line)
    assert not re.search(r"\d+ tests", suite), suite
    assert "pytest -q --collect-only -n 0 | tail -1" in text
    assert not re.search(r"whole suite, \d+ tests", text)


def test_the_pool_deploying_block_passes_the_front_ends_checks(tmp_path: Path) -> None:
    """docs/pool.md's Deploying block, as written (its exports, its serve line), gets a front
    end past every check of its settings: the process goes on to listen, which the test makes
    fail on a port it holds (exit 6), so nothing is served and no Redis is reached."""
    import os
    import secrets
    import shlex
    import socket
    import subprocess
    import sys

    text = (ROOT / "docs" / "pool.md").read_text()
    block = re.search(r"^## Deploying\n.*?^```bash\n(.*?)^```", text,
                      re.MULTILINE | re.DOTALL)
    assert block, "pool.md has its Deploying block"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASSGEN_", "FASTMCP_TASKS"))}
    serve: list[str] = []
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            words = words[1:]
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # NAME=VALUE, alone or before
            name, _, value = words.pop(0).partition("=")  # a command
            env[name] = secrets.token_urlsafe(32) if value == "..." else value
        if words[:2] == ["massgen-mcp", "serve"]:
            serve = words[2:]
    assert serve, "the block starts a front end"
    env["MASSGEN_HOME"] = str(tmp_path / "home")  # /shared/massgen is the reader's
    env["PYTHONPATH"] = str(ROOT)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "massgen_mcp", "serve", *serve,
                               "--port", str(port)], env=env, capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 6 and "already in use" in done.stderr, done.stderr


def test_the_exit_codes_in_help_are_the_codes_in_cli_md_and_in_the_code() -> None:
    """``massgen-mcp --help`` ends with the exit codes, docs/cli.md has their table: the same
    codes, and every code the command ends with (its EXIT_ constants and the closed pipe's)."""
    from massgen_mcp import __main__ as entry
    from massgen_mcp.cli import output
    from massgen_mcp.cli.main import build_parser

    help_text = build_parser().format_help()
    in_help = {int(n) for n in re.findall(r"^\s*(\d+)  \S", help_text.split("exit codes:")[1],
                                          re.MULTILINE)}
    section = (ROOT / "docs" / "cli.md").read_text().split("## Exit codes and errors")[1]
    in_docs = {int(n) for n in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    in_code = {value for name, value in vars(output).items()
               if name.startswith("EXIT_") and isinstance(value, int)}
    assert in_help == in_docs == in_code | {entry.EXIT_BROKEN_PIPE}


def test_hosts_md_shows_what_install_claude_code_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """docs/hosts.md's console block is what `install claude-code` prints, run by run (the
    project's path aside): a fresh install, then the same again."""
    from massgen_mcp.cli.main import main

    block = re.search(r"^```console\n(.*?)^```", (ROOT / "docs" / "hosts.md").read_text(),
                      re.MULTILINE | re.DOTALL)
    assert block, "hosts.md shows install's output"
    runs = re.findall(r"^\$ massgen-mcp install claude-code\n((?:[^$].*\n)+)", block.group(1),
                      re.MULTILINE)
    assert len(runs) == 2
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for shown in runs:
        assert main(["install", "claude-code"]) == 0
        printed = capsys.readouterr().out.replace(str(project.resolve()), "/home/me/project")
        assert printed == shown


def test_the_review_schema_in_the_docs_is_the_records() -> None:
    """docs/review-outcome.schema.json is what ``review --json`` prints under ``review``: a
    change to the record must change the documented schema with it (regenerate it with the
    snippet in docs/review.md)."""
    from massgen_mcp.core.outcomes import ReviewOutcome

    documented = json.loads((ROOT / "docs" / "review-outcome.schema.json").read_text())
    assert {k: v for k, v in documented.items() if k not in ("$schema", "$id")} == (
        ReviewOutcome.model_json_schema())
