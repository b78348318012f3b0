"""Every install line in the docs is true today, or says what it needs.

The docs' install commands (in code: fenced blocks, inline code, the host entries' ``uvx``
arguments, the Claude Code plugin's entry) are found here and each must be in
:data:`INSTALL_LINES`, which says whether it is run (and where) or why not. A new line fails
this test until it is placed there. ``uvx massgen-mcp`` and ``pip install 'massgen-mcp[...]'``
need a release on PyPI, which massgen-mcp has not had yet: every page that shows one also shows
the form that works from a checkout or a built wheel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from massgen_mcp.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "skills" / "massgen-consensus" / "SKILL.md", ROOT / "llms.txt"]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")

CODE = re.compile(r"^```[^\n]*\n(.*?)^```|`([^`]+)`", re.MULTILINE | re.DOTALL)
# An install command and its arguments: flags, quoted requirements, paths and pins (a plain
# word ends it: "... for the offline model").
COMMAND = re.compile(r"(?:uv )?(?:pipx?) install"
                     r"(?: +(?:-[^\s`]+|'[^']*'|\"[^\"]*\"|[^\s`]*[./\[=<-][^\s`]*))*"
                     r"|uv tool install|uvx (?:--from \S+ )?massgen-mcp"
                     r"|claude mcp add [^#\n`]*")
UVX_ARGS = re.compile(r'"command": "uvx", "args": (\[[^\]]*\])|command = "uvx"\nargs = (\[[^\]]*\])'
                      r'|args"?:? ?=? ?(\["--from", "[^"]+", "massgen-mcp"\])')


class Line(NamedTuple):
    tested: bool
    how: str  # where it runs, or why it does not
    check: str = ""  # a text .ci/run must hold for a line it runs


RELEASE = "needs massgen-mcp on PyPI, which has no release yet"
INSTALL_LINES: dict[str, Line] = {
    'pip install -e ".[local]"': Line(True, ".ci/run: README command 1, literally, in a fresh "
                                      "venv on today's index; the embedded model answers",
                                      'readme_command 1'),
    'pip install -e ".[local,test]"': Line(True, ".ci/run: README command 2, literally, then "
                                           "the smoke subset; the pinned set with constraints",
                                           'readme_command 2'),
    'uv pip install -e ".[local]"': Line(True, ".ci/run: README's uv line, literally",
                                         "grep -m1 '^uv venv ' README.md"),
    "uv pip install --resolution lowest-direct": Line(
        True, ".ci/run: the lowest versions pyproject allows, then the smoke subset",
        "uv pip install -q --resolution lowest-direct"),
    "uv tool install": Line(True, ".ci/run: uv tool install of the built wheel, --version",
                            '"$TOOLS/uv" tool install'),
    "uvx --from PATH massgen-mcp": Line(True, ".ci/run: uvx --from the built wheel answers on "
                                        "the embedded model; --from the checkout, --version",
                                        '"$TOOLS/uvx" --from "$WHEEL[local]"'),
    "uvx --from /path/to/massgen-mcp massgen-mcp": Line(
        True, "as 'uvx --from PATH massgen-mcp'", '"$TOOLS/uvx" --from "$CHECKOUT"'),
    "uvx --from ${CLAUDE_PLUGIN_ROOT} massgen-mcp": Line(
        True, ".ci/run: the plugin's entry with this checkout as its root, --version",
        '"$TOOLS/uvx" --from "$CHECKOUT"'),
    'pip install -e ".[pool]"': Line(False, "not literally: CI's installs of .[local,test] "
                                     "hold the pool extra's packages (the test extra repeats "
                                     "them)"),
    'pip install -e ".[eval]"': Line(False, "not literally: CI's installs of .[local,test] "
                                     "hold the eval extra's packages"),
    "pip install 'massgen-mcp[local]'": Line(False, RELEASE + "; .ci/run installs the built "
                                             "wheel with [local] by pip and uvx"),
    "pip install 'massgen-mcp[pool]'": Line(False, RELEASE),
    "pip install 'massgen-mcp[eval]'": Line(False, RELEASE),
    "uvx massgen-mcp": Line(False, RELEASE + "; every entry that shows it gives the --from form"),
    "pipx install massgen-mcp": Line(False, RELEASE),
    "pipx install ./tools/massgen_mcp-*.whl": Line(False, "pipx is not installed here (GitHub's "
                                                   "runners have it); .ci/run installs the "
                                                   "same wheel with pip and uv"),
    "claude mcp add massgen -- uvx massgen-mcp": Line(False, RELEASE + ", and Claude Code"),
    "claude mcp add massgen -- uvx --from /path/to/massgen-mcp massgen-mcp": Line(
        False, "needs Claude Code; the command it writes is run by .ci/run (uvx --from)"),
    "claude mcp add massgen -- /path/to/.venv/bin/massgen-mcp": Line(
        False, "needs Claude Code; tests/system/test_host_e2e.py runs Claude Code headless "
               "through the installed script's entry that `install` writes"),
    'claude mcp add --transport http massgen http://127.0.0.1:8765/mcp --header '
    '"Authorization: Bearer $MASSGEN_MCP_TOKEN"': Line(
        False, "needs Claude Code; the HTTP server with a token is tested in "
               "tests/system/test_transports.py"),
    "pip install": Line(False, "the words in prose (what a user's pip does), not a command"),
    "pip install massgen==0.1.97 'mcp<2'": Line(False, "upstream MassGen for the benchmark's "
                                                "comparison (docs/performance.md), not ours"),
}


def install_lines() -> dict[str, set[str]]:
    """Each install command in the docs -> the pages that show it."""
    found: dict[str, set[str]] = {}
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8"))
    for entry in plugin["mcpServers"].values():
        found.setdefault(" ".join([entry["command"], *entry["args"]]), set()).add("plugin.json")
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in CODE.finditer(text):  # inline code may wrap: one line of it
            code = block.group(1) or re.sub(r"\s*\n\s*", " ", block.group(2))
            for command in COMMAND.findall(code):
                found.setdefault(command.strip(), set()).add(page.name)
        for entry in UVX_ARGS.finditer(text):
            args = json.loads(next(group for group in entry.groups() if group))
            found.setdefault(" ".join(["uvx", *args]), set()).add(page.name)
    return found


def test_every_install_line_in_the_docs_is_placed() -> None:
    found = install_lines()
    assert set(found) == set(INSTALL_LINES), (
        f"new: {sorted(set(found) - set(INSTALL_LINES))}; "
        f"gone: {sorted(set(INSTALL_LINES) - set(found))}")
    for command, line in INSTALL_LINES.items():
        if line.tested:
            assert line.check and line.check in CI, (command, line.check)


def test_each_page_with_a_line_that_needs_a_release_gives_todays_form() -> None:
    for command, pages in install_lines().items():
        if RELEASE not in INSTALL_LINES[command].how:
            continue
        for name in pages:
            page = next(p for p in PAGES if p.name == name)
            text = page.read_text(encoding="utf-8")
            assert re.search(r'pip install -e "\.\[|--from|before the first release|first '
                             r"release on PyPI|released on PyPI", text), (command, name)


def test_the_plugin_starts_the_server_from_its_own_folder() -> None:
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8"))
    assert plugin["mcpServers"]["massgen"] == {
        "command": "uvx", "args": ["--from", "${CLAUDE_PLUGIN_ROOT}", "massgen-mcp"]}


@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_install_uvx_from_writes_the_form_the_docs_show(
        host: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["install", host, "--print", "--uvx-from", str(ROOT)]) == 0
    out = capsys.readouterr().out
    args = ["--from", str(ROOT), "massgen-mcp"]
    assert (f"args = {json.dumps(args)}" in out if host == "codex"
            else json.loads(out.split("\n", 1)[1])["mcpServers"]["massgen"]["args"] == args)
