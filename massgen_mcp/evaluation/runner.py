"""Run an evaluation: every question through the team (once per compared option set), then the
best member's self-consistency at equal compute; results written after every question.

Two passes, because the fair baseline depends on the first: self-consistency samples the best
member k times, with k chosen so its calls match the team's mean calls, and both "best" and
"the team's mean calls" are known only once the team has run. A member named up front
(``best_member``) is chosen without looking at the labels; one chosen by its first-draft accuracy
on these same questions is flagged in the summary, since that choice has seen the answers.

``results.json`` holds every finished question (keyed by question and answer), so re-running
the same command resumes where an interrupted one stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from massgen_mcp.api.python import follow
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import replace_file
from massgen_mcp.core.options import MAX_AGENTS
from massgen_mcp.core.records import AgentPhase, RunKind, RunStatus, clip
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.spec import RunSpec, validation_problems
from massgen_mcp.evaluation.answers import expected_answer, is_correct, normalise
from massgen_mcp.evaluation.datasets import Item
from massgen_mcp.evaluation.records import MAX_SAMPLES, BestMember, Method, QuestionRow
from massgen_mcp.evaluation.scoring import first_drafts, score_run
from massgen_mcp.evaluation.stats import equal_compute_samples, majority
from massgen_mcp.service import ConsensusService

ANSWER_LINE = "\n\nEnd your reply with a last line of the form 'Answer: <your final answer>'."
RENDER_EVERY_S = 10.0


@dataclass(frozen=True)
class Arm:
    """One option set under test: its name (``""`` when there is only one) and how it turns a
    question into a run."""

    name: str
    spec: Callable[[str], RunSpec]


@dataclass
class Plan:
    items: list[Item]
    arms: list[Arm]
    folder: Path
    pattern: re.Pattern[str] | None = None
    self_consistency: bool = True
    best_member: str | None = None  # an agent id or a model, named before any result is seen
    samples: int | None = None  # k for self-consistency; default: equal compute
    concurrency: int = 1
    settings: dict[str, Any] = field(default_factory=dict)


Progress = Callable[[str, int, int, QuestionRow], None]  # (pass, done, total, row)
# (pass, done, total, status): a run of the pass has started (its first status) or changed.
# A question takes a whole team run, minutes on a small machine: what its agents are doing is
# the only news between two finished questions.
Activity = Callable[[str, int, int, StatusRecord], None]


def key(item: Item) -> str:
    return hashlib.sha256(f"{item.question}\0{item.answer}".encode()).hexdigest()[:16]


# What a stored result depends on: a re-run with other values would mix answers scored or
# sampled differently, so it is refused rather than resumed.
# (--compare is not among them: each option set's runs are stored under its own name.)
RESULT_SETTINGS = ("dataset", "fields", "team", "answer_regex", "best_member", "samples")
RESULTS_VERSION = 2


def fingerprint(settings: dict[str, Any]) -> str:
    chosen = {k: settings.get(k) for k in RESULT_SETTINGS}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Results:
    """``results.json``: the settings, every finished question, and the best-member choice."""

    folder: Path
    rows: dict[str, QuestionRow] = field(default_factory=dict)
    best: BestMember | None = None

    def load(self, settings: dict[str, Any] | None = None) -> None:
        """Read what an earlier run of the same evaluation stored. With ``settings``, a file
        made with other result-changing settings, by another version, or damaged is refused
        (naming the fix), never half-trusted."""
        path = self.folder / "results.json"
        if not path.is_file():
            return
        fix = (f"{path}: {{}}; to keep it, give this evaluation another --name; to start "
               "over, delete that folder")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(fix.format(f"unreadable ({type(exc).__name__})")) from None
        if not isinstance(data, dict) or data.get("version") != RESULTS_VERSION or not (
                isinstance(data.get("questions"), dict)):
            raise ConfigError(fix.format("made by another version of massgen-mcp eval"))
        if settings is not None and data.get("fingerprint") != fingerprint(settings):
            raise ConfigError(fix.format(
                "made with other settings (" + ", ".join(RESULT_SETTINGS) + ")"))
        best = data.get("best_member")
        try:
            self.best = None if best is None else BestMember.model_validate(best)
        except ValidationError:
            raise ConfigError(fix.format("its best_member entry is damaged")) from None
        rows = {}
        for name, row in data["questions"].items():
            try:
                rows[name] = QuestionRow.model_validate(row)
            except ValidationError as exc:
                where, why = validation_problems(exc)[0]  # keys from the file, so clipped
                problem = clip(f"{where or 'entry'}: {why}", 200)[0]
                raise ConfigError(fix.format(
                    f"question {clip(name, 40)[0]}'s entry is damaged ({problem})")) from None
        self.rows = rows

    def save(self, settings: dict[str, Any], html: str | None = None) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        replace_file(self.folder / "results.json", json.dumps(
            {"version": RESULTS_VERSION, "fingerprint": fingerprint(settings),
             "settings": settings,
             "best_member": None if self.best is None else self.best.model_dump(),
             "questions": {k: row.model_dump() for k, row in self.rows.items()}},
            indent=2))
        if html is not None:
            replace_file(self.folder / "summary.html", html)


async def evaluate(service: ConsensusService, plan: Plan, *,
                   on_progress: Progress | None = None,
                   render: Callable[[Results], str] | None = None,
                   on_activity: Activity | None = None) -> Results:
    """Run what ``plan.folder`` does not hold yet; returns every result. ``on_progress``
    hears each question done, ``on_activity`` each run's statuses while it goes on."""
    results = Results(plan.folder)
    results.load(plan.settings)
    lock = asyncio.Lock()  # one writer of results.json at a time
    slots = asyncio.Semaphore(max(1, plan.concurrency))
    rendered = [0.0]  # when summary.html was last written

    async def save(final: bool = False) -> None:
        """results.json after every question; summary.html (bootstrap intervals for every
        method, so its cost grows with the questions) at most every RENDER_EVERY_S."""
        async with lock:
            due = final or time.monotonic() - rendered[0] >= RENDER_EVERY_S
            results.save(plan.settings, render(results) if render and due else None)
            if due:
                rendered[0] = time.monotonic()

    async def team(item: Item) -> None:
        row = results.rows.setdefault(key(item), QuestionRow(
            question=item.question, expected=item.answer, source=item.source))
        expected = expected_answer(item.answer)
        for arm in plan.arms:  # a run that failed or timed out counts as wrong, and runs again
            done = row.arms.get(arm.name)
            if done is not None and done.status is RunStatus.COMPLETED:  # on a resume
                continue
            async with slots:
                started = await service.start(arm.spec(item.question + ANSWER_LINE),
                                              kind=RunKind.EVAL)
                await _follow(service, started.session_id, _heard(
                    on_activity, "team", team_done, len(plan.items)))
            row.arms[arm.name] = await score_run(service, started.session_id, expected,
                                                    plan.pattern)
        await save()
        if on_progress:
            on_progress("team", team_done(), len(plan.items), row)

    def team_done() -> int:
        return sum(_team_done(r, plan) for r in results.rows.values())

    await _each(plan.items, team)
    if not plan.self_consistency:
        await save(final=True)
        return results
    results.best = results.best or choose_best(results, plan)
    best = results.best
    if best is None:
        await save(final=True)
        return results

    async def sample(item: Item) -> None:
        row = results.rows[key(item)]
        if row.self_consistency is not None:
            return
        async with slots:
            row.self_consistency = await self_consistency(
                service, row.arms[plan.arms[0].name].session_id, best.agent_id, best.samples,
                item, plan.pattern, plan.arms[0].spec(item.question),
                on_status=_heard(on_activity, "self-consistency", sampled, len(plan.items)))
        await save()
        if on_progress:
            on_progress("self-consistency", sampled(), len(plan.items), row)

    def sampled() -> int:
        return sum(r.self_consistency is not None for r in results.rows.values())

    await _each(plan.items, sample)
    await save(final=True)
    return results


