"""report.html of a review run: the verdict, the findings on the diff at their lines, the ones
off it, the rejected ones and the dissent; every text from a model or a patch inert."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from massgen_mcp.cli.main import main
from massgen_mcp.core.outcomes import (
    Dissent,
    Finding,
    ReviewOutcome,
    ReviewTarget,
    Severity,
    Stance,
    Verdict,
)
from massgen_mcp.core.records import AgentPhase, Phase, RequestRecord, RunStatus
from massgen_mcp.core.run_state import AgentStatus, ResultRecord, SessionRecord, StatusRecord
from massgen_mcp.render.html import render_report
from massgen_mcp.render.review_html import REVIEW_CSS, parse_diff, place
from tests.helpers import Scripted
from tests.review.conftest import APP_AFTER, APP_BEFORE, DB_AFTER, DB_BEFORE, git
from tests.review.reviewers import reviewers

HOSTILE = ('</td></tr></table><script>alert(1)</script><a href="javascript:alert(2)">x</a>'
           '<img src=x onerror=alert(3)>')
DIFF = """\
diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,5 +1,6 @@
 def total(items):
     result = 0
-    for i in range(len(items)):
+    for i in range(len(items) + 1):
+        print("<script>alert('diff')</script>")
         result += items[i]
     return result
@@ -20,3 +21,3 @@ def other():
     a = 1
-    b = 2
+    b = 3
     return a + b
diff --git "a/docs/caf\\303\\251 <b>.md" "b/docs/caf\\303\\251 <b>.md"
new file mode 100644
--- /dev/null
+++ "b/docs/caf\\303\\251 <b>.md"
@@ -0,0 +1,2 @@
+# caf\u00e9
+javascript:alert(4)
"""


def finding(fid: str, file: str, line: int, end: int | None = None, *,
            claim: str = "a claim", severity: Severity = Severity.MAJOR,
            **more: object) -> Finding:
    return Finding.model_validate({
        "id": fid, "file": file, "line": line, "end_line": line if end is None else end,
        "severity": severity, "category": "correctness", "claim": claim,
        "raised_by": "agent_a", **more})


def record(outcome: ReviewOutcome | None, context: str | None = DIFF) -> SessionRecord:
    """A finished run's record as the store reads it back, built from the real types."""
    agents = {aid: AgentStatus(model=f"openai/{aid[-1]}", label_letter=aid[-1].upper(),
                               phase=AgentPhase.VOTED, answers=1)
              for aid in ("agent_a", "agent_b", "agent_c")}
    status = StatusRecord(session_id="01REVIEW", status=RunStatus.COMPLETED, phase=Phase.DONE,
                          question="Review a code change", started_at=0.0, updated_at=1.0,
                          agents=agents)
    result = ResultRecord(session_id="01REVIEW", status=RunStatus.COMPLETED,
                          question="Review a code change", final_answer="## Team review",
                          review=outcome)
    request = RequestRecord(question="Review a code change", context=context,
                            review=ReviewTarget(root="/repo", described="the working tree",
                                                files=["src/app.py"]))
    return SessionRecord(status=status, result=result, events=[], answers={},
                         request=request if outcome is not None else None)


def outcome(findings: list[Finding], rejected: list[Finding] | None = None) -> ReviewOutcome:
    return ReviewOutcome(
        verdict=Verdict.CHANGES_REQUESTED, threshold=Severity.MAJOR, agreement=2, members=3,
        winner="A1", summary="two problems", winner_by="agent_a", findings=findings,
        rejected=rejected or [],
        dissent=[Dissent(agent_id="agent_c", model="openai/c", voted_for="C1",
                         reason="the <b>query</b> is safe")])


