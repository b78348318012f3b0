"""The review from Python: ``massgen_mcp.api.review`` (and ``areview``) on the fixture
repository, the team a scripted model server over HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from massgen_mcp.api import areview, review
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.outcomes import Severity, Verdict
from massgen_mcp.core.records import RunStatus
from tests.helpers import Scripted
from tests.review.conftest import CANARY, git
from tests.review.test_cli import reviewer, sent


def test_review_returns_the_result_with_its_review(scripted: Scripted, repo: Path,
                                                   home: Path) -> None:
    """The working tree of ``repo`` (not the working folder), reviewed to the end."""
    server = scripted(reviewer)
    result = review(models=["openai/a", "openai/b", "openai/c"], base_url=server.base_url,
                    repo=repo, focus="security")
    assert result.status is RunStatus.COMPLETED
    assert result.review is not None
    assert result.review.verdict is Verdict.BLOCKED
    assert [(f.file, f.severity) for f in result.review.findings] == [
        ("src/db.py", Severity.BLOCKER), ("src/app.py", Severity.MAJOR)]
    assert (home / "sessions" / result.session_id / "result.json").is_file()
    assert CANARY not in sent(server)


async def test_areview_of_a_patch_given_as_text(scripted: Scripted, repo: Path) -> None:
    server = scripted(reviewer)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "defects")
    patch = git(repo, "diff", "HEAD~1", "HEAD").decode()
    git(repo, "checkout", "-q", "HEAD~1")
    result = await areview(patch=patch, repo=repo, fail_on="blocker",
                           models=[f"openai/{m}@{server.base_url}" for m in "abc"])
    assert result.review is not None
    assert result.review.threshold is Severity.BLOCKER
    assert {f.file for f in result.review.findings} == {"src/db.py", "src/app.py"}
    assert CANARY not in sent(server)


async def test_bad_input_raises_a_config_error_naming_the_field(repo: Path) -> None:
    model = ["openai/a@http://127.0.0.1:9/v1"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"fail_on": "critical"},
         "fail_on: 'critical' is not one of blocker, major, minor, nit"),
        ({"fail_on_tier": "agred"},
         "fail_on_tier: 'agred' is not one of agreed, unconfirmed"),
        ({"options": {"timeout_s": -1}}, "options.timeout_s: "),
        ({"staged": True, "commit": "HEAD"}, "commit: give one of"),
        ({"patch": "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n"},
         "patch: '../x' leaves the repository")]
    for kwargs, says in cases:
        with pytest.raises(ConfigError, match="^" + re.escape(says)):
            await areview(repo=repo, models=model, **kwargs)
