"""Scripted review members for the fixture repository (tests/review/conftest.py): each
answers with a review in the format the run asks for, finds what its script says in the diff
it was sent, and votes as told, so a test knows who backs what.

* ``a`` finds both planted defects (the off-by-one, the SQL injection) and votes for its own
  review;
* ``b`` finds the injection and a nit, then votes for ``a``'s review;
* ``c`` finds only the off-by-one and calls the injection safe; it votes for its own review.
"""

from __future__ import annotations

import json
from typing import Any

from massgen_mcp.testing.scripted import ChatRequest, Reply, agree, answer, vote

OFF_BY_ONE: dict[str, Any] = {
    "file": "src/app.py", "line": 3, "end_line": 4, "severity": "major",
    "category": "correctness", "claim": "off-by-one: range(len(items) + 1) reads past the end",
    "evidence": "for i in range(len(items) + 1):", "fix": "use range(len(items))"}
INJECTION: dict[str, Any] = {
    "file": "src/db.py", "line": 2, "severity": "blocker", "category": "security",
    "claim": "SQL injection: the name is formatted into the query",
    "evidence": "cursor.execute(f\"SELECT * FROM users WHERE name = '{name}'\")",
    "fix": "pass the name as a parameter"}
NIT: dict[str, Any] = {
    "file": "src/app.py", "line": 1, "severity": "nit", "category": "docs",
    "claim": "total has no docstring", "fix": "add one"}
C_SAYS = "the off-by-one is real; the query only ever gets validated names"
MARKERS = {"range(len(items) + 1)": OFF_BY_ONE, "WHERE name = '{name}'": INJECTION}
FINDS = {"a": [OFF_BY_ONE, INJECTION], "b": [INJECTION, NIT], "c": [OFF_BY_ONE]}


def review_of(model: str, req: ChatRequest) -> str:
    found = [f for marker, f in MARKERS.items() if marker in req.user and f in FINDS[model]]
    if NIT in FINDS[model]:
        found.append(NIT)
    summary = C_SAYS if model == "c" else f"{len(found)} problems"
    return json.dumps({"summary": summary, "findings": found, "rejects": []})


def label_of_model(req: ChatRequest, model: str) -> str | None:
    """The shown review that ``model`` wrote (told by its summary and findings), if shown."""
    mine = json.loads(review_of(model, req))
    for label, content in req.answers.items():
        try:
            if json.loads(content) == mine:
                return label
        except ValueError:
            continue
    return None


def reviewers(req: ChatRequest) -> Reply:
    """The three members above; a final presentation or check as in every demo."""
    if req.is_final or req.is_check:
        return agree(req)
    if req.vote_labels:
        target = {"a": "a", "b": "a", "c": "c"}.get(req.model, "a")
        reason = C_SAYS if req.model == "c" else "it finds both defects"
        # a reads two files first: review may open without its review (the late rule);
        # b then backs its own until a's joins (which clears the votes), so the outcome
        # does not depend on timing.
        label = label_of_model(req, target) or label_of_model(req, req.model)
        return vote(label or sorted(req.answers)[0], reason)
    return answer(review_of(req.model if req.model in FINDS else "a", req))