class Rows(HTMLParser):
    """The rows of every diff table in order: (file, row class, cells' text), a finding's
    card as one cell; and every attribute the page carries."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, list[str]]] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.file = ""
        self._summary: list[str] | None = None
        self._cell: list[str] | None = None
        self._depth = 0  # of <td> being read (a card's own elements are inside one)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag == "summary":
            self._summary = []
        elif tag == "tr":
            self.rows.append((self.file, dict(attrs).get("class") or "", []))
        elif tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary" and self._summary is not None:
            self.file = "".join(self._summary).split(" · ")[0]
            self._summary = None
        elif tag == "td" and self._cell is not None and self.rows:
            self.rows[-1][2].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        for sink in (self._summary, self._cell):
            if sink is not None:
                sink.append(data)


def parsed(page: str) -> Rows:
    rows = Rows()
    rows.feed(page)
    return rows


def card_after(rows: Rows, file: str, new_line: int) -> str | None:
    """The text of the finding card right below ``file``'s row for new-side ``new_line``."""
    for i, (where, cls, cells) in enumerate(rows.rows):
        if where == file and cls in ("add", "ctx") and cells[1] == str(new_line):
            following = rows.rows[i + 1] if i + 1 < len(rows.rows) else None
            return following[2][0] if following and following[1] == "at" else None
    raise AssertionError(f"{file}:{new_line} is not a row of the diff")


def test_the_diff_is_parsed_with_new_side_numbers_and_git_quoted_paths() -> None:
    preamble, files = parse_diff(DIFF)
    assert preamble == []
    assert [f.path for f in files] == ["src/app.py", "docs/café <b>.md"]
    app = files[0]
    assert [d.new for d in app.lines if d.kind == "+"] == [3, 4, 22]
    assert [(d.kind, d.old, d.new) for d in app.lines if d.text.strip() == "return a + b"] == [
        (" ", 22, 23)]
    assert [d.new for d in files[1].lines if d.kind == "+"] == [1, 2]


def test_each_finding_is_placed_below_the_last_shown_line_of_its_range() -> None:
    _, files = parse_diff(DIFF)
    found = [finding("F1", "src/app.py", 3, 4), finding("F2", "./src/app.py", 20, 22),
             finding("F3", "src/app.py", 8, 19), finding("F4", "src/db.py", 2),
             finding("F5", "src/app.py", 23, 10**9)]
    placed = place(files, found)
    lines = files[0].lines
    assert {k: [found[n].id for n in v] for k, v in placed.at.items()} == {
        (0, next(i for i, d in enumerate(lines) if d.new == 4)): ["F1"],
        (0, next(i for i, d in enumerate(lines) if d.new == 22)): ["F2"],
        (0, next(i for i, d in enumerate(lines) if d.new == 23)): ["F5"]}
    assert [found[n].id for n in placed.elsewhere] == ["F3", "F4"]  # lines 8-19: not shown


def test_a_review_report_shows_verdict_findings_on_their_lines_rejected_and_dissent() -> None:
    agreed = [finding("F1", "src/app.py", 3, 4, claim="off-by-one", fix="use range(len(items))",
                      evidence="for i in range(len(items) + 1):", confirmed_by=["agent_b"],
                      backers=["agent_a", "agent_b"],
                      disputed_by=[Stance(agent_id="agent_c", reason="it is fine")]),
              finding("F2", "src/db.py", 2, claim="SQL injection", severity=Severity.BLOCKER),
              finding("F3", "docs/café <b>.md", 2, claim="a stray line", severity=Severity.NIT)]
    rejected = [finding("R1", "src/app.py", 1, claim="no docstring", severity=Severity.NIT,
                        tier="rejected", reason="it has one in the module",
                        disputed_by=[Stance(agent_id="agent_b", reason="it has one"),
                                     Stance(agent_id="agent_c", reason="fine")])]
    page = render_report(record(outcome(agreed, rejected)))
    rows = parsed(page)
    on_app = card_after(rows, "src/app.py", 4)
    assert on_app is not None and "off-by-one" in on_app and "major" in on_app
    assert ("agreed: backed by 2 of 3: raised by agent_a (openai/a), confirmed by agent_b "
            "(openai/b); disputed by 1 of 3") in on_app
    assert "disputed by agent_c (openai/c): it is fine" in on_app
    assert "Fix: use range(len(items))" in on_app
    assert card_after(rows, "src/app.py", 3) is None  # below where the range ends, not twice
    assert "a stray line" in (card_after(rows, "docs/café <b>.md", 2) or "")
    off, rest = page.split('<div id="off-diff">', 1)[1].split("</div>\n", 1)
    assert "SQL injection" in off and "off-by-one" not in off
    assert "no docstring" in rest.split('<div id="rejected">', 1)[1]
    assert "rejected: it has one in the module" in page
    assert 'id="verdict">changes requested</span>' in page
    assert "2 of 3 members backed the winning review A1" in page and "the working tree" in page
    assert ("The winning review&#x27;s own summary by agent_a (openai/a): two problems"
            in page)
    assert "agent_c (openai/c) (voted for C1): the &lt;b&gt;query&lt;/b&gt; is safe" in page
    assert page.count('class="sev blocker"') == 2  # its list entry and its card
    assert page.index('id="review"') < page.index("<h2>Final answer</h2>")


