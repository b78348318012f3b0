"""The review section of the benchmarks (``python bench/run.py --only review``).

A 300-line diff (one new module with a planted SQL injection, and a changed ``.env`` holding
a canary) reviewed by 3 scripted members at 200 ms a call, against the same code sent through
``run_consensus``'s way, ``context_files``, with the same team: calls, prompt tokens
(characters sent / 4, server-counted), wall time, and the canary bytes any request carried.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from massgen_mcp.core.spec import RunSpec
from massgen_mcp.review.changes import collect
from massgen_mcp.review.request import review_spec
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, answer

LATENCY_S = 0.2
LINES = 300
CANARY = "sk-bench-canary-0c4f1e"
FINDING = {"file": "src/store.py", "line": 151, "severity": "blocker", "category": "security",
           "claim": "SQL injection: the key is formatted into the query",
           "evidence": "cursor.execute(f\"SELECT v FROM kv WHERE k = '{key}'\")",
           "fix": "pass the key as a parameter"}


def _module() -> str:
    lines = ['"""A key-value store on SQLite."""', ""]
    while len(lines) < LINES - 4:
        n = len(lines)
        lines += [f"def helper_{n}(cursor, value):", f"    return value * {n}", ""]
    get = ["def get(cursor, key):",
           "    cursor.execute(f\"SELECT v FROM kv WHERE k = '{key}'\")",
           "    return cursor.fetchone()", ""]
    lines = [*lines[:150], *get, *lines[150:]]
    return "\n".join(lines[:LINES]) + "\n"


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def _repo(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# kv\n")
    (root / ".env").write_text("DB=kv.sqlite\n")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "start")
    (root / "src" / "store.py").write_text(_module())
    (root / ".env").write_text(f"DB=kv.sqlite\nAPI_KEY={CANARY}\n")
    _git(root, "add", "-N", "src/store.py")


def reviewer(req: ChatRequest) -> Reply:
    """Each member reports the injection and votes for the first review shown."""
    if req.vote_labels or req.is_final or req.is_check:
        return agree(req)
    if "<question>\nReview a code change" in req.user:
        return answer(json.dumps({"summary": "one blocker", "findings": [FINDING],
                                  "rejects": []}))
    return answer("src/store.py:151 blocker: SQL injection; pass the key as a parameter")


async def _one(server: ScriptedServer, root: Path, home: Path, *, as_review: bool
               ) -> dict[str, Any]:
    service = ConsensusService.local(home, Workspace(root, confined=False), drafts=False)
    models = ["openai/a", "openai/b", "openai/c"]
    before = len(server.requests)
    started = time.perf_counter()
    if as_review:
        changes = await collect(root)
        spec = review_spec(changes, models=models, base_url=server.base_url)
    else:
        spec = RunSpec(question="Review this new module for bugs and security problems.",
                       models=models, base_url=server.base_url,
                       context_files=["src/store.py"])
    run = await service.start(spec)
    result = await service.wait(run.session_id, None)
    wall = time.perf_counter() - started
    await service.aclose()
    requests = server.requests[before:]
    sent = "".join(json.dumps(r.body) for r in requests)
    return {"wall_s": wall, "calls": len(requests),
            "prompt_tokens": sum(max(1, r.prompt_chars() // 4) for r in requests),
            "canary_bytes": sent.count(CANARY) * len(CANARY), "status": str(result.status)}


def bench_review(quick: bool) -> dict[str, Any]:
    repeats = 1 if quick else 3
    out: dict[str, Any] = {"diff_lines": LINES, "members": 3, "latency_s": LATENCY_S}
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(
            reviewer, latency_s=LATENCY_S) as server:
        root = Path(tmp) / "repo"
        _repo(root)
        for name, as_review in (("review", True), ("context_files", False)):
            runs = [asyncio.run(_one(server, root, Path(tmp) / f"home-{name}-{i}",
                                     as_review=as_review)) for i in range(repeats)]
            out[name] = {"calls": runs[0]["calls"], "prompt_tokens": runs[0]["prompt_tokens"],
                         "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
                         "canary_bytes": sum(r["canary_bytes"] for r in runs),
                         "status": runs[0]["status"]}
    return out


def print_review(data: dict[str, Any]) -> None:
    print(f"review of a {data['diff_lines']}-line diff, {data['members']} scripted members "
          f"at {data['latency_s'] * 1000:.0f} ms a call")
    print("                       calls  prompt tokens  wall s  canary bytes")
    for name in ("review", "context_files"):
        row = data[name]
        print(f"  {name:<18} {row['calls']:>7} {row['prompt_tokens']:>14,} "
              f"{row['wall_s']:>7.2f} {row['canary_bytes']:>13}")