StatusCallback = Callable[[StatusRecord], Awaitable[None]]


def _heard(on_activity: Activity | None, stage: str, done: Callable[[], int],
           total: int) -> StatusCallback | None:
    """``on_activity`` as a run's status callback for ``stage`` (``done`` counts the
    questions it has finished)."""
    if on_activity is None:
        return None
    hear = on_activity

    async def on_status(status: StatusRecord) -> None:
        hear(stage, done(), total, status)

    return on_status


async def _first_status(service: ConsensusService, session_id: str,
                        heard: StatusCallback | None) -> None:
    """Tell ``heard`` a run has started (news before its first change); cancelled while
    asking, the run is cancelled too, as :func:`follow` does."""
    if heard is None:
        return
    try:
        await heard(await service.status(session_id))
    except asyncio.CancelledError:
        await service.cancel(session_id)
        raise


async def _follow(service: ConsensusService, session_id: str,
                  heard: StatusCallback | None) -> None:
    """Wait for a run's end; ``heard`` hears its statuses from the first to the last (the
    end, which a waiter is not always told)."""
    await _first_status(service, session_id, heard)
    await follow(service, session_id, heard)
    if heard is not None:
        await heard(await service.status(session_id))


async def _each(items: Sequence[Item], work: Callable[[Item], Any]) -> None:
    """Every item, as many at once as the plan's slots allow (they bound the runs)."""
    tasks = [asyncio.create_task(work(item)) for item in items]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _team_done(row: QuestionRow, plan: Plan) -> bool:
    return all(arm.name in row.arms for arm in plan.arms)


