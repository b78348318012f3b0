"""What a review never sends to a model, whichever face starts it: ``.massgen/`` (a project
config's inline ``api_key``, earlier sessions' answers) named as paths, the newer deny-list
names (``wg0.conf``, ``.flaskenv``), and a private key inside an ordinary file (red team,
round 5: R2 and R4). One rule decides (:func:`massgen_mcp.tools.workspace.withheld` and
:func:`~massgen_mcp.tools.workspace.withheld_content`), so each test below checks a canary
against everything the scripted server received, and that the run did reach it."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from massgen_mcp.testing.scripted import ScriptedServer
from tests.helpers import Scripted
from tests.review.conftest import git
from tests.review.reviewers import reviewers
from tests.review.test_cli import review_cli, sent, team

# A key with no vendor prefix (so no shape redaction), and an earlier session's answer.
CONFIG_KEY = "inline-c0nfig-key-7d41e9"
OLD_ANSWER = "earlier-answer-canary-38b2"
WG_KEY = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
FLASK_SECRET = "flaskenv-canary-91c3"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7pemcanary"
# Built here, so that this file is not itself a file holding a PEM block.
PEM = "\n".join(["-----BEGIN " + "PRIVATE KEY-----", PEM_BODY, "-----END PRIVATE KEY-----"])
MASSGEN_FILES = (".massgen/config.yaml", ".massgen/sessions/s1/answers/agent_a.txt")


@pytest.fixture
def records(repo: Path) -> Path:
    """``repo`` with a committed project config holding an inline key, and an earlier
    session's answer in its records folder."""
    (repo / ".massgen" / "sessions" / "s1" / "answers").mkdir(parents=True)
    (repo / ".massgen" / "config.yaml").write_text(
        "agents:\n  - id: a\n    backend: {type: openai, model: gpt-4o-mini, "
        f"api_key: {CONFIG_KEY}}}\n")
    (repo / MASSGEN_FILES[1]).write_text(f"the answer was {OLD_ANSWER}\n")
    git(repo, "add", ".massgen/config.yaml")
    git(repo, "commit", "-qm", "project config")
    return repo


def reached(server: ScriptedServer) -> str:
    """Everything the server got, after checking the review did reach it with the file
    that may be sent."""
    everything = sent(server)
    assert server.requests and "range(len(items) + 1)" in everything
    return everything


def test_the_cli_never_sends_massgen_files_named_as_paths(
        scripted: Scripted, records: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``massgen-mcp review .massgen/config.yaml ...``: the file is named, left out, and its
    key reaches no model (the folder, named whole, too)."""
    server = scripted(reviewers)
    monkeypatch.chdir(records)
    _, out, err = review_cli(capsys, *team(server), "--json", *MASSGEN_FILES, ".massgen",
                             "src/app.py")
    assert json.loads(out)["status"] == "completed", err
    everything = reached(server)
    assert CONFIG_KEY not in everything and OLD_ANSWER not in everything
    assert ("left out .massgen/config.yaml: version-control internals or massgen's records "
            "(its changes are never sent to a model)") in err


def test_the_python_api_never_sends_massgen_files_named_as_paths(
        scripted: Scripted, records: Path) -> None:
    from massgen_mcp.api import review

    server = scripted(reviewers)
    result = review(models=["openai/a", "openai/b", "openai/c"], base_url=server.base_url,
                    repo=records, paths=[*MASSGEN_FILES, "src/app.py"])
    assert result.review is not None
    everything = reached(server)
    assert CONFIG_KEY not in everything and OLD_ANSWER not in everything


async def test_the_mcp_tool_never_sends_massgen_files_named_as_paths(
        scripted: Scripted, records: Path) -> None:
    """A model's call names ``.massgen/config.yaml`` for a team on this machine (loopback:
    allowed to receive files a call picks): the key is withheld all the same."""
    from fastmcp import Client

    from massgen_mcp.server.app import create_server

    server = scripted(reviewers)
    async with Client(create_server(root=records)) as client:
        reply = await client.call_tool("review_changes", {
            "models": [f"openai/{m}@{server.base_url}" for m in "abc"], "wait_s": 50,
            "paths": [*MASSGEN_FILES, "src/app.py"]})
    assert reply.structured_content is not None
    assert reply.structured_content["status"] == "completed"
    everything = reached(server)
    assert CONFIG_KEY not in everything and OLD_ANSWER not in everything
    assert ("left out .massgen/config.yaml: version-control internals or massgen's records "
            "(its changes are never sent to a model)") in reply.structured_content["notes"]


def test_a_changed_wireguard_flask_or_key_holding_file_is_never_sent(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The working tree changes ``wg0.conf``, ``.flaskenv`` and a ``notes.txt`` that gains a
    PEM private key: none of them reaches a model, in the diff or through the tools, and
    each is named as left out."""
    names = ("wg0.conf", ".flaskenv", "notes.txt")
    for name in names:
        (repo / name).write_text("# placeholder\n")
    git(repo, "add", *names)
    git(repo, "commit", "-qm", "configs")
    (repo / "wg0.conf").write_text(f"[Interface]\nPrivateKey = {WG_KEY}\nListenPort = 51820\n")
    (repo / ".flaskenv").write_text(f"FLASK_APP=shop\nSECRET_KEY={FLASK_SECRET}\n")
    (repo / "notes.txt").write_text(f"# placeholder\nthe deploy key:\n{PEM}\n")
    server = scripted(reviewers)
    monkeypatch.chdir(repo)
    _, out, err = review_cli(capsys, *team(server), "--json")
    assert json.loads(out)["status"] == "completed", err
    everything = reached(server)
    for canary in (WG_KEY, FLASK_SECRET, PEM_BODY, "PRIVATE KEY"):
        assert canary not in everything, canary
    assert "left out wg0.conf: on the secret-file deny-list" in err
    assert "left out .flaskenv: on the secret-file deny-list" in err
    assert ("left out notes.txt: on the secret-file deny-list: it holds a private key (its "
            "changes are never sent to a model)") in err


