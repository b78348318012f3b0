"""``massgen-mcp review`` end to end: a real review of the fixture repository by scripted
members over HTTP, the canary never sent, and each bad input refused in one line."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, answer, error
from massgen_mcp.testing.scripted import tool_calls as calls
from tests.helpers import Scripted
from tests.review.conftest import CANARY, DB_AFTER, git
from tests.review.reviewers import reviewers
from tests.servers import server_env

OFF_BY_ONE = "src/app.py:3-4  [major] correctness: off-by-one"
INJECTION = "src/db.py:2  [blocker] security: SQL injection"


def tool_results(req: ChatRequest) -> list[str]:
    return [m["content"] for m in req.messages if m["role"] == "tool"]


def reviewer(req: ChatRequest) -> Reply:
    """The scripted members of tests/review/reviewers.py; agent a first opens db.py and
    tries .env through its tools."""
    seen = tool_results(req)
    steps = [("read_file", {"path": "src/db.py"}), ("read_file", {"path": ".env"})]
    if req.model == "a" and req.tools and not req.vote_labels and len(seen) < len(steps):
        name, args = steps[len(seen)]
        return calls((name, json.dumps(args)))
    return reviewers(req)


def review_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["review", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def team(server: ScriptedServer) -> list[str]:
    return ["--models", "openai/a,openai/b,openai/c", "--base-url", server.base_url]


def sent(server: ScriptedServer) -> str:
    """Everything every request to the model server carried."""
    return "\n".join(json.dumps(r.body) for r in server.requests)


def test_a_review_of_the_working_tree_end_to_end(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(reviewer)
    monkeypatch.chdir(repo / "src")  # a subfolder: the repository is still the workspace
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, out, err = review_cli(capsys, *team(server), "--focus", "security", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "completed"
    review = result["review"]
    assert review["verdict"] == "blocked" and review["members"] == 3
    agreed = {(f["file"], f["severity"]): f for f in review["findings"]}
    assert set(agreed) == {("src/db.py", "blocker"), ("src/app.py", "major")}
    # a raised both; b voted for a's review; c raised the off-by-one on its own lines.
    assert agreed["src/db.py", "blocker"]["raised_by"] == "agent_a"
    assert agreed["src/db.py", "blocker"]["confirmed_by"] == ["agent_b"]
    assert agreed["src/app.py", "major"]["confirmed_by"] == ["agent_b", "agent_c"]
    # b's nit: b then voted for a's review, which lacks it; nobody disputes it.
    assert [(f["file"], f["severity"], f["tier"]) for f in review["unconfirmed"]] == [
        ("src/app.py", "nit", "unconfirmed")]
    assert review["rejected"] == [] and review["tier"] == "agreed"
    assert [d["agent_id"] for d in review["dissent"]] == ["agent_c"]
    assert "SQL injection" in result["final_answer"]  # the final text is the agreed review
    assert "left out .env: on the secret-file deny-list" in err
    everything = sent(server)
    assert CANARY not in everything  # not in the diff, not through the tools
    assert "focus on: security" in everything
    db_read = next(r for r in server.requests if len(tool_results(r)) == 1)
    assert DB_AFTER.splitlines()[1].strip() in tool_results(db_read)[0]  # rooted at the repo
    env_read = next(r for r in server.requests if len(tool_results(r)) == 2)
    assert "secret" in tool_results(env_read)[1]
    request = json.loads((Path(result["session_dir"]) / "request.json").read_text())
    assert request["workspace"] == str(repo.resolve())  # recorded, so resume reads there too
    assert request["question"].startswith("Review a code change")


def test_gh_pr_diff_piped_into_review_dash(scripted: Scripted, repo: Path,
                                           home: Path) -> None:
    """``gh pr diff 12 | massgen-mcp review -``, as a user types it."""
    server = scripted(reviewer)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "defects")
    patch = git(repo, "diff", "HEAD~1", "HEAD")
    git(repo, "checkout", "-q", "HEAD~1")
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "review", "-", *team(server),
                           "--quiet"], input=patch, capture_output=True, cwd=repo,
                          timeout=120, env=server_env(home, PYTHONPATH=os.getcwd()))
    assert done.returncode == 0, done.stderr
    assert INJECTION.encode() in done.stdout and OFF_BY_ONE.encode() in done.stdout
    assert CANARY not in sent(server)


def bad(capsys: pytest.CaptureFixture[str], *argv: str, stdin: bytes | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    """The one line ``review ARGV`` refuses with (exit 1, no run)."""
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code, out, err = review_cli(capsys, *argv, "--models", "openai/a@http://127.0.0.1:9/v1")
    assert (code, out) == (1, ""), err
    assert err.startswith("massgen-mcp: ") and err.count("\n") == 1, err
    return err


def test_each_bad_input_is_refused_in_one_line(repo: Path, tmp_path: Path, home: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert "repository: " in bad(capsys) and "not inside a git repository" in bad(capsys)
    monkeypatch.chdir(repo)
    assert "--base: 'nosuch' is not a commit" in bad(capsys, "--base", "nosuch")
    assert "--commit: '--output=x' is not a ref" in bad(capsys, "--commit=--output=x")
    assert "holds NUL bytes" in bad(capsys, "-", stdin=b"--- a/x\n+++ b/x\n\0\n",
                                    monkeypatch=monkeypatch)
    assert "is not UTF-8 text (line 4)" in bad(
        capsys, "-", stdin=b"--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-\xff\n+a\n",
        monkeypatch=monkeypatch)
    huge = b"--- a/README.md\n+++ b/README.md\n" + b"+" + b"x" * 50_000_000 + b"\n"
    line = bad(capsys, "-", stdin=huge, monkeypatch=monkeypatch)
    # Over 180 KB a diff is reviewed in parts (tests/review/test_parts.py); over 8 MiB, no.
    assert "more than 8,388,608 bytes" in line and "narrow it" in line
    (outside / "big.patch").write_bytes(huge[:9_000_000])
    line = bad(capsys, str(outside / "big.patch"))
    assert "patch: the patch " in line and "is 9,000,000 bytes" in line and "narrow it" in line
    for path, why in (("../../etc/passwd", "leaves the repository"),
                      ("/etc/passwd", "is an absolute path"),
                      ("link/passwd", "leads outside the repository through a link"),
                      ("nope.py", "'nope.py', which does not exist")):
        (repo / "link").unlink(missing_ok=True)
        (repo / "link").symlink_to(outside, target_is_directory=True)
        (outside / "passwd").write_text("root:x:0:0\n")
        patch = f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n".encode()
        assert why in bad(capsys, "-", stdin=patch, monkeypatch=monkeypatch), path
    (repo / "link").unlink()
    git(repo, "checkout", "-q", "--", ".")  # nothing changed any more
    assert "nothing to review" in bad(capsys)
    only_secret = b"--- a/.env\n+++ b/.env\n@@ -1 +1 @@\n-a\n+b\n"
    line = bad(capsys, "-", stdin=only_secret, monkeypatch=monkeypatch)
    assert "nothing to review" in line and ".env: on the secret-file deny-list" in line
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


def test_review_takes_runs_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """The team and limit flags are run's own (one definition, cli/flags.py and run.py)."""
    assert main(["review", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--models", "--config", "--base-url", "--json", "--timeout", "--max-cost",
                 "--max-tokens", "--quiet", "--staged", "--base", "--commit", "--focus"):
        assert flag in text, flag
    code = main(["review", "--staged", "--commit", "x"])
    assert code == 5 and "not allowed with argument" in capsys.readouterr().err


async def test_a_discovered_project_team_abroad_gets_no_workspace_tools(
        repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cloned project's ``.massgen/config.yaml`` with an agent at its own server (inline
    key: no consent asked for the file as it is) would need consent to turn the workspace
    tools on; review must not turn them on for it. A team the user names keeps them."""
    from massgen_mcp.review.changes import collect
    from massgen_mcp.review.request import chosen_team, review_spec, tools_withheld
    from massgen_mcp.team.context_files import Workspace

    home.mkdir()  # the project's config: $MASSGEN_HOME/config.yaml (else ./.massgen/)
    (home / "config.yaml").write_text(
        "agents:\n  - id: abroad\n    backend: {type: openai, model: gpt-4o-mini, "
        "base_url: 'https://reviews.example.com/v1', api_key: sk-inline-0000}\n")
    monkeypatch.chdir(repo)
    changes = await collect(repo)
    workspace = Workspace(changes.root, confined=False)
    spec = review_spec(changes)
    withheld = tools_withheld(spec, await chosen_team(spec, workspace))
    assert withheld == ["agent 'abroad' at https://reviews.example.com/v1 would receive the "
                        "project's files (workspace_tools)"]
    named = review_spec(changes, models=["openai/a@https://reviews.example.com/v1"])
    assert tools_withheld(named, await chosen_team(named, workspace)) == []


def test_every_format_of_one_review(scripted: Scripted, repo: Path, home: Path,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Text grouped by file, Markdown for a PR, SARIF 2.1.0 valid against the schema: the
    same agreed findings in each."""
    import jsonschema

    server = scripted(reviewer)
    monkeypatch.chdir(repo)
    code, out, err = review_cli(capsys, *team(server), "--quiet")
    assert code == 0, err
    assert out.startswith("Verdict: blocked: 2 agreed findings (1 blocker, 1 major), "
                          "1 unconfirmed, 0 rejected; 2 of 3 members backed the winning "
                          "review ")
    assert "\nthe winning review's own summary by agent_a (openai/a): 2 problems\n" in out
    app, db = out.index("\nsrc/app.py\n"), out.index("\nsrc/db.py\n")
    assert out.index(OFF_BY_ONE) > app and out.index(INJECTION) > db  # grouped by file
    unconfirmed = out.split("Unconfirmed (fewer than a majority back them", 1)[1]
    assert "total has no docstring" in unconfirmed
    assert "backed by 0 of 3: raised by agent_b (openai/b) (no longer backs it)" in unconfirmed
    assert "Dissent:" in out and "\n  agent_c (openai/c) (" in out
    session = out  # the same run, rendered again from its record below

    code, md, err = review_cli(capsys, *team(server), "--quiet", "--format", "markdown")
    assert code == 0, err
    assert md.startswith("## Team review: the working tree against HEAD\n")
    assert "**Verdict: blocked**" in md and "### F1 `src/db.py:2` — blocker, security" in md
    assert "\nfor i in range(len(items) + 1):\n```" in md  # the evidence, fenced

    code, sarif, err = review_cli(capsys, *team(server), "--quiet", "--format", "sarif")
    assert code == 0, err
    log = json.loads(sarif)
    schema = json.loads((Path(__file__).parents[1] / "fixtures" /
                         "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    results = log["runs"][0]["results"]
    assert [(r["level"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             r["properties"]["tier"]) for r in results] == [
        ("error", "src/db.py", "agreed"), ("error", "src/app.py", "agreed"),
        ("note", "src/app.py", "unconfirmed")]
    assert results[2]["properties"]["backers"] == 0
    assert results[2]["properties"]["support"].startswith("backed by 0 of 3: raised by")
    assert log["runs"][0]["properties"]["verdict"] == "blocked"
    assert session and CANARY not in sent(server)


def test_fail_on_gives_ci_its_exit_code(scripted: Scripted, repo: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """8 when the team requests changes at the threshold; 0 when it approves; without
    --fail-on a blocked review still exits 0 (the run itself succeeded)."""
    server = scripted(reviewer)
    monkeypatch.chdir(repo)
    assert review_cli(capsys, *team(server), "--quiet", "--fail-on", "major")[0] == 8
    assert review_cli(capsys, *team(server), "--quiet")[0] == 0
    git(repo, "checkout", "-q", "--", "src/db.py", "src/app.py")
    (repo / "README.md").write_text("# shop\n\nA small shop.\n")  # nothing to find
    code, out, err = review_cli(capsys, *team(server), "--quiet", "--fail-on", "nit")
    assert code == 0, err
    assert out.startswith("Verdict: approve: 0 agreed findings")


def test_a_member_that_answers_prose_is_told_to_send_its_review(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def prose_first(req: ChatRequest) -> Reply:
        if req.model == "b" and not req.vote_labels and not req.is_retry:
            return answer("LGTM, ship it")
        return reviewers(req)

    server = scripted(prose_first)
    monkeypatch.chdir(repo)
    code, out, err = review_cli(capsys, *team(server), "--json")
    assert code == 0, err
    retry = next(r for r in server.requests if r.model == "b" and r.is_retry)
    told = retry.messages[-1]["content"]
    assert "your answer must be your review as one JSON object" in told
    assert json.loads(out)["review"]["members"] == 3


def test_the_cost_floor_is_said_before_and_a_budget_below_it_refused(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(reviewer)
    monkeypatch.chdir(repo)
    priced = f"openai/gpt-4o-mini@{server.base_url}"
    code, out, err = review_cli(capsys, "--models", f"{priced},{priced}", "--max-cost",
                                "0.000001")
    assert (code, out) == (1, "") and not server.requests
    assert "max_cost_usd: $1e-06 is below this review's floor, at least 4 calls" in err
    code, out, err = review_cli(capsys, *team(server))
    assert code == 0, err
    assert "estimate: at least 6 calls, ~" in err and "price unknown" in err


def test_each_call_carries_the_diff_once(scripted: Scripted, repo: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Tool rounds and review turns resend the conversation, never a second copy of the
    diff."""
    server = scripted(reviewer)
    monkeypatch.chdir(repo)
    assert review_cli(capsys, *team(server), "--quiet")[0] == 0
    line = "+    for i in range(len(items) + 1):"
    counts = [sum(str(m.get("content") or "").count(line) for m in r.messages)
              for r in server.requests]
    assert len(counts) >= 6 and set(counts) == {1}, counts


async def test_files_a_models_call_names_are_not_sent_to_a_team_abroad(
        repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's call (MCP ``review_changes``) that names ``paths`` chose the files, as with
    ``context_files``: a team with an agent at a foreign endpoint (here the discovered
    project team, whose inline key needs no consent) must not receive them, untracked notes
    included. Refused before any run; the user can still name them on the command line
    (red team, round 5: the run started with the files in its context)."""
    from massgen_mcp.core.errors import UntrustedConfigError
    from massgen_mcp.review.start import ChangeToReview, start_review
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    home.mkdir()
    (home / "config.yaml").write_text(
        "agents:\n  - id: abroad\n    backend: {type: openai, model: gpt-4o-mini, "
        "base_url: 'http://192.0.2.10/v1', api_key: sk-inline-0000}\n")  # TEST-NET-1
    (repo / "notes.txt").write_text("the staging password is hunter2\n")  # untracked
    monkeypatch.chdir(repo)
    workspace = Workspace(repo.resolve(), confined=True)
    service = ConsensusService.local(home, workspace, drafts=False)
    try:
        with pytest.raises(UntrustedConfigError, match="^" + re.escape(
                "paths: agent 'abroad' at http://192.0.2.10/v1 would receive the project's "
                "files (paths). A model's call cannot send files it picks")):
            await start_review(service, workspace, ChangeToReview(paths=["notes.txt"]))
    finally:
        await service.aclose()
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


@pytest.mark.parametrize("field", ["paths", "context_files"])
async def test_files_a_call_picks_are_refused_abroad_by_one_rule_in_one_sentence(
        repo: Path, home: Path, field: str) -> None:
    """``context_files`` of ``run_consensus`` and ``paths`` of ``review_changes`` are one
    rule (``consent.check_call``'s files a call picks) with one sentence, which names the
    field and says what the user can do: the call chose the files, so trusting the team's
    config does not lift it (the old ``context_files`` words said to trust the file)."""
    from massgen_mcp.core.errors import UntrustedConfigError
    from massgen_mcp.core.spec import RunSpec
    from massgen_mcp.review.start import ChangeToReview, start_review
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    (repo / "notes.txt").write_text("the staging password is hunter2\n")
    workspace = Workspace(repo.resolve(), confined=True)
    service = ConsensusService.local(home, workspace, drafts=False)
    abroad = ["openai/a@http://192.0.2.10/v1"]  # TEST-NET-1
    try:
        with pytest.raises(UntrustedConfigError) as refused:
            if field == "paths":
                await start_review(service, workspace, ChangeToReview(paths=["notes.txt"]),
                                   models=abroad)
            else:
                await service.start(RunSpec(question="q", models=abroad,
                                            context_files=["notes.txt"]))
    finally:
        await service.aclose()
    assert str(refused.value) == (
        f"{field}: agent 'agent_a' at http://192.0.2.10/v1 would receive the project's files "
        f"({field}). A model's call cannot send files it picks to an endpoint that is "
        "neither on this machine nor the provider's own API, whatever consent the team's "
        "config has: name them yourself (massgen-mcp run --context-file FILE, massgen-mcp "
        "review PATH), or leave them out of the call")


def test_a_findings_place_is_a_code_span_that_shows_the_path_as_it_is() -> None:
    """Backslash escapes are not escapes inside a Markdown code span: ``md_inline``'s
    ``my\\_module.py`` showed its backslash on GitHub, and a backtick in a path a model wrote
    closed the span early, so the rest of the line fell out of it. The place is a code span
    whose fence is longer than any run of backticks in it (red team, round 5)."""
    from massgen_mcp.core.outcomes import Finding, ReviewOutcome, Severity, Verdict
    from massgen_mcp.render.review import as_markdown

    def finding(file: str, ident: str) -> Finding:
        return Finding(id=ident, file=file, line=3, end_line=3, severity=Severity.MAJOR,
                       category="correctness", claim="wrong", raised_by="a")

    outcome = ReviewOutcome(
        verdict=Verdict.CHANGES_REQUESTED, threshold=Severity.MAJOR, agreement=1, members=1,
        findings=[finding("src/my_module.py", "F1"), finding("a`<b>@x``y.py", "F2")],
        rejected=[finding("`x`", "R1")])
    md = as_markdown(outcome, {})
    assert "### F1 `src/my_module.py:3` — major, correctness" in md
    assert "### F2 ```a`<b>@x``y.py:3``` — major, correctness" in md
    assert "#### R1 `` `x`:3 `` — major, correctness" in md


def test_a_models_url_is_no_link_in_the_pull_request_comment() -> None:
    """GitHub turns a bare ``https://...`` or ``www.`` in a comment into a link (GFM's
    extended autolinks) whatever is escaped around it: a finding's text, a model's, must
    not put a clickable link in the PR (the docstring's promise; red team, round 5)."""
    from massgen_mcp.render.review import md_inline

    shown = md_inline("see https://evil.example/x, HTTP://EVIL.example, ftp://f.example "
                      "and www.evil.example, mail bob@evil.example")
    for linked in ("https://", "HTTP://", "ftp://", "www.", "@evil"):
        assert linked not in shown, linked
    assert shown.replace("\u200b", "") == (
        "see https://evil.example/x, HTTP://EVIL.example, ftp://f.example and "
        "www.evil.example, mail bob@evil.example")


def test_a_review_from_a_subfolder_leaves_the_repository_clean(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The records go to the repository's top ``.massgen/`` (not the subfolder's), which
    ignores itself for git: ``git status`` is as before, ``git add -A`` takes none of them,
    and the next review reviews the next change, not the records (a 517 KB refusal once)."""
    server = scripted(reviewer)
    monkeypatch.delenv("MASSGEN_HOME")  # the default place
    (repo / ".massgen").mkdir()
    (repo / ".massgen" / "config.yaml").write_text("agents: []\n")  # a project's config
    before = git(repo, "status", "--porcelain", "--untracked-files=all")
    monkeypatch.chdir(repo / "src")
    code, _, err = review_cli(capsys, *team(server), "--quiet")
    assert code == 0, err
    assert not (repo / "src" / ".massgen").exists()
    [record] = (repo / ".massgen" / "sessions").iterdir()
    assert (record / "result.json").is_file()
    after = git(repo, "status", "--porcelain", "--untracked-files=all")
    assert after == before  # the project's config.yaml still shows: it is committable
    assert b"?? .massgen/config.yaml" in after
    git(repo, "add", "-A")
    assert git(repo, "diff", "--cached", "--name-only", "--", ".massgen").decode() == (
        ".massgen/config.yaml\n")
    git(repo, "commit", "-qm", "the change")
    (repo / "README.md").write_text("# shop\n\nA small shop.\n")
    code, out, err = review_cli(capsys, *team(server), "--quiet", "--json")
    assert code == 0, err
    assert json.loads(out)["review"] is not None
    assert len(list((repo / ".massgen" / "sessions").iterdir())) == 2
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == b" M README.md\n"


def test_records_committed_before_are_never_reviewed(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records that reached a commit (before their folder ignored itself) change with every
    run: they are left out of the diff and of its size, named once; the config stays
    committable, but is withheld from the models like every file under ``.massgen/`` (it may
    hold a key: trust round 5's R2), and named."""
    import asyncio

    from massgen_mcp.review.changes import collect

    record = repo / "src" / ".massgen" / "sessions" / "01J" / "events.jsonl"
    record.parent.mkdir(parents=True)
    record.write_text("{}\n")
    (repo / ".massgen").mkdir()
    (repo / ".massgen" / "config.yaml").write_text("agents: []\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "records by mistake")
    record.write_text("{}\n" * 200_000)  # 600 KB: over the review's limit on its own
    (repo / ".massgen" / "config.yaml").write_text("agents: [a]\n")
    (repo / "src" / "app.py").write_text("x = 1\n")
    changes = asyncio.run(collect(repo))
    assert changes.files == ("src/app.py",)
    assert changes.left_out == (
        ".massgen/config.yaml: version-control internals or massgen's records (its changes "
        "are never sent to a model)",
        ".massgen/: 1 file(s) of massgen-mcp's own records (what a run or review writes is "
        "never reviewed)")


def test_ctrl_c_then_resume_keeps_the_reviews_format_and_fail_on(
        scripted: Scripted, repo: Path, home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C stops a review as a server stop leaves a run (``interrupted``: resumable, with
    the command that goes on), not cancelled; ``resume`` then ends it as the review would
    have: SARIF on stdout and exit 8 on a blocked verdict, without being told again."""
    gate, arrived = threading.Event(), threading.Semaphore(0)

    def held(req: ChatRequest) -> Reply:
        if not gate.is_set():  # every first call stays open until the review is stopped
            arrived.release()
            gate.wait(60)
            return Reply("text", delay_s=0)
        return reviewers(req)

    server = scripted(held)
    proc = subprocess.Popen(
        [sys.executable, "-m", "massgen_mcp", "review", *team(server), "--format", "sarif",
         "--fail-on", "major"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=repo / "src", env=server_env(home, PYTHONPATH=os.getcwd()))
    try:
        for _ in range(3):
            assert arrived.acquire(timeout=60)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        gate.set()
        proc.kill()
    assert proc.returncode == 4, err
    [folder] = (home / "sessions").iterdir()
    session = folder.name
    assert json.loads((folder / "status.json").read_text())["status"] == "interrupted"
    assert f"goes on from its recorded reviews and votes with: massgen-mcp resume {session}" \
        in err
    assert "Traceback" not in err and out == ""

    code = main(["resume", session])  # no --format, no --fail-on: the recorded ones
    out, err = capsys.readouterr()
    assert code == 8, err
    log = json.loads(out)
    assert log["version"] == "2.1.0" and log["runs"][0]["properties"]["verdict"] == "blocked"
    code = main(["resume", session])
    assert code == 1
    assert ("is completed; only interrupted runs can be resumed; it has ended and has its "
            f"result: massgen-mcp show {session}") in capsys.readouterr().err


def test_a_dropped_members_rejected_replies_and_reason_are_kept(
        scripted: Scripted, repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A member whose every review is unusable is dropped; its rejected replies are in the
    record, and ``show`` and the report say why it was dropped, not only "bad_review"."""
    critical = json.dumps({"summary": "bad", "rejects": [], "findings": [{
        "file": "src/app.py", "line": 3, "end_line": 3, "severity": "critical",
        "category": "correctness", "claim": "off by one"}]})

    def c_says_critical(req: ChatRequest) -> Reply:
        if req.model == "c" and not req.vote_labels and not req.is_final:
            return answer(critical)
        return reviewers(req)

    server = scripted(c_says_critical)
    monkeypatch.chdir(repo)
    code, _, err = review_cli(capsys, *team(server), "--quiet")
    assert code == 7, err  # completed, a member dropped
    why = "'severity' must be one of blocker, major, minor, nit"
    assert f"3 invalid actions in one turn (last: bad_review: {why}.)" in err
    [folder] = (home / "sessions").iterdir()
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    rejected = [e for e in events if e["type"] == "invalid_action"]
    assert [e["agent_id"] for e in rejected] == ["agent_c"] * 3
    assert all("critical" in e["detail"] and "off by one" in e["detail"] for e in rejected)
    assert main(["show", folder.name]) == 0
    assert why in capsys.readouterr().out
    assert why.replace("'", "&#x27;") in (folder / "report.html").read_text()


def test_roles_titles_and_a_failed_reviews_json(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The members' roles are in the progress; ``sessions`` and ``show`` title a review by
    what it reviews, not its long prompt; a review whose members all fail prints the same
    ``--json`` keys as one that ends (``review`` included, with ``agreement``)."""
    server = scripted(reviewer)
    monkeypatch.chdir(repo)
    code, _, err = review_cli(capsys, *team(server), "--roles", "for,against")
    assert code == 0, err
    assert "started with agent_a=openai/a (for), agent_b=openai/b (against), " \
           "agent_c=openai/c\n" in err
    assert main(["sessions"]) == 0
    listed = capsys.readouterr().out.splitlines()[1]
    assert listed.endswith("review: the working tree against HEAD, 2 files")
    assert main(["show", "latest"]) == 0
    shown = capsys.readouterr().out
    assert "\nreview   the working tree against HEAD, 2 files\n" in shown
    assert "Review a code change" not in shown

    failing = scripted(lambda req: error(400, "model does not exist"))
    code, out, err = review_cli(capsys, *team(failing), "--json")
    assert code == 9, err  # inconclusive: every member dropped
    failed = json.loads(out)
    assert failed["status"] == "failed" and "agreement" in failed
    assert failed["review"]["verdict"] == "inconclusive"
