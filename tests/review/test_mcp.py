"""The review from an MCP host: ``review_changes`` and the ``review`` prompt, through the MCP
SDK's client and a real stdio server whose workspace is the client's root (the fixture
repository), the team a scripted model server over HTTP."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, ErrorData, ListRootsResult, Root, TextContent
from pydantic import FileUrl

from massgen_mcp.testing.scripted import ScriptedServer
from tests.helpers import Scripted
from tests.review.conftest import CANARY, DB_AFTER, git
from tests.review.test_cli import reviewer, sent, tool_results
from tests.servers import server_env

PROJECT = Path(__file__).parents[2]
INJECTION = ("- F1 src/db.py:2 [blocker, agreed, 2 of 3] SQL injection: the name is "
             "formatted into the query")
OFF_BY_ONE = "- F2 src/app.py:3-4 [major, agreed, 3 of 3] off-by-one"
NIT = "- U1 src/app.py:1 [nit, unconfirmed, 0 of 3] total has no docstring"


def stdio_server(home: Path, cwd: Path) -> StdioServerParameters:
    """``massgen-mcp`` over stdio as a host starts it, in a folder that is not the project:
    the client's root names the project."""
    cwd.mkdir(exist_ok=True)
    return StdioServerParameters(command=sys.executable, args=["-m", "massgen_mcp"], cwd=cwd,
                                 env=server_env(home, PYTHONPATH=str(PROJECT)))


def host(home: Path, cwd: Path, root: Path) -> Client:
    async def roots(context: ClientRequestContext) -> ListRootsResult | ErrorData:
        return ListRootsResult(roots=[Root(uri=FileUrl(root.as_uri()))])

    return Client(stdio_server(home, cwd), mode="legacy", list_roots_callback=roots)


def team(server: ScriptedServer) -> list[str]:
    return [f"openai/{m}@{server.base_url}" for m in "abc"]


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent), first
    return first.text


async def test_review_changes_returns_the_verdict_and_agreed_findings(
        scripted: Scripted, repo: Path, tmp_path: Path, home: Path) -> None:
    """The working tree of the client's repository, reviewed in one call: the text is the
    verdict and the agreed findings, structuredContent the result with its review; the
    .env's canary reaches no model, neither in the diff nor through the tools; get_result on
    the session gives the same text."""
    server = scripted(reviewer)
    async with host(home, tmp_path / "elsewhere", repo) as client:
        reply = await client.call_tool("review_changes", {
            "models": team(server), "focus": "security", "wait_s": 50})
        assert not reply.is_error, text(reply)
        said = text(reply)
        handle = reply.structured_content
        assert handle is not None and handle["status"] == "completed"
        session_id = handle["session_id"]
        lines = said.splitlines()
        assert lines[0].startswith(
            "Verdict: blocked: 2 agreed findings (1 blocker, 1 major), 1 unconfirmed, "
            "0 rejected; 2 of 3 members backed the winning review ")
        assert lines[1] == INJECTION and lines[2].startswith(OFF_BY_ONE)
        assert lines[3] == NIT
        assert lines[4].startswith("Dissent: agent_c: the off-by-one is real")
        assert f"Session {session_id}: completed" in said
        assert ("Note: left out .env: on the secret-file deny-list (its changes are never "
                "sent to a model).") in lines
        assert lines[5].startswith("Coverage: 2 files, 4 of 4 changed lines (100%)")
        assert len(lines) <= 10, said  # a few lines: the review itself is structuredContent
        review = handle["result"]["review"]
        assert review["verdict"] == "blocked" and review["threshold"] == "major"
        assert [(f["file"], f["severity"]) for f in review["findings"]] == [
            ("src/db.py", "blocker"), ("src/app.py", "major")]
        assert review["findings"][0]["fix"] == "pass the name as a parameter"
        assert [d["agent_id"] for d in review["dissent"]] == ["agent_c"]

        again = await client.call_tool("get_result", {"session_id": session_id})
        assert not again.is_error, text(again)
        assert text(again) == "\n".join(line for line in lines if not line.startswith("Note:"))
        assert again.structured_content is not None
        assert again.structured_content["review"] == review
    everything = sent(server)
    assert CANARY not in everything
    assert "focus on: security" in everything
    reads = [r for r in server.requests if tool_results(r)]  # agent a's tools: at the repo
    assert any(DB_AFTER.splitlines()[1].strip() in tool_results(r)[0] for r in reads)
    request = json.loads((home / "sessions" / session_id / "request.json").read_text())
    assert request["workspace"] == str(repo.resolve())  # the client's root, not the cwd
    assert request["review"]["described"] == "the working tree against HEAD"


async def test_a_pull_requests_diff_given_as_patch(scripted: Scripted, repo: Path,
                                                   tmp_path: Path, home: Path) -> None:
    """``patch``: the text of a diff (``gh pr diff``), reviewed against the checkout."""
    server = scripted(reviewer)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "defects")
    patch = git(repo, "diff", "HEAD~1", "HEAD").decode()
    git(repo, "checkout", "-q", "HEAD~1")
    async with host(home, tmp_path / "elsewhere", repo) as client:
        reply = await client.call_tool("review_changes", {
            "patch": patch, "models": team(server), "fail_on": "blocker", "wait_s": 50})
    assert not reply.is_error, text(reply)
    assert INJECTION in text(reply) and OFF_BY_ONE in text(reply)
    assert reply.structured_content is not None
    review = reply.structured_content["result"]["review"]
    assert review["threshold"] == "blocker" and review["verdict"] == "blocked"
    assert CANARY not in sent(server)


