"""``massgen-mcp eval``: does the team beat its members on your questions?

One consensus run per question yields all three methods, because the protocol keeps first drafts
independent (no agent sees a peer's answer before it has written its own):

* **alone**: each agent's first draft is what that model answers on its own; its cost is the
  agent's calls before that draft, its time the moment the draft arrived;
* **majority**: the most common normalised first-draft answer (ties: the earliest draft), at the
  cost of every first-round call;
* **consensus**: the run's final answer, at the whole run's cost (its calls include the ones a
  decision cut off in flight: they were sent, and a provider may bill a prompt it had read).

So there is no second implementation of anything: the engine runs once, the record is read.

Scoring (:func:`extract` and :func:`is_correct`): the question is sent with a request to end on a
line ``Answer: <answer>``; the candidate is that line's text, else the whole reply. A letter
answer (``A``-``J``) matches the candidate's last standalone capital letter; a numeric answer
matches the candidate's last number (commas, ``$`` and ``%`` ignored, relative tolerance 1e-6);
anything else matches the candidate lower-cased with punctuation and spaces removed.

Results go to ``<home>/evals/<name>/results.json`` after every question, so an interrupted
evaluation resumes where it stopped (re-run the same command), and to ``summary.html``.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from massgen_mcp.api.python import follow
from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.records import CallPurpose, Event, EventType
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.service import ConsensusService

ANSWER_LINE = "\n\nEnd your reply with a last line of the form 'Answer: <your final answer>'."
_ANSWER = re.compile(r"^\s*\**answer\**\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_LETTER = re.compile(r"(?<![A-Za-z])([A-J])(?![A-Za-z])")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
MAX_QUESTIONS = 1_000


@dataclass(frozen=True)
class Item:
    question: str
    answer: str


def load_questions(path: Path) -> list[Item]:
    """The JSONL file's ``{question, answer}`` lines; a bad line is an error naming it."""
    items = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            data = load_json(raw)
        except UnsafeJson as exc:
            raise ConfigError(f"{path.name}:{number}: {exc}; each line must be one JSON "
                              "object in UTF-8") from None
        if not isinstance(data, dict) or not isinstance(data.get("question"), str) or (
                not isinstance(data.get("answer"), str | int | float)):
            raise ConfigError(f"{path.name}:{number}: expected {{\"question\": \"...\", "
                              "\"answer\": \"...\"}")
        items.append(Item(data["question"].strip(), str(data["answer"]).strip()))
    if not items:
        raise ConfigError(f"{path.name}: no questions")
    if len(items) > MAX_QUESTIONS:
        raise ConfigError(f"{path.name}: {len(items)} questions; the limit is {MAX_QUESTIONS}")
    return items


def extract(reply: str) -> str:
    """The part of a reply that is its answer: the last 'Answer:' line, else all of it."""
    found = _ANSWER.findall(reply)
    return found[-1] if found else reply


def _number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace("$", "").replace("%", ""))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def normalise(text: str, expected: str) -> str | None:
    """The comparable form of ``text`` for an ``expected`` answer's kind (None: none found)."""
    candidate = extract(text)
    if re.fullmatch(r"[A-J]", expected):
        letters = _LETTER.findall(candidate)
        return letters[-1] if letters else None
    if _number(expected) is not None and re.fullmatch(r"[-$\d.,%\s]+", expected):
        value = _number(candidate)
        return None if value is None else repr(value)
    return re.sub(r"[\W_]+", "", candidate.lower()) or None


def is_correct(reply: str | None, expected: str) -> bool:
    if not reply:
        return False
    got = normalise(reply, expected)
    if got is None:
        return False
    if re.fullmatch(r"[A-J]", expected):
        return got == expected
    want = _number(expected)
    if want is not None and re.fullmatch(r"[-$\d.,%\s]+", expected):
        return math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-9)
    return got == re.sub(r"[\W_]+", "", expected.lower())