def test_a_key_in_a_file_of_any_name_is_withheld_by_every_way_it_could_be_read(
        tmp_path: Path) -> None:
    """The content check is the tools' and the context files' too, not the diff's alone."""
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.team.context_files import Workspace
    from massgen_mcp.tools.workspace import WorkspaceTools

    (tmp_path / "notes.txt").write_text(f"keys:\n{PEM}\n")
    (tmp_path / "peer.ini").write_text(f"[Interface]\nprivatekey={WG_KEY}\n")
    (tmp_path / "ok.py").write_text("PrivateKey = load_key()\n")  # code, not a key
    tools = WorkspaceTools(tmp_path)
    for name in ("notes.txt", "peer.ini"):
        said = tools.run("read_file", {"path": name})
        assert said.startswith(f"error: {name!r} may hold secrets (on the secret-file "
                               "deny-list: it holds a private key)"), said
        with pytest.raises(ConfigError, match="holds a private key"):
            Workspace(tmp_path).read_context_files([name])
    assert tools.run("search_text", {"pattern": "PRIVATE|canary|privatekey"}) == "no matches"
    assert "load_key" in tools.run("read_file", {"path": "ok.py"})
    with pytest.raises(ConfigError, match=r"massgen's records"):
        (tmp_path / ".massgen").mkdir()
        (tmp_path / ".massgen" / "config.yaml").write_text(f"api_key: {CONFIG_KEY}\n")
        Workspace(tmp_path).read_context_files([".massgen/config.yaml"])


@pytest.mark.parametrize("name", [
    ".secrets.toml", "config/.secrets.toml", "wg0.conf", "wg-home.conf",
    "etc/wireguard/office.conf", "rclone.conf", ".config/rclone/rclone.conf", ".flaskenv",
    "pip.conf", ".config/pip/pip.conf", "keyfile.json", "firebase-adminsdk-x1y2z.json",
    "android/app/google-services.json", "settings.xml", ".m2/settings.xml",
    "gradle.properties", ".bash_history", ".python_history", ".psql_history",
    "private_key.txt", "private-key", ".flaskenv.bak", "WG0.CONF",
    ".massgen/config.yaml", ".MASSGEN/sessions/s1/result.json", ".git/config", ".hg/hgrc",
])
def test_the_newer_secret_names_are_withheld(name: str) -> None:
    from massgen_mcp.tools.workspace import withheld

    assert withheld(PurePosixPath(name)) is not None, name


@pytest.mark.parametrize("name", [
    "src/app.py", "docs/history.md", "history.py", "settings.py", "config.toml",
    "private_key_test.py", "wireguard.md", "massgen/config.yaml",
])
def test_ordinary_names_stay_visible(name: str) -> None:
    from massgen_mcp.tools.workspace import withheld

    assert withheld(PurePosixPath(name)) is None, name


@pytest.mark.parametrize("commit", [False, True])
async def test_the_repository_copy_holds_no_massgen_file_and_no_key(
        records: Path, commit: bool) -> None:
    """The copy a coding-CLI member reads follows the same rule: no ``.massgen/`` file, no
    file holding a private key, from the working tree or from a commit."""
    from massgen_mcp.tools.snapshot import snapshot

    (records / "notes.txt").write_text(f"keys:\n{PEM}\n")
    (records / "wg0.conf").write_text(f"[Interface]\nPrivateKey = {WG_KEY}\n")
    git(records, "add", "notes.txt", "wg0.conf")
    git(records, "commit", "-qm", "keys")
    head = git(records, "rev-parse", "HEAD").decode().strip() if commit else None
    async with snapshot(records, head) as built:
        copied = {p.relative_to(built.path).as_posix(): p.read_bytes()
                  for p in built.path.rglob("*") if p.is_file()}
    assert "src/app.py" in copied
    assert not any(CONFIG_KEY.encode() in data or PEM_BODY.encode() in data
                   or WG_KEY.encode() in data for data in copied.values())
    left_out = dict(built.left_out)
    assert left_out[".massgen/config.yaml"] == "version-control internals or massgen's records"
    assert left_out["notes.txt"] == "on the secret-file deny-list: it holds a private key"
    assert left_out["wg0.conf"] == "on the secret-file deny-list"