async def test_what_a_model_may_not_point_at_is_refused_naming_the_field(
        repo: Path, tmp_path: Path, home: Path) -> None:
    """A model's arguments stay inside the client's repository: each refusal is one tool
    error that names the field, and no run starts."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    (repo / "link").symlink_to(outside, target_is_directory=True)
    model = ["openai/a@http://127.0.0.1:9/v1"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"patch": "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"},
         "patch: '../../etc/passwd' leaves the repository"),
        ({"patch": "--- a/link/passwd\n+++ b/link/passwd\n@@ -1 +1 @@\n-a\n+b\n"},
         "patch: 'link/passwd' leads outside the repository through a link"),
        ({"patch": "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"},
         "patch: '/etc/passwd' is an absolute path"),
        ({"paths": [str(repo / "src" / "app.py")]}, "is an absolute path; name files "
                                                    "relative to the repository"),
        ({"paths": ["../outside/passwd"]}, "paths: '../outside/passwd' leaves the "
                                           "repository"),
        ({"paths": ["link/passwd"]}, "paths: 'link/passwd' leads outside the repository "
                                     "through a link"),
        ({"staged": True, "base": "main"}, "base: give one of staged, base, commit, patch "
                                           "or paths, not staged and base"),
        ({"commit": "--output=x"}, "commit: '--output=x' is not a ref"),
        ({"options": {"timeout_s": -1}}, "options.timeout_s: "),
        ({"fail_on": "critical"}, "fail_on"),
    ]
    async with host(home, tmp_path / "elsewhere", repo) as client:
        for args, says in cases:
            reply = await client.call_tool("review_changes", {"models": model, **args})
            assert reply.is_error, args
            assert says in text(reply), (args, text(reply))
            assert "Traceback" not in text(reply)
    for root, says in ((repo / "src", f"repository: the workspace {(repo / 'src').resolve()} "
                                      f"is inside the repository {repo.resolve()}"),
                       (outside, "is not a git repository")):
        async with host(home, tmp_path / "elsewhere", root) as client:
            reply = await client.call_tool("review_changes", {"models": model})
        assert reply.is_error and says in text(reply), text(reply)
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


async def test_the_review_prompt_lists_and_renders(repo: Path, tmp_path: Path,
                                                   home: Path) -> None:
    async with host(home, tmp_path / "elsewhere", repo) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert {"review", "consensus"} <= set(prompts)
        assert {a.name for a in prompts["review"].arguments or []} == {"change", "focus"}
        assert not any(a.required for a in prompts["review"].arguments or [])
        rendered = await client.get_prompt("review", {"change": "the branch against main",
                                                      "focus": "error handling"})
        plain = await client.get_prompt("review", {})
    content = rendered.messages[0].content
    assert isinstance(content, TextContent)
    assert "review_changes" in content.text and "this change: the branch against main" \
        in content.text and "focus on: error handling" in content.text
    plain_content = plain.messages[0].content
    assert isinstance(plain_content, TextContent)
    assert "the working tree's changes against HEAD" in plain_content.text


@pytest.mark.usefixtures("task_clients")
async def test_review_changes_as_an_mcp_task(scripted: Scripted, repo: Path) -> None:
    """``serve --tasks``: a client that asks for a task gets the finished review as its
    result, as for run_consensus."""
    from fastmcp import Client as FastMCPClient
    from fastmcp_tasks import call_tool_task

    from massgen_mcp.server.app import create_server

    server = scripted(reviewer)
    async with FastMCPClient(create_server(root=repo, tasks=True)) as client:
        task = await call_tool_task(client, "review_changes", {"models": team(server)})
        result = await task.result()
    handle = result.structured_content
    assert handle is not None and handle["status"] == "completed"
    assert handle["result"]["review"]["verdict"] == "blocked"
    assert handle["notes"][0] == ("left out .env: on the secret-file deny-list (its changes "
                                  "are never sent to a model)")
    assert handle["notes"][1].startswith("estimate: at least 6 calls")  # said before it ran
    assert CANARY not in sent(server)


async def test_review_changes_follows_the_repositorys_own_rules(
        scripted: Scripted, repo: Path, tmp_path: Path, home: Path) -> None:
    """The MCP face applies the repository's review: block as the command line does: an
    ignored file's changes, and its instruction, reach no model; the instruction for a file
    sent and the guidance file do; '!.env' reopens nothing."""
    server = scripted(reviewer)
    (repo / ".massgen").mkdir()
    (repo / ".massgen" / "config.yaml").write_text(
        "review:\n  ignore: ['src/app.py', '!.env']\n  instructions:\n"
        "    'src/db.py': 'INSTRUCTION-DB: parameters only'\n"
        "    'src/app.py': 'INSTRUCTION-APP: never sent'\n")
    (repo / "AGENTS.md").write_text("GUIDANCE-MARKER: queries live in src/db.py\n")
    git(repo, "add", ".massgen/config.yaml", "AGENTS.md")
    git(repo, "commit", "-qm", "rules")
    async with host(home, tmp_path / "elsewhere", repo) as client:
        reply = await client.call_tool("review_changes", {"models": team(server),
                                                          "wait_s": 50})
        assert not reply.is_error, text(reply)
    everything = sent(server)
    assert "INSTRUCTION-DB" in everything and "GUIDANCE-MARKER" in everything
    assert "range(len(items) + 1)" not in everything  # src/app.py's change: ignored
    assert "INSTRUCTION-APP" not in everything and CANARY not in everything
    assert ("Note: left out src/app.py: ignored by the repository's review rules "
            "(.massgen/config.yaml review.ignore: 'src/app.py').") in text(reply).splitlines()