@dataclass
class Method:
    """One method's answer to one question, and what it cost."""

    answer: str | None
    correct: bool
    calls: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


async def score_run(service: ConsensusService, session_id: str, expected: str) -> dict[str, Any]:
    """The three methods' results for one finished run, from its record."""
    result = await service.result(session_id)
    events = service.events(session_id)
    first: dict[str, Event] = {}
    for event in events:
        if event.type is EventType.ANSWER and event.agent_id and event.agent_id not in first:
            first[event.agent_id] = event
    alone: dict[str, Method] = {}
    round_one: list[Event] = []  # every agent's calls up to its first draft
    for agent_id in result.agents:
        draft = first.get(agent_id)
        text = service.answer(session_id, draft.label) if draft and draft.label \
            else None
        calls = [e for e in events if e.type is EventType.CALL and e.agent_id == agent_id
                 and e.purpose in (CallPurpose.ANSWER, CallPurpose.EVIDENCE)
                 and (draft is None or e.seq < draft.seq)]
        round_one += calls
        alone[agent_id] = Method(text, is_correct(text, expected), **_cost(calls),
                                 seconds=round((draft.t or 0.0) if draft else 0.0, 3))
    drafts = [(first[a].seq, alone[a].answer) for a in alone if a in first]
    keyed = [(normalise(text or "", expected), seq, text) for seq, text in sorted(drafts)]
    counts = Counter(key for key, _, _ in keyed if key is not None)
    majority_text = None
    if counts:
        top = max(counts.values())
        majority_text = next(text for key, _, text in keyed
                             if key is not None and counts[key] == top)
    majority = Method(majority_text, is_correct(majority_text, expected), **_cost(round_one),
                      seconds=max((m.seconds for m in alone.values()), default=0.0))
    usage = result.usage
    consensus = Method(result.final_answer, is_correct(result.final_answer, expected),
                       calls=usage.calls, tokens=usage.total_tokens, cost_usd=usage.cost_usd,
                       seconds=round(result.elapsed_s or 0.0, 3))
    return {"session_id": session_id, "status": result.status.value,
            "models": {a: r.model for a, r in result.agents.items()},
            "alone": {a: m.as_dict() for a, m in alone.items()},
            "majority": majority.as_dict(), "consensus": consensus.as_dict()}


def _cost(calls: list[Event]) -> dict[str, Any]:
    costs = [e.cost_usd for e in calls]
    return {"calls": len(calls),
            "tokens": sum((e.prompt_tokens or 0) + (e.completion_tokens or 0) for e in calls),
            "cost_usd": None if any(c is None for c in costs) else round(sum(
                c for c in costs if c is not None), 6)}


@dataclass
class Evaluation:
    """Every question's record, written after each one (so a re-run resumes)."""

    folder: Path
    items: list[Item]
    done: dict[str, dict[str, Any]] = field(default_factory=dict)

    @staticmethod
    def key(item: Item) -> str:
        return hashlib.sha256(f"{item.question}\0{item.answer}".encode()).hexdigest()[:16]

    def load(self) -> None:
        path = self.folder / "results.json"
        if path.is_file():
            self.done = json.loads(path.read_text(encoding="utf-8")).get("questions", {})

    def save(self) -> None:
        from massgen_mcp.core.files import atomic_write

        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.folder / "results.json",
                     json.dumps({"summary": self.summary(), "questions": self.done}, indent=2))
        atomic_write(self.folder / "summary.html", render_html(self.summary()))

    def summary(self) -> dict[str, Any]:
        rows = [self.done[self.key(i)] for i in self.items if self.key(i) in self.done]
        methods: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            for agent_id, method in row["alone"].items():
                methods.setdefault(f"alone:{agent_id} ({row['models'][agent_id]})",
                                   []).append(method)
        methods["majority"] = [row["majority"] for row in rows]
        methods["consensus"] = [row["consensus"] for row in rows]
        table = {name: _aggregate(found) for name, found in methods.items() if found}
        alone = {k: v for k, v in table.items() if k.startswith("alone:")}
        best = max(alone, key=lambda k: alone[k]["accuracy"]) if alone else None
        beat = lost = 0
        if best:
            agent = best.split(" ", 1)[0].removeprefix("alone:")
            for row in rows:
                team, member = row["consensus"]["correct"], row["alone"][agent]["correct"]
                beat += team and not member
                lost += member and not team
        return {"questions": len(rows), "of": len(self.items), "methods": table,
                "best_member": best, "team_beat_best": beat, "team_lost_to_best": lost}


