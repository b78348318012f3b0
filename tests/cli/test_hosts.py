"""`massgen-mcp install`: each host's real format, merged, idempotent, backed up."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from massgen_mcp.cli.install import HOSTS, config_path, install, server_command, toml_section
from massgen_mcp.cli.main import main
from massgen_mcp.core.errors import ConfigError
from tests.coding_clis import BIN, needs_clis


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("APPDATA", str(home / "AppData"))
    return project, home


def servers_of(host_id: str, path: Path) -> dict[str, Any]:
    if HOSTS[host_id].key == "toml":
        servers: dict[str, Any] = tomllib.loads(path.read_text())["mcp_servers"]
        return servers
    servers = json.loads(path.read_text())[HOSTS[host_id].key]
    return servers


@pytest.mark.parametrize(("host_id", "scope"), [
    (h, s) for h in HOSTS for s in ("project", "user")
    if not (s == "project" and HOSTS[h].project_file is None)])
def test_install_merges_and_is_idempotent(dirs: tuple[Path, Path], host_id: str,
                                          scope: Literal["project", "user"]) -> None:
    project, home = dirs
    first = install(host_id, scope=scope, project=project, home=home)
    assert first.changed and first.backup is None and first.path.is_file()
    assert (project in first.path.parents) == (scope == "project")
    entry = servers_of(host_id, first.path)["massgen"]
    assert "massgen" in entry["command"] or entry["args"] == ["-m", "massgen_mcp"]
    # Another server and an unrelated setting survive a re-install; a backup is kept.
    if HOSTS[host_id].key == "toml":
        first.path.write_text('model = "o4"\n\n[mcp_servers.other]\ncommand = "x"\n\n'
                              + first.path.read_text())
    else:
        data = json.loads(first.path.read_text())
        data["theme"] = "dark"
        data[HOSTS[host_id].key]["other"] = {"command": "x"}
        data[HOSTS[host_id].key]["massgen"]["command"] = "stale"
        first.path.write_text(json.dumps(data))
    second = install(host_id, scope=scope, project=project, home=home)
    if HOSTS[host_id].key == "toml":
        assert not second.changed, "our table was already right; the rest is not ours"
    else:
        assert second.changed and second.backup and "stale" in second.backup.read_text()
    servers = servers_of(host_id, second.path)
    assert servers["other"] == {"command": "x"} and servers["massgen"] == entry
    third = install(host_id, scope=scope, project=project, home=home)
    assert not third.changed and third.backup is None
    if HOSTS[host_id].key == "toml":
        assert tomllib.loads(third.path.read_text())["model"] == "o4"
        assert entry["tool_timeout_sec"] == 120 and "OPENAI_API_KEY" in entry["env_vars"]
    else:
        assert json.loads(third.path.read_text())["theme"] == "dark"


def test_codex_replaces_only_its_own_table(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    path = project / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('[mcp_servers.massgen]\ncommand = "old"\n[mcp_servers.massgen.env]\n'
                    'A = "1"\n\n[mcp_servers.zzz]\ncommand = "keep"\n')
    result = install("codex", project=project, home=home)
    data = tomllib.loads(path.read_text())
    assert data["mcp_servers"]["zzz"] == {"command": "keep"}
    assert data["mcp_servers"]["massgen"]["command"] != "old"
    assert "env" not in data["mcp_servers"]["massgen"]
    assert result.backup is not None and "old" in result.backup.read_text()


def test_headless_hosts_get_what_they_need_and_approval_only_when_asked(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """codex exec answers without us unless the entry is required; what lets a model start
    paid runs unasked is written only with --approve-tools."""
    project, home = dirs
    codex = install("codex", project=project, home=home)
    entry = servers_of("codex", codex.path)["massgen"]
    assert entry["required"] is True and "default_tools_approval_mode" not in entry
    assert "--approve-tools" in codex.note
    gemini = install("gemini-cli", project=project, home=home)
    assert "trust" not in servers_of("gemini-cli", gemini.path)["massgen"]
    assert "GEMINI_CLI_TRUST_WORKSPACE=true" in gemini.note and "--scope user" not in gemini.note
    assert "--approve-tools" in gemini.note
    claude = install("claude-code", project=project, home=home)
    assert "--allowedTools mcp__massgen" in claude.note
    assert main(["install", "codex", "--approve-tools"]) == 0
    assert servers_of("codex", codex.path)["massgen"]["default_tools_approval_mode"] == "approve"
    assert main(["install", "gemini-cli", "--approve-tools"]) == 0
    assert servers_of("gemini-cli", gemini.path)["massgen"]["trust"] is True
    assert "paid runs on its own" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--allowedTools mcp__massgen"):
        install("claude-code", project=project, home=home, approve_tools=True)


def test_unreadable_files_are_clear_errors(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    (project / ".mcp.json").write_text("{not json")
    with pytest.raises(ConfigError,
                       match=r"\.mcp\.json is not JSON \(.* at character 2\); fix it or move"):
        install("claude-code", project=project, home=home)
    (project / ".mcp.json").write_text('{"mcpServers": []}')
    with pytest.raises(ConfigError, match="'mcpServers' is not an object"):
        install("claude-code", project=project, home=home)
    with pytest.raises(ConfigError, match="no project-level config; use --scope user"):
        install("claude-desktop", project=project, home=home)


def test_cli_print_changes_nothing(dirs: tuple[Path, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = dirs
    assert main(["install", "vscode", "--print", "--uvx"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {project / '.vscode' / 'mcp.json'}")
    assert json.loads(out.split("\n", 1)[1])["servers"]["massgen"] == {
        "type": "stdio", "command": "uvx", "args": ["massgen-mcp"]}
    assert not (project / ".vscode").exists()
    assert main(["install", "cursor"]) == 0
    assert "massgen added" in capsys.readouterr().out
    assert main(["install", "cursor"]) == 0
    assert "already up to date" in capsys.readouterr().out


def test_uvx_says_it_needs_a_release_and_uvx_from_points_at_a_checkout_or_a_wheel(
        dirs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`uvx massgen-mcp` starts the release on PyPI, and before the first one there is none:
    --uvx says so (on stderr with --print, whose stdout is the entry alone); --uvx-from PATH
    writes `uvx --from PATH massgen-mcp`, which starts today."""
    project, _ = dirs
    assert main(["install", "cursor", "--print", "--uvx"]) == 0
    captured = capsys.readouterr()
    assert "before its first release there it starts nothing" in captured.err
    assert "--uvx-from PATH" in captured.err and "--uvx-from" not in captured.out
    assert main(["install", "cursor", "--uvx"]) == 0
    assert "before its first release there it starts nothing" in capsys.readouterr().out

    checkout = Path(__file__).resolve().parents[2]
    assert main(["install", "vscode", "--uvx-from", str(checkout)]) == 0
    written = json.loads((project / ".vscode" / "mcp.json").read_text())
    assert written["servers"]["massgen"]["args"] == ["--from", str(checkout), "massgen-mcp"]
    assert "starts nothing" not in capsys.readouterr().out
    wheel = tmp_path / "massgen_mcp-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert server_command(False, str(wheel)) == ("uvx", ["--from", str(wheel), "massgen-mcp"])
    for wrong in (tmp_path / "missing", tmp_path, tmp_path / "other.whl"):
        assert main(["install", "codex", "--print", "--uvx-from", str(wrong)]) != 0
        said = capsys.readouterr().err.strip()
        assert said == (f"massgen-mcp: --uvx-from {wrong}: not a massgen-mcp checkout (a "
                        "folder with pyproject.toml) or a wheel built from one "
                        "(massgen_mcp-*.whl)")


