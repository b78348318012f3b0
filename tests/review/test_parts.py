"""Any size, with a coverage record: a diff over what one review run sends is split into
parts by file (tests beside their code, a file cut by hunks only when it alone is over),
the parts are reviewed at once by the same team, and their findings merged, with the
coverage in every output. Bad input: a member repeating one finding 500 times, findings
outside the change, parts that all fail."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.consensus.findings import hunk_ranges, parse_review
from massgen_mcp.review.diff import MAX_DIFF_BYTES
from massgen_mcp.review.parts import split, subject
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, error, vote
from tests.helpers import Scripted
from tests.review.conftest import git

FILES = 30  # code files, each with its test file: 60 files
_PATH = re.compile(r"^\+\+\+ b/(\S+)$", re.M)


def code(i: int, lines: int) -> str:
    return "".join(f"def handler_{i}_{n}(request):  # the {n}th handler of module {i}\n"
                   f"    return respond(request, {n})\n" for n in range(lines // 2))


def large_change(repo: Path, lines: int = 520) -> None:
    """60 new files (30 modules and their tests), about 1.5 MB of diff, untracked but
    intended (``git add -N``), as a generated change would be."""
    (repo / "tests").mkdir(exist_ok=True)
    for i in range(FILES):
        (repo / "src" / f"mod{i}.py").write_text(code(i, lines))
        (repo / "tests" / f"test_mod{i}.py").write_text(code(1000 + i, lines))
    git(repo, "add", "-N", "src", "tests")


def first_file(req: ChatRequest) -> str:
    found = _PATH.findall(req.user)
    return found[0] if found else "src/app.py"


def part_reviewer(req: ChatRequest) -> Reply:
    """Each member flags the first file of its part at line 1 (so every part agrees on one
    finding); ``c`` also repeats it 500 times and adds one on a file outside the change."""
    if req.is_final or req.is_check:
        return agree(req)
    if req.vote_labels:
        return vote(sorted(req.vote_labels)[0], "it is right")
    finding = {"file": first_file(req), "line": 1, "end_line": 2, "severity": "minor",
               "category": "docs", "claim": "the handler has no docstring", "fix": "add one"}
    found = [finding]
    if req.model == "c":
        found = [finding] * 500 + [{**finding, "file": "elsewhere/nowhere.py",
                                    "claim": "a file not in the change"}]
    return answer(json.dumps({"summary": "one nit", "findings": found, "rejects": []}))


def test_a_file_and_its_tests_go_together_and_only_a_huge_file_is_cut() -> None:
    assert {subject(p) for p in ("src/app.py", "tests/test_app.py", "app_test.go",
                                 "web/app.test.ts", "AppTest.java")} == {"app"}
    diff = "".join(
        f"diff --git a/{p} b/{p}\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1,{n} @@\n" + "+x\n" * n
        for p, n in (("tests/test_a.py", 10), ("src/b.py", 30), ("src/a.py", 20)))
    big = "diff --git a/big.py b/big.py\n--- a/big.py\n+++ b/big.py\n" + "".join(
        f"@@ -{k * 100 + 1},3 +{k * 100 + 1},4 @@\n x\n+y\n x\n x\n" for k in range(40))
    huge_hunk = ("diff --git a/one.py b/one.py\n--- /dev/null\n+++ b/one.py\n"
                 "@@ -0,0 +1,300 @@\n" + "+y\n" * 300)
    minified = ("diff --git a/min.js b/min.js\n--- /dev/null\n+++ b/min.js\n"
                "@@ -0,0 +1 @@\n+" + "x" * 400 + "\n")
    found = split(diff + big + huge_hunk + minified, room=300)
    files = [part.files for part in found.parts]
    # test_a.py comes first in the diff but waits for a.py, and goes beside it.
    assert any(f == ("src/a.py", "tests/test_a.py") for f in files), files
    assert all(len(part.diff.encode()) <= 300 for part in found.parts)
    assert sum(1 for f in files if f == ("big.py",)) > 1  # cut between its hunks
    assert all(p.diff.startswith("diff --git a/big.py") for p in found.parts
               if p.files == ("big.py",))  # each piece has the file's header
    # A new file's one hunk is cut into hunks of its own, with counts that add up.
    ones = [hunk_ranges(p.diff)["one.py"] for p in found.parts if p.files == ("one.py",)]
    covered = [line for ranges in ones for start, end in ranges
               for line in range(start, end + 1)]
    assert len(ones) > 1 and covered == list(range(1, 301))
    assert found.left_out == ("min.js: a line of the hunk at line 1 is more than one review "
                              "run holds (300 bytes)",)
    assert sum(p.lines for p in found.parts) == 10 + 30 + 20 + 40 + 300


def test_a_finding_repeated_500_times_counts_once() -> None:
    finding = {"file": "a.py", "line": 1, "severity": "nit", "claim": "x"}
    review = parse_review(json.dumps({"summary": "s", "findings": [finding] * 500}))
    assert len(review.findings) == 1


def test_hunk_ranges_read_hunks_by_their_counts() -> None:
    diff = ("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,3 @@\n a\n+++ b/y.py\n b\n"
            "@@ -10 +11,2 @@\n-c\n+d\n+e\n")
    assert hunk_ranges(diff) == {"x.py": [(1, 3), (11, 12)]}


def test_a_large_change_is_reviewed_in_parts_with_its_coverage(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(part_reviewer)
    large_change(repo)
    monkeypatch.chdir(repo)
    code_ = main(["review", "--models", "openai/a,openai/b,openai/c", "--base-url",
                  server.base_url, "--json"])
    out, err = capsys.readouterr()
    assert code_ == 0, err
    result = json.loads(out)
    coverage = result["review"]["coverage"]
    diff = git(repo, "diff", "HEAD").decode()
    assert len(diff) > 1_500_000
    assert coverage["parts"] > 1 and coverage["failed_parts"] == []
    assert len(coverage["files"]) == 2 * FILES + 2  # and the fixture's app.py and db.py
    assert coverage["lines"] == coverage["total_lines"] > 2 * FILES * 300
    assert coverage["left_out"] == [".env: on the secret-file deny-list (its changes are "
                                    "never sent to a model)"]
    assert f"reviewed in {coverage['parts']} parts" in err and "estimate: at least" in err
    assert all(len(r.body["messages"][-1]["content"]) < 2 * MAX_DIFF_BYTES
               for r in server.requests)  # no call carries the whole diff
    for part_files in ([f for f in coverage["files"] if f.endswith(f"mod{i}.py")]
                       for i in range(FILES)):
        assert len(part_files) == 2  # each module and its test were both reviewed
    review = result["review"]
    flagged = {f["file"] for f in review["findings"] if not f["outside"]}
    assert len(flagged) == coverage["parts"]  # one agreed finding from each part, merged
    assert [f["id"] for f in review["findings"]] == [
        f"F{i}" for i in range(1, len(review["findings"]) + 1)]
    outside = [f for f in review["findings"] + review["rejected"]
               if f["file"] == "elsewhere/nowhere.py"]
    assert outside and all(f["outside"] == "its file is not in the reviewed change"
                           for f in outside)
    assert review["dropped"] == []  # c's 500 copies counted once, not a dropped member


def test_the_coverage_is_in_every_output(scripted: Scripted, repo: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(part_reviewer)
    monkeypatch.chdir(repo)
    team = ["--models", "openai/a,openai/b,openai/c", "--base-url", server.base_url]
    assert main(["review", *team]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^Coverage: 2 files, 4 of 4 changed lines \(100%\); left out: \.env",
                     text, re.M), text
    assert main(["review", *team, "--format", "markdown"]) == 0
    assert "_Coverage: 2 files, 4 of 4 changed lines" in capsys.readouterr().out
    assert main(["review", *team, "--format", "sarif"]) == 0
    sarif = json.loads(capsys.readouterr().out)
    assert sarif["runs"][0]["properties"]["coverage"]["percent"] == 100.0
    assert main(["review", *team, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["review"]["coverage"]["files"] == ["src/app.py", "src/db.py"]
    report = (Path(result["session_dir"]) / "report.html").read_text()
    assert '<span class="muted" id="coverage">coverage: 2 files, 4 of 4' in report


def test_parts_that_all_fail_are_inconclusive(scripted: Scripted, repo: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(lambda req: error(400, "scripted: this model refuses"))
    large_change(repo)
    monkeypatch.chdir(repo)
    code_ = main(["review", "--models", "openai/a,openai/b,openai/c", "--base-url",
                  server.base_url, "--json"])
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert code_ != 0 and result["status"] != "completed", err
    assert result["review"]["verdict"] == "inconclusive"  # never approve
    coverage = result["review"]["coverage"]
    assert coverage["failed_parts"] == list(range(1, coverage["parts"] + 1))
    assert coverage["files"] == [] and coverage["lines"] == 0 < coverage["total_lines"]
    assert all(e.startswith("part ") for e in result["errors"])


async def test_the_mcp_tool_refuses_a_diff_that_needs_parts_in_one_line(
        repo: Path, tmp_path: Path, home: Path) -> None:
    """A host follows one session: a diff over one run is refused there, in one line that
    says what reviews it in parts, and no part starts."""
    from tests.review.test_mcp import host, text

    large_change(repo, lines=120)
    async with host(home, tmp_path / "elsewhere", repo) as client:
        reply = await client.call_tool("review_changes",
                                       {"models": ["openai/a@http://127.0.0.1:9/v1"]})
    assert reply.is_error and "more than one review run holds" in text(reply), text(reply)
    assert "massgen-mcp review in a terminal, which reviews it in parts" in text(reply)
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


async def test_cancelling_one_part_stops_the_whole_review(scripted: Scripted, repo: Path,
                                                         home: Path) -> None:
    """The command line's Ctrl-C cancels the run it follows, the first part: every other
    part stops with it, and the review ends cancelled, with no verdict."""
    from massgen_mcp.core.records import RunStatus
    from massgen_mcp.review.start import ChangeToReview, finish_review, start_review
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    server = scripted(part_reviewer, latency_s=30.0)  # no part ends on its own in the test
    large_change(repo)
    service = ConsensusService.local(home, Workspace(repo, confined=False), drafts=False)
    try:
        begun = await start_review(service, Workspace(repo, confined=False), ChangeToReview(),
                                   models=["openai/a", "openai/b", "openai/c"],
                                   base_url=server.base_url)
        assert len(begun.parts) > 1
        for _, run in begun.parts:  # each part under way (its first change of status)
            await service.wait(run.session_id, None, until_done=False, after_revision=0)
        await service.cancel(begun.run.session_id)
        result = await finish_review(service, begun)
    finally:
        await service.aclose()
    assert result.status is RunStatus.CANCELLED and result.review is not None
    assert result.review.verdict == "inconclusive"  # no part judged: no verdict
    for _, run in begun.parts:
        assert (await service.result(run.session_id)).status is RunStatus.CANCELLED
