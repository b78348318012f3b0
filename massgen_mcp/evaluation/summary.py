"""From an evaluation's results to the figures a person compares: accuracy with a 95 % bootstrap
interval, cost per question and per right answer, and paired tests of the team against the
fair baselines.

The methods, on the same questions:

* each member **alone** (its first draft in the team's run);
* the **majority of first drafts** (what voting alone buys, Choi et al. 2025);
* the best member's **self-consistency** at equal compute (k of its own drafts, majority);
* the **ceiling**: any member right, the most any way of choosing among the drafts could reach
  (its complement, every member wrong, caps what the team can do);
* the **consensus** of each compared option set.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel

from massgen_mcp.evaluation.records import Method, QuestionRow
from massgen_mcp.evaluation.runner import Plan, Results, key
from massgen_mcp.evaluation.stats import bootstrap_interval, cost_per_correct, mcnemar
from massgen_mcp.render.format import usd

Pick = Callable[[QuestionRow], Method | None]  # one method's result for a question, if any


class MethodKind(StrEnum):
    CONSENSUS = "consensus"
    MEMBER = "member"
    MAJORITY = "majority"
    SELF_CONSISTENCY = "self_consistency"
    CEILING = "ceiling"


class MethodScore(BaseModel):
    """One method over the questions it answered: accuracy with its 95 % bootstrap interval,
    and its mean cost."""

    name: str
    kind: MethodKind
    accuracy: float
    interval: tuple[float, float]
    correct: int
    n: int
    mean_calls: float
    mean_tokens: float
    cost_usd: float | None  # None: some call's price was unknown
    cost_per_question: float | None
    cost_per_correct: float | None
    mean_seconds: float


class Comparison(BaseModel):
    """McNemar's exact test of method ``a`` against ``b`` on the questions both answered."""

    a: str
    b: str
    a_only: int
    b_only: int
    both: int
    neither: int
    p_value: float


class BestMemberNote(BaseModel):
    """The best member's method name, how it was chosen, and whether that choice saw the
    labels."""

    name: str
    chosen_by: str
    warning: str | None


class ItemOutcome(BaseModel):
    """One question, and which methods got it right (None: not scored by that method)."""

    question: str
    expected: str
    source: str
    correct: dict[str, bool | None]


class EvalSummary(BaseModel):
    """The figures of an evaluation: what the table prints and summary.html draws."""

    name: str
    questions: int
    of: int
    settings: dict[str, Any]
    methods: list[MethodScore]
    best_member: BestMemberNote | None
    all_wrong: float | None  # the share of questions every member got wrong
    comparisons: list[Comparison]
    items: list[ItemOutcome]


def summarise(results: Results, plan: Plan, *, seed: int = 0) -> EvalSummary:
    rows = [results.rows[key(i)] for i in plan.items if key(i) in results.rows]
    first = plan.arms[0].name
    team_rows = [run for r in rows if (run := r.arms.get(first))]
    agents = list(team_rows[0].alone) if team_rows else []
    models = team_rows[0].models if team_rows else {}

    def arm(name: str, part: Literal["consensus", "majority"]) -> Pick:
        return lambda r: getattr(run, part) if (run := r.arms.get(name)) else None

    def member(agent: str) -> Pick:
        return lambda r: run.alone.get(agent) if (run := r.arms.get(first)) else None

    def ceiling(r: QuestionRow) -> Method | None:
        team = r.arms.get(first)
        if team is None:
            return None
        return team.majority.model_copy(
            update={"correct": any(m.correct for m in team.alone.values())})

    def label(name: str) -> str:
        return f"consensus [{name or 'as given'}]" if len(plan.arms) > 1 else "consensus"

    picks: list[tuple[MethodKind, str, Pick]] = [
        (MethodKind.CONSENSUS, label(first), arm(first, "consensus"))]
    picks += [(MethodKind.MEMBER, f"alone: {a} ({models.get(a)})", member(a)) for a in agents]
    picks.append((MethodKind.MAJORITY, "majority of first drafts", arm(first, "majority")))
    best = results.best
    if best is not None:
        picks.append((MethodKind.SELF_CONSISTENCY,
                      f"self-consistency: {best.agent_id} ×{best.samples}",
                      lambda r: r.self_consistency))
    if agents:
        picks.append((MethodKind.CEILING, "any member right (ceiling)", ceiling))
    picks += [(MethodKind.CONSENSUS, label(a.name), arm(a.name, "consensus"))
              for a in plan.arms[1:]]

    methods = [m for kind, name, pick in picks if (m := _method(kind, name, pick, rows, seed))]
    names = {name: pick for _, name, pick in picks}
    pairs = []
    if best is not None:
        pairs.append(f"alone: {best.agent_id} ({best.model})")
        pairs.append(f"self-consistency: {best.agent_id} ×{best.samples}")
    pairs.append("majority of first drafts")
    comparisons = [_paired(label(first), other, names, rows) for other in pairs
                   if other in names]
    comparisons += [_paired(label(a.name), label(first), names, rows) for a in plan.arms[1:]]
    ceiling_row = next((m for m in methods if m.kind is MethodKind.CEILING), None)
    return EvalSummary(
        name=plan.folder.name, questions=len(rows), of=len(plan.items), settings=plan.settings,
        methods=methods,
        best_member=None if best is None else BestMemberNote(
            name=f"alone: {best.agent_id} ({best.model})",
            chosen_by=f"{best.chosen_by}; k = {best.samples} samples "
                      f"(team {best.team_mean_calls} calls a question, "
                      f"{best.calls_per_sample} a sample)",
            warning=best.warning),
        all_wrong=None if ceiling_row is None else round(1 - ceiling_row.accuracy, 4),
        comparisons=[c for c in comparisons if c is not None],
        items=[ItemOutcome(question=r.question, expected=r.expected, source=r.source,
                           correct={name: (found.correct if (found := pick(r)) else None)
                                    for _, name, pick in picks}) for r in rows])