def choose_best(results: Results, plan: Plan) -> BestMember | None:
    """The member whose self-consistency is the baseline, and k.

    Named up front (an agent id or its model), it has seen no label. Otherwise it is the
    member with the most right first drafts on these questions (ties: the first in the team),
    which has seen the labels: the summary says so."""
    rows = [r.arms[plan.arms[0].name] for r in results.rows.values()
            if plan.arms[0].name in r.arms]
    if not rows:
        return None
    agents = list(rows[0].alone)
    models = rows[0].models
    if plan.best_member:
        named = [a for a in agents if plan.best_member in (a, models.get(a))]
        if not named:
            raise ConfigError(
                f"--best-member: {plan.best_member!r} is not an agent or model of the team "
                f"({', '.join(f'{a} ({models.get(a)})' for a in agents)})")
        agent, chosen_by, warning = named[0], "named before the run (--best-member)", None
    else:
        right = {a: sum(bool((m := r.alone.get(a)) and m.correct) for r in rows)
                 for a in agents}
        agent = max(agents, key=lambda a: right[a])  # max keeps the first of equals
        chosen_by = f"most right first drafts here ({right[agent]} of {len(rows)})"
        warning = ("chosen on the same questions it is scored on, so self-consistency is "
                   "favoured a little; name one with --best-member (e.g. chosen on another "
                   "split) for a clean comparison")
    team_calls = sum(r.consensus.calls for r in rows) / len(rows)
    own_calls = sum(r.alone[agent].calls for r in rows) / len(rows) or 1.0
    samples = plan.samples or equal_compute_samples(team_calls, own_calls,
                                                    at_most=MAX_SAMPLES)
    return BestMember(agent_id=agent, model=models.get(agent), chosen_by=chosen_by,
                      warning=warning, samples=samples, team_mean_calls=round(team_calls, 2),
                      calls_per_sample=round(own_calls, 2))


async def self_consistency(service: ConsensusService, session_id: str, agent_id: str,
                           samples: int, item: Item, pattern: re.Pattern[str] | None,
                           spec: RunSpec | None = None,
                           on_status: StatusCallback | None = None) -> Method:
    """``samples`` independent drafts of one member (runs of up to 8 copies, each stopped as
    soon as its drafts are in), their majority answer, and what the drafts cost.

    ``spec``: the team as the user gave it, so a member whose config names its key inline
    is sampled with that key (held in memory; the record of ``session_id`` has none).
    ``on_status`` hears each sampling run's statuses."""
    expected = expected_answer(item.answer)
    sizes = [MAX_AGENTS] * (samples // MAX_AGENTS) + (
        [samples % MAX_AGENTS] if samples % MAX_AGENTS else [])

    async def one_run(copies: int) -> list[Method]:
        started = await service.sample_member(session_id, agent_id, copies,
                                              item.question + ANSWER_LINE, spec=spec)
        await _drafts_then_stop(service, started.session_id, on_status)
        drafts = await first_drafts(service, started.session_id, expected, pattern)
        return [drafts.alone[a] for a in drafts.order] + [
            m for a, m in drafts.alone.items() if a not in drafts.order]

    drafts = [m for run in await asyncio.gather(*(one_run(n) for n in sizes)) for m in run]
    texts = [m.answer for m in drafts]
    _, index = majority([normalise(t, expected, pattern) for t in texts])
    text = texts[index] if index >= 0 else None
    costs = [m.cost_usd for m in drafts]
    return Method(answer=text, correct=is_correct(text, expected, pattern),
                  calls=sum(m.calls for m in drafts), tokens=sum(m.tokens for m in drafts),
                  cost_usd=None if any(c is None for c in costs) else round(
                      math.fsum(c for c in costs if c is not None), 6),
                  seconds=max((m.seconds for m in drafts), default=0.0))


async def _drafts_then_stop(service: ConsensusService, session_id: str,
                            heard: StatusCallback | None = None) -> None:
    """Follow a sampling run and cancel it once every copy has drafted (or dropped): the
    votes that would follow are not part of the baseline, and would only cost. ``heard``
    hears its statuses, the first one included."""
    await _first_status(service, session_id, heard)

    async def on_status(status: StatusRecord) -> None:
        if heard is not None:
            await heard(status)
        if status.status is RunStatus.RUNNING and all(
                a.answers >= 1 or a.phase is AgentPhase.DROPPED
                for a in status.agents.values()):
            await service.cancel(session_id)

    await follow(service, session_id, on_status)
    if heard is not None:  # the end, which a waiter is not always told
        await heard(await service.status(session_id))