@needs_clis
def test_codex_sees_the_project_server_once_the_folder_is_trusted_as_the_note_says(
        dirs: tuple[Path, Path]) -> None:
    """Codex ignores a project's .codex/config.toml in an untrusted folder, and says only
    "No MCP servers configured yet": the install note must carry the line that fixes it."""
    project, home = dirs
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    result = install("codex", project=project, home=home)
    trust = re.search(r"add (\[projects\.\"[^\"]+\"\] trust_level = \"trusted\") to "
                      r"~/\.codex/config\.toml", result.note)
    assert trust, result.note

    def listed() -> str:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home / ".codex")}
        return subprocess.run(["node", str(BIN["codex"]), "mcp", "list"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=60).stdout

    assert "massgen" not in listed()
    header, setting = trust.group(1).split("] ")
    (home / ".codex" / "config.toml").write_text(f"{header}]\n{setting}\n")
    assert re.search(r"^massgen +\S+massgen-mcp", listed(), re.MULTILINE)


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_a_private_config_stays_private_and_so_does_its_backup(
        dirs: tuple[Path, Path]) -> None:
    """A host's config that only its user may read (Claude Code's ~/.claude.json is 0600)
    was rewritten, and backed up, readable by every local user."""
    project, home = dirs
    path = home / ".claude.json"
    path.write_text(json.dumps({"oauthAccount": {"emailAddress": "me@example.com"}}))
    path.chmod(0o600)
    result = install("claude-code", scope="user", project=project, home=home)
    assert result.path == path and result.changed and result.backup is not None
    assert path.stat().st_mode & 0o777 == 0o600
    assert result.backup.stat().st_mode & 0o777 == 0o600


# -- existing host configs as anyone may have written them (issue 57, N8-N10) ------------------

def our_codex_entry() -> dict[str, Any]:
    """The Codex entry `install codex` writes on this machine, as TOML reads it."""
    command, args = server_command(False)
    entry: dict[str, Any] = tomllib.loads(toml_section(command, args))["mcp_servers"]["massgen"]
    return entry


def state_of(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (a link as what it points to), to show nothing changed."""
    return {str(p.relative_to(folder)): (f"-> {os.readlink(p)}" if p.is_symlink()
                                         else p.read_bytes() if p.is_file() else "folder")
            for p in sorted(folder.rglob("*"))}


# Every spelling TOML allows for an existing massgen entry (and sub-tables, and another server
# around it): each was left beside the new table, and Codex could not read the file.
EDITABLE_CODEX_ENTRIES = {
    "table": '[mcp_servers.massgen]\ncommand = "old"\n',
    "double quoted": '[mcp_servers."massgen"]\ncommand = "old"\n',
    "single quoted": "[mcp_servers.'massgen']\ncommand = \"old\"\n",
    "spaced": '[ mcp_servers . massgen ]\ncommand = "old"\n',
    "quoted parent": '["mcp_servers".massgen]  # ours\ncommand = "old"\n',
    "dotted at top": 'mcp_servers.massgen.command = "old"\nmcp_servers.other.command = "x"\n',
    "dotted under [mcp_servers]": ('[mcp_servers]\nother = { command = "x" }\n'
                                   'massgen.command = "old"\nmassgen.env.A = "1"\n'),
    "inline table": 'mcp_servers = { massgen = { command = "old" } }\n',
    "sub-table only": '[mcp_servers."massgen".env]\nA = "1"\n',
    "sub-tables apart": ('[mcp_servers.massgen]\ncommand = "old"\n\n# the z table\n[z]\nk = 1\n'
                         '\n[[mcp_servers.massgen.tools]]\nname = "t"\n'),
}


@pytest.mark.parametrize("spelling", EDITABLE_CODEX_ENTRIES)
def test_an_existing_codex_entry_in_any_spelling_is_replaced_by_exactly_ours(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], spelling: str) -> None:
    project, _ = dirs
    path = project / ".codex" / "config.toml"
    path.parent.mkdir()
    before = 'model = "o4"\n\n' + EDITABLE_CODEX_ENTRIES[spelling]
    path.write_text(before)
    old = tomllib.loads(before)
    assert main(["install", "codex"]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: massgen updated\n")
    after = tomllib.loads(path.read_text())  # Codex can read it
    assert after["mcp_servers"]["massgen"] == our_codex_entry()
    del old["mcp_servers"]["massgen"], after["mcp_servers"]["massgen"]
    assert after == old, "everything else is as it was"
    [backup] = path.parent.glob("config.toml.bak-*")
    assert backup.read_text() == before
    assert main(["install", "codex"]) == 0
    assert "already up to date" in capsys.readouterr().out


# Spellings a line-by-line edit cannot rewrite: refused with what to do, the file untouched
# (they got a second massgen table, invalid TOML, and "massgen added").
REFUSED_CODEX_ENTRIES = {
    "inline table with another server": (
        'mcp_servers = { massgen = { command = "old" }, other = { command = "x" } }\n'),
    "a dotted value over several lines": (
        '[mcp_servers]\nmassgen.command = "old"\nmassgen.args = [\n  "a",\n]\n'),
    "no entry, servers inline": 'mcp_servers = { other = { command = "x" } }\n',
}


@pytest.mark.parametrize("spelling", REFUSED_CODEX_ENTRIES)
def test_a_codex_entry_install_cannot_rewrite_is_refused_and_nothing_is_written(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], spelling: str) -> None:
    project, _ = dirs
    path = project / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(REFUSED_CODEX_ENTRIES[spelling])
    before = state_of(project)
    assert main(["install", "codex"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"{path}: install cannot edit its mcp_servers safely" in err
    assert "massgen-mcp install codex --print" in err
    assert state_of(project) == before
    assert main(["install", "codex", "--print"]) == 0
    assert "[mcp_servers.massgen]" in capsys.readouterr().out and state_of(project) == before


def test_install_says_whether_it_added_updated_or_left_the_entry(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """It said "massgen added" when it had replaced an entry that was there."""
    project, _ = dirs
    path = project / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}}))
    assert main(["install", "claude-code"]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: massgen added\n")
    data = json.loads(path.read_text())
    data["mcpServers"]["massgen"]["command"] = "stale"
    path.write_text(json.dumps(data))
    assert main(["install", "claude-code"]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: massgen updated\n")
    # Our entry as it should be, in the user's own layout: left as it is, not reformatted.
    compact = json.dumps(json.loads(path.read_text()), separators=(",", ":"))
    path.write_text(compact)
    assert main(["install", "claude-code"]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: already up to date\n")
    assert path.read_text() == compact and len(list(project.glob(".mcp.json.bak-*"))) == 1


posix = pytest.mark.skipif(os.name == "nt", reason="links, FIFOs and /dev/zero: POSIX")


@posix
@pytest.mark.parametrize("kind", ["symbolic", "hard"])
@pytest.mark.parametrize("host_id", ["claude-code", "codex"])
def test_a_linked_host_config_is_refused_never_copied(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], kind: str,
        host_id: str) -> None:
    """A cloned project's `.mcp.json` links to a file holding a secret: install replaced the
    link with a copy of that file (secret included), in the project and in its backup."""
    project, home = dirs
    secret = home / ("secret.toml" if host_id == "codex" else "secret.json")
    secret.write_text('token = "s3cret-value"\n' if host_id == "codex"
                      else '{"token": "s3cret-value"}')
    path = config_path(host_id, "project", project, home)
    path.parent.mkdir(exist_ok=True)
    (path.symlink_to if kind == "symbolic" else path.hardlink_to)(secret)
    before, secret_before = state_of(project), secret.read_text()
    assert main(["install", host_id]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert str(path) in err and "(nothing was written)" in err
    assert ("is a link" if kind == "symbolic" else "has other names (hard links)") in err
    assert f"massgen-mcp install {host_id} --print" in err
    assert state_of(project) == before and secret.read_text() == secret_before
    assert main(["install", host_id, "--print"]) == 0, "the way round it, as the line says"
    assert "massgen" in capsys.readouterr().out and state_of(project) == before


@posix
def test_a_linked_project_config_folder_is_refused(
        dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A cloned project's `.codex` links to the user's ~/.codex: a project install rewrote the
    user's own config there (and left its backup beside it)."""
    project, home = dirs
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "o4"\n')
    (project / ".codex").symlink_to(home / ".codex")
    before, theirs = state_of(project), state_of(home)
    assert main(["install", "codex"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"{project / '.codex'} is a link" in err and "--scope user" in err
    assert state_of(project) == before and state_of(home) == theirs
    assert main(["install", "codex", "--scope", "user"]) == 0, "the user's own: allowed"
    assert tomllib.loads((home / ".codex" / "config.toml").read_text())["model"] == "o4"


def run_install(project: Path, home: Path, host_id: str) -> subprocess.CompletedProcess[str]:
    """`massgen-mcp install HOST` as a user runs it, in ``project``, in at most 1 GiB of
    address space (a config read whole from /dev/zero must fail there, not take the
    machine)."""
    import resource

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    return subprocess.run([sys.executable, "-m", "massgen_mcp", "install", host_id],
                          cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(home)}, preexec_fn=cap_memory)


def sparse_file(path: Path) -> None:
    path.touch()
    os.truncate(path, 5 * 2**20)  # over a project's JSON cap (4 MiB), stored in no blocks


def deep_toml_key(path: Path) -> None:
    path.write_text(".".join(["k"] * 2000) + " = 1\n")  # tomllib's cost: the key's length²


HOSTILE_CONFIGS: dict[str, tuple[str, Callable[[Path], object], str]] = {
    "a link to /dev/zero": ("claude-code", lambda p: p.symlink_to("/dev/zero"), "is a link"),
    "a FIFO": ("claude-code", os.mkfifo, "is not a regular file"),
    "a folder": ("gemini-cli", Path.mkdir, "is not a regular file"),
    "a sparse file over the cap": ("cursor", sparse_file, "is over"),
    "JSON arrays nested 100,000 deep": (
        "claude-code", lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
        "nested deeper than 64 levels"),
    "JSON objects nested 100,000 deep": (
        "vscode", lambda p: p.write_text('{"a":' * 100_000 + "1" + "}" * 100_000),
        "nested deeper than 64 levels"),
    "TOML arrays nested 100,000 deep": (
        "codex", lambda p: p.write_text("a = " + "[" * 100_000 + "]" * 100_000),
        "nests too deep"),
    "TOML tables nested 100 deep": (
        "codex", lambda p: p.write_text("[" + ".".join(["t"] * 100) + "]\n"),
        "a key nests deeper than 64 levels"),
    "a TOML key of 2,000 parts": ("codex", deep_toml_key, "a key nests deeper than 64 levels"),
    "not UTF-8": ("claude-code", lambda p: p.write_bytes(b'{"a": "\xff"}'), "is not UTF-8"),
}


@posix
@pytest.mark.parametrize("case", HOSTILE_CONFIGS)
def test_a_hostile_host_config_gets_one_line_and_nothing_written(
        dirs: tuple[Path, Path], case: str) -> None:
    """/dev/zero gave a MemoryError traceback, deep nesting RecursionError tracebacks, and a
    FIFO hung install for ever."""
    project, home = dirs
    host_id, plant, says = HOSTILE_CONFIGS[case]
    path = config_path(host_id, "project", project, home)
    path.parent.mkdir(exist_ok=True)
    plant(path)
    before = state_of(project)
    done = run_install(project, home, host_id)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"massgen-mcp: {path}") and says in done.stderr, done.stderr
    assert state_of(project) == before
