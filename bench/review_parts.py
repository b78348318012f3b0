"""A review in parts (``python bench/run.py --only review_parts``).

A 1.5 MB diff over 60 new files (30 modules and their tests) reviewed by 3 scripted members
at 200 ms a call through the review's own path (``start_review``, then ``finish_review``:
the diff split by file into parts that each fit one run, reviewed at once, merged), against
one part of it reviewed alone by the same team: wall time, calls, prompt tokens (characters
sent / 4, server-counted) and the coverage.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.review import _git
from massgen_mcp.review.changes import collect
from massgen_mcp.review.diff import MAX_DIFF_BYTES
from massgen_mcp.review.parts import split
from massgen_mcp.review.request import review_spec
from massgen_mcp.review.start import ChangeToReview, finish_review, start_review
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer, agree, answer

LATENCY_S = 0.2
MODULES = 30
LINES = 520  # per file: 60 files, ~1.5 MB of diff
MODELS = ["openai/a", "openai/b", "openai/c"]


def _code(i: int) -> str:
    return "".join(f"def handler_{i}_{n}(request):  # the {n}th handler of module {i}\n"
                   f"    return respond(request, {n})\n" for n in range(LINES // 2))


def _repo(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# app\n")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "start")
    for i in range(MODULES):
        (root / "src" / f"mod{i}.py").write_text(_code(i))
        (root / "tests" / f"test_mod{i}.py").write_text(_code(1000 + i))
    _git(root, "add", "-N", "src", "tests")


def reviewer(req: ChatRequest) -> Reply:
    """Each member reports one nit on its part's first file and votes for the first review."""
    if req.vote_labels or req.is_final or req.is_check:
        return agree(req)
    first = req.user.split("+++ b/", 1)[1].split("\n", 1)[0] if "+++ b/" in req.user else "x"
    return answer(json.dumps({"summary": "one nit", "rejects": [], "findings": [
        {"file": first, "line": 1, "severity": "nit", "category": "docs",
         "claim": "the handler has no docstring", "fix": "add one"}]}))


def _counted(server: ScriptedServer, before: int) -> dict[str, int]:
    requests = server.requests[before:]
    return {"calls": len(requests),
            "prompt_tokens": sum(max(1, r.prompt_chars() // 4) for r in requests)}


async def _in_parts(server: ScriptedServer, root: Path, home: Path) -> dict[str, Any]:
    service = ConsensusService.local(home, Workspace(root, confined=False), drafts=False)
    before = len(server.requests)
    started = time.perf_counter()
    begun = await start_review(service, Workspace(root, confined=False), ChangeToReview(),
                               models=MODELS, base_url=server.base_url)
    result = await finish_review(service, begun)
    wall = time.perf_counter() - started
    await service.aclose()
    assert result.review is not None and result.review.coverage is not None
    coverage = result.review.coverage
    return {"wall_s": round(wall, 3), **_counted(server, before), "parts": len(begun.parts),
            "diff_bytes": len(begun.changes.diff.encode()), "status": str(result.status),
            "coverage": {"files": len(coverage.files), "lines": coverage.lines,
                         "total_lines": coverage.total_lines,
                         "percent": round(coverage.percent, 1),
                         "left_out": coverage.left_out}}


async def _one_part(server: ScriptedServer, root: Path, home: Path) -> dict[str, Any]:
    service = ConsensusService.local(home, Workspace(root, confined=False), drafts=False)
    changes = await collect(root)
    pieces = split(changes.diff, MAX_DIFF_BYTES)
    spec = review_spec(changes, models=MODELS, base_url=server.base_url,
                       part=(1, len(pieces.parts), pieces.parts[0]))
    before = len(server.requests)
    started = time.perf_counter()
    run = await service.start(spec)
    result = await service.wait(run.session_id, None)
    wall = time.perf_counter() - started
    await service.aclose()
    return {"wall_s": round(wall, 3), **_counted(server, before),
            "diff_bytes": len(pieces.parts[0].diff.encode()), "status": str(result.status)}


def bench_review_parts(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"files": 2 * MODULES, "members": 3, "latency_s": LATENCY_S}
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(
            reviewer, latency_s=LATENCY_S) as server:
        root = Path(tmp) / "repo"
        _repo(root)
        out["one_part"] = asyncio.run(_one_part(server, root, Path(tmp) / "home-one"))
        out["in_parts"] = asyncio.run(_in_parts(server, root, Path(tmp) / "home-all"))
    return out


def print_review_parts(data: dict[str, Any]) -> None:
    whole = data["in_parts"]
    print(f"review of a {whole['diff_bytes']:,}-byte diff over {data['files']} files, "
          f"{data['members']} scripted members at {data['latency_s'] * 1000:.0f} ms a call")
    print("                 parts  diff bytes  calls  prompt tokens  wall s")
    for name, row in (("one part alone", data["one_part"]), ("in parts", whole)):
        print(f"  {name:<14} {row.get('parts', 1):>5} {row['diff_bytes']:>11,} "
              f"{row['calls']:>6} {row['prompt_tokens']:>14,} {row['wall_s']:>7.2f}")
    cov = whole["coverage"]
    left = "; ".join(cov["left_out"]) or "nothing"
    print(f"  coverage: {cov['files']} files, {cov['lines']:,} of {cov['total_lines']:,} "
          f"changed lines ({cov['percent']}%); left out: {left}")


if __name__ == "__main__":
    result = bench_review_parts(quick=False)
    print_review_parts(result)