def test_hostile_findings_and_diffs_stay_text() -> None:
    agreed = [finding("F1", "src/app.py", 4, claim=HOSTILE, evidence=HOSTILE, fix=HOSTILE,
                      category=HOSTILE, disputed_by=[Stance(agent_id="agent_c",
                                                            reason=HOSTILE)]),
              finding("F2", HOSTILE, 1, claim=HOSTILE, sources=[HOSTILE])]
    page = render_report(record(outcome(agreed)))
    low = page.lower()
    assert "<script" not in low and "<img" not in low and "<b>" not in low
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;script&gt;alert(&#x27;diff&#x27;)&lt;/script&gt;" in page  # the diff's line
    rows = parsed(page)
    links = [(tag, value) for tag, name, value in rows.attrs if name in ("href", "src")]
    assert links == [("a", "#finding-1"), ("a", "#finding-2")]  # the page's own anchors only
    assert not any(name.startswith("on") for _, name, _ in rows.attrs)
    assert HOSTILE not in page
    # The card stays in its row: the claim's </td></tr></table> did not end the table.
    card = card_after(rows, "src/app.py", 4)
    assert card is not None and "alert(2)" in card and "javascript:alert(2)" in card


def test_a_plain_run_has_no_review_section() -> None:
    page = render_report(record(None))
    assert 'id="review"' not in page and REVIEW_CSS not in page and "finding" not in page


def test_without_the_diff_every_finding_is_listed_off_it() -> None:
    found = [finding("F1", "src/app.py", 4, claim="off-by-one")]
    page = render_report(record(outcome(found), context=None))
    assert "off-by-one" in page.split('<div id="off-diff">', 1)[1]
    assert "the record holds no diff" in page and 'id="diff"' not in page


def test_a_diff_the_size_of_the_context_renders_each_finding_in_place() -> None:
    """~180 kB, 6,000 changed lines and a finding on every tenth: every card at its line."""
    body = "".join(f"+line {n} {'x' * 20}\n" for n in range(1, 6001))
    diff = f"--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,6000 @@\n{body}"
    assert len(diff) > 170_000
    found = [finding(f"F{n}", "big.py", n, claim=f"claim {n}") for n in range(10, 6001, 10)]
    rows = parsed(render_report(record(outcome(found), context=diff)))
    assert card_after(rows, "big.py", 5990) is not None
    assert all(f"claim {n}" in (card_after(rows, "big.py", n) or "") for n in (10, 3000, 6000))
    assert sum(1 for _, cls, _ in rows.rows if cls == "at") == len(found)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """tests/review's fixture repository: an off-by-one and an SQL injection, unstaged."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "src" / "app.py").write_text(APP_BEFORE)
    (root / "src" / "db.py").write_text(DB_BEFORE)
    git(root, "add", ".")
    git(root, "commit", "-qm", "clean versions")
    (root / "src" / "app.py").write_text(APP_AFTER)
    (root / "src" / "db.py").write_text(DB_AFTER)
    return root


def test_a_real_review_writes_its_findings_on_the_diff_into_report_html(
        scripted: Scripted, repo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(reviewers)
    monkeypatch.chdir(repo)
    code = main(["review", "--models", "openai/a,openai/b,openai/c", "--base-url",
                 server.base_url, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    page = (Path(result["session_dir"]) / "report.html").read_text()
    rows = parsed(page)
    assert "off-by-one" in (card_after(rows, "src/app.py", 4) or "")
    assert "SQL injection" in (card_after(rows, "src/db.py", 2) or "")
    assert "total has no docstring" in page.split('<div id="unconfirmed">', 1)[1]
    assert 'id="verdict">blocked</span>' in page and "2 of 3 members backed" in page
    assert "agent_c (openai/c)" in page.split('id="dissent"', 1)[1]
    assert 'id="off-diff"' not in page
