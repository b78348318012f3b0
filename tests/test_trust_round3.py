"""Trust, round 3 (issue 47, items 1-4, 6 and 10): no project file leaves through
``context_files`` without consent, token shapes are masked, records are read as untrusted
input, a run's status always ends final, and no file in the working folder configures the
server but the project config.

The "foreign" endpoint is the one of :mod:`tests.test_consent`: a host that resolves nowhere,
reached through a scripted server acting as a proxy, so that every refusal is shown by the
requests that server did *not* get.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from massgen_mcp.core.errors import ConfigError, UntrustedConfigError
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.tools.workspace import WorkspaceTools, is_denied
from tests.helpers import Scripted
from tests.test_consent import FOREIGN_URL

GH_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
DB_PASSWORD = "Sup3r-s3cret-db-pw-9182"


def repo_with_secrets(tmp_path: Path) -> Path:
    """A project whose .git/config carries a token in its remote URL and whose ordinary
    config file carries a database password (the two files of the report)."""
    repo = tmp_path / "project"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(
        f'[remote "origin"]\n\turl = https://{GH_TOKEN}@github.com/o/r.git\n')
    (repo / ".git" / "credentials").write_text(f"https://u:{GH_TOKEN}@github.com\n")
    (repo / "config").mkdir()
    (repo / "config" / "database.yml").write_text(f"password: {DB_PASSWORD}\n")
    (repo / "README.md").write_text(f"Clone with https://{GH_TOKEN}@github.com/o/r\n")
    return repo


# -- 1. context_files ---------------------------------------------------------------------------

@pytest.mark.parametrize("files", [["config/database.yml"], ["README.md"]])
async def test_a_call_cannot_send_context_files_to_a_foreign_endpoint(
        tmp_path: Path, home: Path, files: list[str]) -> None:
    service = ConsensusService.local(home, Workspace(repo_with_secrets(tmp_path)))
    spec = RunSpec(question="q", models=[f"openai/a@{FOREIGN_URL}", "openai/b"],
                   context_files=files)
    with pytest.raises(UntrustedConfigError) as refused:
        await service.start(spec)
    assert f"agent 'agent_a' at {FOREIGN_URL} would receive the project's files " \
           "(context_files)" in str(refused.value)
    # The same through the call's base_url for every agent.
    via_base = RunSpec(question="q", models=["openai/a"], base_url=FOREIGN_URL,
                       context_files=files)
    with pytest.raises(UntrustedConfigError):
        await service.start(via_base)
    await service.aclose()


@pytest.mark.parametrize("name", [".git/config", ".git/credentials", ".git/HEAD",
                                  "sub/../.git/config", "./.git/config"])
def test_git_internals_are_never_context_files_of_a_call(tmp_path: Path, name: str) -> None:
    repo = repo_with_secrets(tmp_path)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "sub").mkdir()
    with pytest.raises(ConfigError, match="may hold secrets"):
        Workspace(repo).read_context_files([name])


def test_a_symlink_to_git_config_is_refused_by_what_it_leads_to(tmp_path: Path) -> None:
    repo = repo_with_secrets(tmp_path)
    (repo / "notes.txt").symlink_to(repo / ".git" / "config")
    with pytest.raises(ConfigError, match="may hold secrets"):
        Workspace(repo).read_context_files(["notes.txt"])


async def test_context_files_reach_a_loopback_team_with_tokens_masked(
        scripted: Scripted, tmp_path: Path, home: Path) -> None:
    server = scripted()
    service = ConsensusService.local(home, Workspace(repo_with_secrets(tmp_path)))
    spec = RunSpec(question="q", models=[f"openai/a@{server.base_url}"],
                   context_files=["README.md"])
    started = await service.start(spec)
    await service.wait(started.session_id, 30)
    await service.aclose()
    sent = "\n".join(json.dumps(r.body) for r in server.requests)
    assert "Clone with https://***@github.com/o/r" in sent and GH_TOKEN not in sent


@pytest.mark.parametrize("name", ["env.local", "wp-config.php", "appsettings.json",
                                  "appsettings.Production.json", "WP-CONFIG.PHP",
                                  "site/wp-config.php.bak", ".git/config", ".GIT/Config",
                                  "vendor/lib/.git/config", ".git/credentials",
                                  ".git/modules/sub/config"])
def test_the_deny_list_knows_the_leftover_names(name: str) -> None:
    assert is_denied(PurePosixPath(name)), name


@pytest.mark.parametrize("name", ["environment.local.md", "wp-config-sample.php",
                                  "appsettings.py", "docs/appsettings.md", "config",
                                  "src/config/app.yaml", "git/config", "local.env.md"])
def test_look_alikes_of_the_leftover_names_stay_readable(name: str) -> None:
    assert not is_denied(PurePosixPath(name)), name


def test_workspace_tools_do_not_read_the_leftover_names(tmp_path: Path) -> None:
    for name in ("env.local", "wp-config.php", "appsettings.json"):
        (tmp_path / name).write_text(f"DB_PASSWORD={DB_PASSWORD}\n")
    tools = WorkspaceTools(tmp_path)
    for name in ("env.local", "wp-config.php", "appsettings.json"):
        assert tools.run("read_file", {"path": name}).startswith("error: "), name
    assert DB_PASSWORD not in tools.run("search_text", {"pattern": "DB_PASSWORD"})


# -- 1. token shapes ----------------------------------------------------------------------------

TOKENS = [
    GH_TOKEN,
    "gho_" + "x" * 36, "ghu_" + "Y1" * 18, "ghs_" + "z9" * 18, "ghr_" + "Q" * 36,
    "github_pat_11ABCDEFG0123456789_" + "abcdefghij" * 5,
    "glpat-" + "Ab3_-x" * 4,
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxp-1234567890-abcdefghijkl",
    "AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A",
]


@pytest.mark.parametrize("token", TOKENS)
def test_well_known_token_shapes_are_masked(token: str) -> None:
    for text in (f"token={token}", f'{{"t": "{token}"}}', f"{token}\n", f"({token})"):
        assert token not in redact(text), text


@pytest.mark.parametrize(("url", "shown"), [
    (f"https://{GH_TOKEN}@github.com/o/r.git", "https://***@github.com/o/r.git"),
    ("https://0123456789abcdef0123456789abcdef@gitlab.example.com/x",
     "https://***@gitlab.example.com/x"),
    ("https://deadbeefcafe0123456789abcdef00112233:x-oauth-basic@github.com",
     "https://***@github.com"),
    ("https://x-access-token:s3cr3t-value@github.com/o", "https://x-access-token:***@github.com/o"),
    ("HTTPS://user:p%40ss@host/x", "HTTPS://user:***@host/x"),
    ("https://tok%3Avalue%40x@host/x", "https://***@host/x"),
    ("http://admin:S3c@r3t@10.0.0.5:8000/v1", "http://admin:***@10.0.0.5:8000/v1"),
])
def test_url_userinfo_is_masked_with_or_without_a_password(url: str, shown: str) -> None:
    assert redact(f"remote {url} end") == f"remote {shown} end"


def test_ordinary_text_keeps_its_at_signs_and_hashes() -> None:
    text = ("mail bob@example.com; see https://example.com/a?q=x@y; commit "
            "0123456789abcdef0123456789abcdef01234567; AKIA is a prefix; task-1234567890ab")
    assert redact(text) == text
