"""The coding CLIs a user already has, at the versions they have: each binary is asked its
version and options once (cached in memory and in the user cache folder), gets the read-only
command line of its version, or is refused before any run in one line.

The real CLIs run at the pinned newest (tests/providers/test_cli_agents.py) and at a version at
least five months older (the ``*-old`` npm aliases in tests/clients/package.json), against the
scripted server on 127.0.0.1; their own vendor's key from the environment reaches each, and
no other. Stand-in binaries (small scripts) play versions too old to run and count probes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.core.records import RunStatus
from massgen_mcp.providers.cli import versions
from massgen_mcp.providers.cli.catalog import CLIS, look_for
from tests.coding_clis import (
    BIN,
    MODULES,
    STAND_IN_VERSION,
    _offered_tools,
    cli_team,
    marked_processes,
    needs_clis,
    run,
    tree_digest,
)
from tests.helpers import Scripted

# At least five months before the pinned newest (2.1.330 of 2026-11-20, 0.169.0 of 2026-11-13,
# 0.61.0 of 2026-09-25): 2026-06-19, 2026-06-05 and 2026-04-03, in a folder of their own
# (tests/clients/old: beside the newest, their platform packages would share names).
OLD_MODULES = MODULES.parent / "old" / "node_modules"
OLD = {"claude": (OLD_MODULES / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe",
                  "2.1.183"),
       "codex": (OLD_MODULES / "@openai" / "codex" / "bin" / "codex.js", "0.134.0"),
       "gemini": (OLD_MODULES / "@google" / "gemini-cli" / "dist" / "index.js", "0.34.0")}
NEWEST = {"claude": "2.1.330", "codex": "0.169.0", "gemini": "0.61.0"}
needs_old_clis = pytest.mark.skipif(
    not OLD["claude"][0].exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
    reason="the older coding-agent CLIs are not installed (npm ci in tests/clients/old)")
# Tools that only read what the CLI may see, or touch nothing: Codex before 0.169 always
# offers view_image (reads an image file, like read_file; no feature turns it off there) and
# update_plan (a plan shown in the conversation).
READ_ONLY_TOOLS = {"glob", "grep_search", "list_directory", "read_file", "request_user_input",
                   "view_image", "update_plan"}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user cache folder of the test's own, no version learned by an earlier test, and a
    home of its own (no login of the developer's; the ``user`` fixture sets one of its own)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(versions, "_learned", {})
    return tmp_path / "cache" / "massgen-mcp" / versions.CACHE_NAME


@needs_clis
@needs_old_clis
@pytest.mark.parametrize("name", ["claude", "codex", "gemini"])
@pytest.mark.slow
async def test_each_cli_five_months_older_answers_read_only(
        scripted: Scripted, user: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        name: str) -> None:
    path, version = OLD[name]
    monkeypatch.setenv(f"MASSGEN_{name.upper()}_PATH", str(path))
    found = await asyncio.to_thread(look_for, name)
    assert found is not None and (found.version, found.refused) == (version, None)

    server = scripted()
    before = tree_digest(user["project"])
    result, _folder, _store = await run(cli_team(server, (name,), ("a",)))

    assert result.status is RunStatus.COMPLETED, result.errors
    assert result.agents[name].status == "voted", result.agents[name].dropped_reason
    assert name in {a.agent_id for a in result.answers}
    # Read-only with the options this version has: no MCP server or hook of the user's ran,
    # no file changed, no tool that writes or runs offered, nothing left running.
    assert not user["marker"].exists()
    assert tree_digest(user["project"]) == before
    for req in server.requests:
        if req.model == f"scripted-{name}":
            assert _offered_tools(req.body) <= READ_ONLY_TOOLS, _offered_tools(req.body)
            assert "main.py" not in json.dumps(req.body)
    assert marked_processes(user["mark"]) == []


@needs_clis
@needs_old_clis
@pytest.mark.slow
async def test_the_newest_and_the_old_versions_are_told_apart_and_cached(
        user: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, (path, version) in OLD.items():
        new = await asyncio.to_thread(look_for, name)
        assert new is not None and (new.version, new.refused) == (NEWEST[name], None)
        monkeypatch.setenv(f"MASSGEN_{name.upper()}_PATH", str(path))
        old = await asyncio.to_thread(look_for, name)
        assert old is not None and (old.version, old.refused) == (version, None)
    entries = json.loads(versions.cache_path().read_text())  # in the user's home
    assert versions.cache_path().is_relative_to(user["home"])
    assert {entries[os.path.realpath(BIN["claude"])]["version"],
            entries[os.path.realpath(OLD["claude"][0])]["version"]} == {"2.1.330", "2.1.183"}
    # The newest has --restricted; 2.1.183 does not and gets --setting-sources "" instead.
    assert "--restricted" in entries[os.path.realpath(BIN["claude"])]["flags"]
    assert "--restricted" not in entries[os.path.realpath(OLD["claude"][0])]["flags"]
    assert not (user["home"] / ".gemini" / "projects.json").exists()  # probed in a private home


@needs_clis
@pytest.mark.parametrize("name", ["claude", "gemini"])
@pytest.mark.slow
async def test_each_cli_gets_its_own_vendors_key_from_the_environment(
        scripted: Scripted, user: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        name: str) -> None:
    """No key in the config and no base_url: the CLI finds its provider as in the user's
    shell (its base-URL variable, here the scripted server) and authenticates with its own
    vendor's key from the environment, never another vendor's. (Codex 0.169 has no such
    variable, only its config file, which it is told not to read: without a base_url it
    would go to api.openai.com, so its environment is checked by
    test_the_child_environment_keeps_the_login_and_drops_keys_and_nesting.)"""
    server = scripted()
    root = server.base_url.removesuffix("/v1")
    keys = {"claude": ("ANTHROPIC_API_KEY", "sk-ant-api03-" + "a" * 30),
            "codex": ("OPENAI_API_KEY", "sk-proj-" + "o" * 30),
            "gemini": ("GEMINI_API_KEY", "AIza" + "g" * 35)}
    for variable, value in keys.values():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", root)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", root)
    (user["project"] / ".env").unlink()
    team = cli_team(server, (name,), ("a",), cli_call_timeout_s=90)
    agents = [a.model_copy(update={"base_url": None}) if a.cli else a for a in team.agents]
    result, folder, _store = await run(team.model_copy(update={"agents": agents}))

    assert result.status is RunStatus.COMPLETED, result.errors
    assert result.agents[name].status == "voted", (
        result.agents[name].dropped_reason,
        (folder / "cli.log").read_text()[-3000:] if (folder / "cli.log").exists() else "")
    mine = keys[name][1]
    seen = [json.dumps(r.headers) for r in server.requests if r.model == f"scripted-{name}"]
    assert seen and all(mine in headers for headers in seen)
    others = [value for other, (_, value) in keys.items() if other != name]
    assert not [v for v in others for headers in seen if v in headers]


# -- versions too old, and the cache, with stand-in binaries ---------------------------------------

def stand_in(folder: Path, version_line: str, *, count: Path | None = None,
             environ: Path | None = None) -> Path:
    """A ``claude`` that prints ``version_line`` for --version and --help, appending a line
    to ``count`` and its environment to ``environ`` each time it is asked."""
    script = folder / "claude"
    body = [f"#!{sys.executable}", "import json, os, sys"]
    if count:
        body.append(f"open({str(count)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')")
    if environ:
        body.append(f"open({str(environ)!r}, 'w').write(json.dumps("
                    "{'env': dict(os.environ), 'cwd': os.getcwd()}))")
    body.append(f"print({version_line!r})")
    script.write_text("\n".join(body) + "\n")
    script.chmod(0o755)
    return script


def test_a_second_discovery_asks_no_binary_again_and_a_changed_one_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    count, environ = tmp_path / "asked", tmp_path / "environ.json"
    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(stand_in(tmp_path, STAND_IN_VERSION,
                                                           count=count, environ=environ)))
    monkeypatch.setenv("MASSGEN_CLIS", "claude")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + "x" * 30)
    monkeypatch.setenv("MASSGEN_REDIS_URL", "redis://:pool-pw-secret@127.0.0.1:6379")
    found = look_for("claude")
    assert found is not None and (found.version, found.refused) == ("2.1.330", None)
    assert count.read_text().splitlines() == ["--version", "--help"]
    # The probe had the environment a call has: no other vendor's key, not the pool's URL,
    # and an empty folder of its own to work in.
    seen = json.loads(environ.read_text())
    assert "OPENAI_API_KEY" not in seen["env"] and "MASSGEN_REDIS_URL" not in seen["env"]
    assert "massgen-cli-probe-" in seen["cwd"] and not Path(seen["cwd"]).exists()

    assert look_for("claude") is not None  # this process: from memory
    # Another process (a doctor): from the disk cache, the binary is not started.
    env = {k: v for k, v in os.environ.items() if k != "MASSGEN_REDIS_URL"}
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "doctor"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert "cli/claude 2.1.330 (not logged in" in done.stdout, done.stdout + done.stderr
    assert count.read_text().splitlines() == ["--version", "--help"]

    # An update rewrites the binary: asked again.
    stand_in(tmp_path, STAND_IN_VERSION.replace("2.1.330", "2.1.331"), count=count)
    found = look_for("claude")
    assert found is not None and found.version == "2.1.331"
    assert len(count.read_text().splitlines()) == 4


def test_a_version_too_old_is_refused_in_one_line_everywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.cli.main import main

    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(stand_in(tmp_path, "2.1.100 (Claude Code)")))
    monkeypatch.setenv("MASSGEN_CLIS", "claude")
    line = ("Claude Code 2.1.100 is older than 2.1.183, the oldest massgen-mcp runs read-only; "
            "update it: npm install -g @anthropic-ai/claude-code@latest")
    found = look_for("claude")
    assert found is not None and found.refused == line

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"cli/claude 2.1.100 (not logged in, {tmp_path / 'claude'}) REFUSED: {line}" in out

    config = tmp_path / "team.yaml"
    config.write_text("agents:\n  - id: cc\n    backend: {type: claude_code}\n"
                      "  - id: api\n    backend: {type: openai, model: gpt-4o-mini}\n")
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"warning: agent 'cc' (cli/claude): refused: {line}" in out

    # A run is refused before it starts: an input error naming the agent, no session folder.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + "x" * 30)
    code = main(["run", "--config", str(config), "What is 6*7?"])
    err = capsys.readouterr().err
    assert code != 0 and f"agent 'cc' (cli/claude): {line}" in err, err
    assert not any(home.rglob("config.json"))  # no session was recorded


def test_a_binary_that_gives_no_version_and_one_missing_an_option_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASSGEN_CLAUDE_PATH", str(stand_in(tmp_path, "claude, a wrapper")))
    found = look_for("claude")
    assert found is not None and found.version is None
    assert found.refused == (
        "Claude Code did not say its version ('claude --version' printed 'claude, a wrapper', "
        "exit status 0); massgen-mcp runs 2.1.183 or newer read-only; update it: npm install "
        "-g @anthropic-ai/claude-code@latest")

    # A version that lists neither --restricted nor --setting-sources could read the user's
    # hooks: refused, whatever its number.
    without = STAND_IN_VERSION.replace("--restricted ", "").replace("2.1.330", "2.2.0")
    stand_in(tmp_path, without)  # the same path, new contents
    found = look_for("claude")
    assert found is not None and found.refused is not None
    assert found.refused.startswith("Claude Code 2.2.0 lists no --restricted or "
                                    "--setting-sources option")


def test_each_cli_declares_a_tested_oldest_version_and_how_to_update() -> None:
    for name, (_path, version) in OLD.items():
        assert CLIS[name].oldest == version
        assert CLIS[name].package in {"@anthropic-ai/claude-code", "@openai/codex",
                                      "@google/gemini-cli"}
    manifest = json.loads((OLD_MODULES.parent / "package.json").read_text())["dependencies"]
    assert manifest == {CLIS[n].package: OLD[n][1] for n in OLD}


# -- Codex's features, and a cache that is not to be believed ----------------------------------

CODEX_OPTIONS = ("--json --ephemeral --skip-git-repo-check --sandbox --ignore-user-config "
                 "--ignore-rules --disable --config")
CODEX_OFF = ["shell_tool", "unified_exec", "apps", "plugins", "hooks", "browser_use",
             "computer_use", "view_image", "multi_agent", "goals", "memories"]


def codex_stand_in(folder: Path, version: str, features: list[str], *,
                   count: Path | None = None) -> Path:
    """A ``codex`` that says ``version``, lists Codex's options in ``exec --help`` and
    ``features`` in ``features list`` (in 0.169.0's format), counting each time it is asked."""
    script = folder / "codex"
    listed = "".join(f"{name:<40} stable             true\n" for name in features)
    body = [f"#!{sys.executable}", "import sys", "args = sys.argv[1:]"]
    if count:
        body.append(f"open({str(count)!r}, 'a').write(' '.join(args) + '\\n')")
    body += [f"if args == ['--version']: print('codex-cli {version}')",
             f"elif args == ['exec', '--help']: print({CODEX_OPTIONS!r})",
             f"elif args == ['features', 'list']: print({listed!r}, end='')"]
    script.write_text("\n".join(body) + "\n")
    script.chmod(0o755)
    return script


def codex_argv(found_version: str, features: list[str]) -> list[str]:
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.providers.cli.base import CliVersion

    found = CliVersion(found_version, frozenset(CODEX_OPTIONS.split()), frozenset(features))
    return CLIS["codex"].command(AgentSpec(id="c", model="cli/codex"), "s", Path("."), found, False)


def test_codex_is_refused_when_a_feature_it_should_have_is_not_listed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every feature massgen-mcp turns off is required where the tested versions have it: a
    list that lacks one (a new format, a version that renamed it) is refused, not run with it
    on. view_image is a feature from 0.169.0 on; 0.134.0 has none to turn off."""
    monkeypatch.setenv("MASSGEN_CODEX_PATH", str(codex_stand_in(tmp_path, "0.169.0",
                                                                 ["shell_tool"])))
    found = look_for("codex")
    assert found is not None and found.refused == (
        "Codex 0.169.0 lists no unified_exec feature, apps feature, plugins feature, hooks "
        "feature, browser_use feature, computer_use feature, multi_agent feature, goals "
        "feature, memories feature, view_image feature, which massgen-mcp needs to run it "
        "read-only (tested from 0.134.0); update it: npm install -g @openai/codex@latest")

    without_view_image = [f for f in CODEX_OFF if f != "view_image"]
    codex_stand_in(tmp_path, "0.169.0", without_view_image)
    found = look_for("codex")
    assert found is not None and found.refused is not None
    assert found.refused.startswith("Codex 0.169.0 lists no view_image feature,")
    codex_stand_in(tmp_path, "0.134.0", without_view_image)
    found = look_for("codex")
    assert found is not None and found.refused is None

    for version, features in (("0.169.0", CODEX_OFF), ("0.134.0", without_view_image)):
        argv = codex_argv(version, features)
        assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--disable"] == features


def test_a_version_cache_that_is_not_the_users_own_is_not_believed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """The red team's entry: the real binary's path, version 9.9.9, only shell_tool listed.
    Refused as it stands (the features are required); and from a cache file others can
    write, or one that is a link, not even read: the binary is asked again, and the cache
    written anew, 0600."""
    count = tmp_path / "asked"
    binary = codex_stand_in(tmp_path, "0.169.0", CODEX_OFF, count=count)
    monkeypatch.setenv("MASSGEN_CODEX_PATH", str(binary))
    real, info = os.path.realpath(binary), binary.stat()
    forged = {real: {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "version": "9.9.9",
                     "flags": CODEX_OPTIONS.split(), "features": ["shell_tool"]}}
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps(forged))
    cache.chmod(0o600)
    found = look_for("codex")
    assert found is not None and found.version == "9.9.9" and found.refused is not None
    assert "lists no unified_exec feature" in found.refused and not count.exists()

    for plant in ("writable", "link"):
        monkeypatch.setattr(versions, "_learned", {})
        cache.unlink()
        if plant == "writable":
            cache.write_text(json.dumps(forged))
            cache.chmod(0o666)
        else:
            (tmp_path / "forged.json").write_text(json.dumps(forged))
            (tmp_path / "forged.json").chmod(0o600)
            cache.symlink_to(tmp_path / "forged.json")
        found = look_for("codex")
        assert found is not None and (found.version, found.refused) == ("0.169.0", None)
        assert cache.stat().st_mode & 0o777 == 0o600 and not cache.is_symlink()
        assert json.loads(cache.read_text())[real]["version"] == "0.169.0"
    assert json.loads((tmp_path / "forged.json").read_text()) == forged  # not written through
    assert count.read_text().count("--version") == 2