def _aggregate(found: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(found)
    costs = [m["cost_usd"] for m in found]
    return {"accuracy": round(sum(m["correct"] for m in found) / n, 4),
            "mean_calls": round(sum(m["calls"] for m in found) / n, 2),
            "mean_tokens": round(sum(m["tokens"] for m in found) / n, 1),
            "cost_usd": None if any(c is None for c in costs) else round(sum(costs), 6),
            "mean_seconds": round(sum(m["seconds"] for m in found) / n, 3)}


async def evaluate(service: ConsensusService, items: list[Item], folder: Path,
                   make_spec: Callable[[str], RunSpec],
                   on_question: Callable[[int, dict[str, Any]], None] | None = None
                   ) -> Evaluation:
    """Run every question not already recorded in ``folder``; returns the evaluation."""
    evaluation = Evaluation(folder, items)
    evaluation.load()
    for index, item in enumerate(items):
        key = Evaluation.key(item)
        if key in evaluation.done:
            continue
        started = await service.start(make_spec(item.question + ANSWER_LINE))
        await follow(service, started.session_id)
        row = await score_run(service, started.session_id, item.answer)
        evaluation.done[key] = {"question": item.question, "expected": item.answer, **row}
        evaluation.save()
        if on_question is not None:
            on_question(index, evaluation.done[key])
    evaluation.save()
    return evaluation


def format_table(summary: dict[str, Any]) -> str:
    lines = [f"{'method':44} {'accuracy':>8} {'calls':>6} {'tokens':>8} {'cost $':>9} "
             f"{'seconds':>8}"]
    for name, row in summary["methods"].items():
        cost = "unknown" if row["cost_usd"] is None else f"{row['cost_usd']:.4f}"
        lines.append(f"{name[:44]:44} {row['accuracy']:8.0%} {row['mean_calls']:6.1f} "
                     f"{row['mean_tokens']:8.0f} {cost:>9} {row['mean_seconds']:8.2f}")
    if summary["best_member"]:
        lines.append(f"team vs best member ({summary['best_member']}): right where it was wrong "
                     f"{summary['team_beat_best']}x, wrong where it was right "
                     f"{summary['team_lost_to_best']}x ({summary['questions']} of "
                     f"{summary['of']} questions)")
    return "\n".join(lines)


def render_html(summary: dict[str, Any]) -> str:
    """A self-contained page with the table (everything escaped)."""
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{row['accuracy']:.0%}</td>"
        f"<td>{row['mean_calls']}</td><td>{row['mean_tokens']}</td>"
        f"<td>{'unknown' if row['cost_usd'] is None else row['cost_usd']}</td>"
        f"<td>{row['mean_seconds']}</td></tr>" for name, row in summary["methods"].items())
    return ("<!doctype html><meta charset=utf-8><title>massgen-mcp eval</title>"
            "<style>body{font:14px system-ui;margin:2em}td,th{padding:4px 10px;text-align:"
            "right}td:first-child{text-align:left}</style><h1>massgen-mcp eval</h1>"
            f"<p>{summary['questions']} of {summary['of']} questions</p><table><tr>"
            "<th>method</th><th>accuracy</th><th>mean calls</th><th>mean tokens</th>"
            f"<th>cost $</th><th>mean seconds</th></tr>{rows}</table>"
            f"<p>{html.escape(format_table(summary).splitlines()[-1])}</p>")