def _method(kind: MethodKind, name: str, pick: Pick, rows: list[QuestionRow],
            seed: int) -> MethodScore | None:
    found = [m for r in rows if (m := pick(r)) is not None]
    if not found:
        return None
    n = len(found)
    outcomes = [m.correct for m in found]
    costs = [m.cost_usd for m in found]
    total = None if any(c is None for c in costs) else round(
        sum(c for c in costs if c is not None), 6)
    interval = bootstrap_interval(outcomes, seed=seed)
    return MethodScore(
        name=name, kind=kind, accuracy=round(sum(outcomes) / n, 4),
        interval=(interval.low, interval.high), correct=sum(outcomes), n=n,
        mean_calls=round(sum(m.calls for m in found) / n, 2),
        mean_tokens=round(sum(m.tokens for m in found) / n, 1),
        cost_usd=total, cost_per_question=None if total is None else round(total / n, 6),
        cost_per_correct=cost_per_correct(total, sum(outcomes)),
        mean_seconds=round(sum(m.seconds for m in found) / n, 3))


def _paired(a: str, b: str, picks: dict[str, Pick], rows: list[QuestionRow]
            ) -> Comparison | None:
    """McNemar's exact test of ``a`` against ``b`` on the questions both answered."""
    both = [(x, y) for r in rows if (x := picks[a](r)) and (y := picks[b](r))]
    if not both:
        return None
    test = mcnemar([x.correct for x, _ in both], [y.correct for _, y in both])
    return Comparison(a=a, b=b, a_only=test.a_only, b_only=test.b_only, both=test.both,
                      neither=test.neither, p_value=test.p_value)


def format_table(summary: EvalSummary) -> str:
    """The terminal's view: one line a method, then the paired tests."""
    lines = [f"{'method':40} {'accuracy':>8} {'95% interval':>13} {'calls':>6} {'tokens':>7} "
             f"{'$/question':>10} {'$/right':>9} {'seconds':>7}"]
    for m in summary.methods:
        low, high = m.interval
        lines.append(
            f"{m.name[:40]:40} {m.accuracy:8.0%} {f'{low:.0%}–{high:.0%}':>13} "
            f"{m.mean_calls:6.1f} {m.mean_tokens:7.0f} {usd(m.cost_per_question):>10} "
            f"{usd(m.cost_per_correct):>9} {m.mean_seconds:7.2f}")
    for c in summary.comparisons:
        lines.append(f"{c.a} vs {c.b}: right only by the first {c.a_only}x, only by "
                     f"the second {c.b_only}x; McNemar exact p = {c.p_value:.3g}")
    best = summary.best_member
    if best:
        lines.append(f"best member: {best.name}, {best.chosen_by}")
        if best.warning:
            lines.append(f"  note: {best.warning}")
    if summary.all_wrong is not None:
        lines.append(f"every member wrong on {summary.all_wrong:.0%} of questions "
                     f"({summary.questions} of {summary.of} scored)")
    return "\n".join(lines)
