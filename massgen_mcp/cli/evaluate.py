"""``massgen-mcp eval``: flags to an evaluation plan, progress on stderr, the table on stdout.

The work is in :mod:`massgen_mcp.evaluation`; this module only reads flags, shows progress (a
bar with an ETA on a terminal, plain lines otherwise) and prints the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shutil
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from pydantic import ValidationError

from massgen_mcp.cli import flags
from massgen_mcp.cli.live import fit
from massgen_mcp.cli.output import EXIT_CANCELLED, EXIT_OK, err, say
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.spec import RunSpec, format_validation_error

if TYPE_CHECKING:
    from massgen_mcp.core.run_state import StatusRecord
    from massgen_mcp.evaluation.records import QuestionRow

BASELINES = ("members", "majority", "self-consistency", "ceiling")


def add_parser(sub: Any) -> None:
    evals = sub.add_parser(
        "eval", help="score the team against each member, majority vote, the best member's "
                     "self-consistency and the ceiling, with intervals and paired tests")
    evals.add_argument("questions", help="a .jsonl, .csv or .parquet file, hf:NAME[:CONFIG"
                                         "[:SPLIT]] (pip install 'massgen-mcp[eval]'), or @sample")
    team = evals.add_mutually_exclusive_group()
    team.add_argument("--models", help="comma-separated litellm models")
    team.add_argument("--config", help="MassGen-format YAML file, or @preset")
    evals.add_argument("--base-url", help="OpenAI-compatible endpoint for agents without one "
                                          "(as for run)")
    evals.add_argument("--name", help="results folder under <home>/evals (default: file and "
                                      "team)")
    evals.add_argument("--timeout", type=float, help="per-question run timeout in seconds")
    evals.add_argument("--question-field", default="question", help="default: question")
    evals.add_argument("--answer-field", default="answer", help="default: answer")
    evals.add_argument("--choices-field", help="a list of options: the question gets them as "
                                               "A., B., ... and the answer becomes a letter")
    evals.add_argument("--limit", type=int, help="only the first N questions (with --seed: a "
                                                 "random sample of N)")
    evals.add_argument("--seed", type=int, help="sample (with --limit) or shuffle the questions "
                                                "with this seed; also seeds the bootstrap "
                                                "intervals")
    evals.add_argument("--concurrency", type=int, default=1,
                       help="runs at once (default 1)")
    evals.add_argument("--answer-regex", help="how to find the answer in a reply: a regular "
                                              "expression, its first group if it has one")
    evals.add_argument("--baselines", default=",".join(BASELINES),
                       help=f"which to show, comma-separated (default: {','.join(BASELINES)}); "
                            "only self-consistency costs extra runs")
    evals.add_argument("--best-member", help="the member (agent id or model) whose "
                                             "self-consistency is the baseline, chosen before "
                                             "seeing these labels; default: the member with "
                                             "the most right first drafts here (flagged)")
    evals.add_argument("--samples", type=int, help="self-consistency's k (default: as many "
                                                   "calls as the team's mean)")
    evals.add_argument("--compare", action="append", metavar="OPTIONS",
                       help="an option set to run too, e.g. decide=all, depth=auto, "
                            "self_vote=false, require=agent_b, roles=none+against or "
                            "models=a+b+c; repeat for more; each gets a consensus row and a "
                            "paired test against the first")
    evals.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from massgen_mcp.evaluation.answers import compile_pattern
    from massgen_mcp.evaluation.datasets import Fields, load_items
    from massgen_mcp.evaluation.records import MAX_SAMPLES
    from massgen_mcp.evaluation.report import render_eval_summary
    from massgen_mcp.evaluation.runner import Arm, Plan, evaluate
    from massgen_mcp.evaluation.summary import EvalSummary, MethodKind, format_table, summarise

    for flag in ("limit", "concurrency", "samples"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag}: {value}; give a whole number of at least 1")
    if args.samples is not None and args.samples > MAX_SAMPLES:
        raise ConfigError(f"--samples: {args.samples}; at most {MAX_SAMPLES}")
    if args.name is not None and (args.name.strip(". ") == "" or len(args.name) > 80):
        raise ConfigError(f"--name: {args.name!r}; give a folder name of 1 to 80 characters")
    baselines = {b.strip() for b in args.baselines.split(",") if b.strip()}
    unknown = baselines - set(BASELINES)
    if unknown:
        raise ConfigError(f"--baselines: unknown {', '.join(sorted(unknown))}; choose from "
                          f"{', '.join(BASELINES)}")
    unreachable = _hub_unreachable() if args.questions.startswith("hf:") else None
    try:  # a Hugging Face dataset can take minutes to fetch
        with _hub_quiet():
            items = load_items(args.questions, Fields(args.question_field, args.answer_field,
                                                      args.choices_field),
                               limit=args.limit, seed=args.seed)
    except KeyboardInterrupt:
        err("interrupted while loading the questions")
        return EXIT_CANCELLED
    except ConfigError as exc:
        if unreachable is None:
            raise
        raise ConfigError(f"{exc}; {unreachable}, so only the local cache was read") from None
    base = {"models": args.models.split(",") if args.models else None, "config": args.config,
            "base_url": args.base_url}
    options = {"timeout_s": args.timeout} if args.timeout else {}
    # The eval's own option set keeps its (empty) name with or without --compare, so adding
    # --compare to an evaluation later resumes it instead of running it again.
    arms = [Arm("", _spec_maker(base, options))]
    arms += [Arm(text, _spec_maker(*_option_set(text, base, options)))
             for text in args.compare or []]
    if len({a.name for a in arms}) < len(arms) or "as given" in (args.compare or []):
        raise ConfigError("--compare: the same option set twice")
    service = flags.service(args)
    stem = re.sub(r"[^\w.\-]+", "_", args.questions.rsplit("/", 1)[-1].rsplit(".", 1)[0])
    team_text = (args.config or args.models or "default").strip("@")
    if len(team_text) > 40:  # eight models with endpoints would not fit in a file name
        team_text = team_text[:24] + "-" + hashlib.sha256(team_text.encode()).hexdigest()[:8]
    name = args.name or f"{stem[:40]}-{team_text}"
    plan = Plan(items, arms, service.home / "evals" / re.sub(r"[^\w.\-]+", "_", name),
                pattern=compile_pattern(args.answer_regex) if args.answer_regex else None,
                self_consistency="self-consistency" in baselines,
                best_member=args.best_member, samples=args.samples,
                concurrency=args.concurrency,
                settings={"dataset": args.questions, "team": _team_setting(args),
                          "compare": args.compare or [], "limit": args.limit,
                          "seed": args.seed, "baselines": sorted(baselines),
                          "answer_regex": args.answer_regex, "best_member": args.best_member,
                          "samples": args.samples, "fields": [args.question_field,
                                                              args.answer_field,
                                                              args.choices_field]})
    seed = args.seed or 0

    def summary(results: Any) -> EvalSummary:
        found = summarise(results, plan, seed=seed)
        kinds = {"members": MethodKind.MEMBER, "majority": MethodKind.MAJORITY,
                 "ceiling": MethodKind.CEILING, "self-consistency": MethodKind.SELF_CONSISTENCY}
        hidden = {kinds[b] for b in BASELINES if b not in baselines}
        shown = [m for m in found.methods if m.kind not in hidden]
        names = {m.name for m in shown}
        return found.model_copy(update={
            "methods": shown,
            "comparisons": [c for c in found.comparisons if c.a in names and c.b in names],
            "all_wrong": None if MethodKind.CEILING in hidden else found.all_wrong})

    progress = Progress(len(items))

    async def go() -> Any:
        ticking = asyncio.create_task(progress.tick())
        try:
            return await evaluate(service, plan, on_progress=progress.show,
                                  on_activity=progress.activity,
                                  render=lambda r: render_eval_summary(summary(r)))
        finally:
            ticking.cancel()
            await service.aclose()

    try:
        results = asyncio.run(go())
    except KeyboardInterrupt:
        progress.end()
        err(f"interrupted; run the same command again to resume ({plan.folder})")
        return EXIT_CANCELLED
    progress.end()
    say(format_table(summary(results)))
    err(f"results: {plan.folder / 'results.json'}; summary: {plan.folder / 'summary.html'}")
    return EXIT_OK


HUB_PROBE_S = 5.0  # to tell an offline machine, before the Hub's retries (23 s of them)
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached from here, or None when it can (or when
    that cannot be told: behind a proxy). When it cannot, the Hub's client is put offline
    (``HF_HUB_OFFLINE``, read when ``datasets`` is first imported, which is later): a
    dataset already in the cache loads as it is, and one that is not fails at once with one
    line, instead of five retries a file, each a warning, over 23 s.

    An ``HF_ENDPOINT`` that is not a URL (``http://[::1``) is an unreachable Hub too, said
    in the same line with the variable named: the Hub's client could not use it either, and
    the local cache may still hold the dataset."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") or (
            any(os.environ.get(name) for name in PROXY_ENV)):
        return None
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        try:  # urlsplit and .port raise ValueError for a malformed URL
            parts = urlsplit(endpoint)
            port = parts.port or (80 if parts.scheme == "http" else 443)
        except ValueError as exc:
            raise ValueError(f"HF_ENDPOINT is not a URL: {exc}") from None
        socket.create_connection((parts.hostname or "", port), timeout=HUB_PROBE_S).close()
    except (OSError, ValueError) as exc:
        os.environ["HF_HUB_OFFLINE"] = "1"
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return f"the Hugging Face Hub ({endpoint}) could not be reached ({why})"
    return None


@contextlib.contextmanager
def _hub_quiet() -> Iterator[None]:
    """The Hub's client and ``datasets`` warn on every retry and then raise: the error says
    it in one line (``load_items``), so their warnings stay out while the questions load."""
    loggers = [logging.getLogger(name) for name in ("huggingface_hub", "datasets")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _team_setting(args: argparse.Namespace) -> str:
    """The team as results.json records it (a stored result is only resumed by the same):
    the endpoint is part of it when given."""
    team = str(args.config or args.models or "default")
    return f"{team} @ {args.base_url}" if args.base_url else team


def _spec_maker(base: dict[str, Any], options: dict[str, Any]) -> Any:
    try:
        run_options = RunOptions(**options) if options else None
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "--compare")) from None

    def make(question: str) -> RunSpec:
        return RunSpec(question=question, options=run_options, **base)

    return make


def _option_set(text: str, base: dict[str, Any], options: dict[str, Any]
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``decide=all,late_factor=2`` or ``models=a+b+c`` or ``config=@preset``: run options
    and/or the team, over the eval's own."""
    team, opts = dict(base), dict(options)
    for part in (p.strip() for p in text.split(",") if p.strip()):
        field_name, sep, value = part.partition("=")
        if not sep or not value:
            raise ConfigError(f"--compare: {part!r} is not KEY=VALUE (e.g. decide=all, "
                              "models=a+b+c, config=@preset)")
        if field_name == "models":
            team.update(models=value.split("+"), config=None)
        elif field_name == "config":
            team.update(config=value, models=None)
        elif field_name == "roles":  # a list, as models: "," already parts the option set
            opts["roles"] = value.split("+")
        elif field_name in RunOptions.model_fields:
            # A list option takes its items joined by '+' (require=agent_b+agent_c).
            default = RunOptions.model_fields[field_name].default
            opts[field_name] = value.split("+") if isinstance(default, list) else value
        else:
            raise ConfigError(f"--compare: unknown option {field_name!r}; use models, config "
                              f"or a run option ({', '.join(sorted(RunOptions.model_fields))})")
    return team, opts


class Progress:
    """What eval is doing, on stderr, from its first run on.

    On a terminal, one line redrawn in place at every status of a run and every second: the
    pass, questions done of all, the runs under way and what their agents are doing, the time
    the pass has taken, and an ETA. A question is a whole team run (minutes on a small
    machine), so there is no ETA before this pass has finished one here: until then there is
    no rate to go by. After, the rate is the pass's time per finished question, or the time
    so far over one more question when the question under way already took longer (the ETA
    then grows rather than sitting at a figure that has passed). Elsewhere, a line when a
    question's run starts and one when it is done.
    """

    def __init__(self, total: int, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.stream, self.clock = total, stream or sys.stderr, clock
        self.tty = self.stream.isatty()
        self.stage, self.stage_began, self.done = "", clock(), 0
        self.fresh, self.last_done_at = 0, 0.0  # questions this pass finished here, and when
        self.runs: dict[str, StatusRecord] = {}  # under way, by session id
        self.drawn = 0  # columns of the line on the screen

    def _pass(self, stage: str, done: int) -> None:
        if stage != self.stage:
            self.stage, self.stage_began = stage, self.clock()
            self.fresh, self.runs = 0, {}
        self.done = done

    def activity(self, stage: str, done: int, total: int, status: StatusRecord) -> None:
        """A run of the pass has started or changed (the runner's ``on_activity``)."""
        self._pass(stage, done)
        self.total = total
        if status.done:
            self.runs.pop(status.session_id, None)
        elif status.session_id not in self.runs:
            self.runs[status.session_id] = status
            if not self.tty:
                from massgen_mcp.evaluation.runner import ANSWER_LINE

                question = status.question.removesuffix(ANSWER_LINE)
                err(f"[{stage} {done}/{total}] started: {question[:60]}")
        else:
            self.runs[status.session_id] = status
        self.draw()

    def show(self, stage: str, done: int, total: int, row: QuestionRow) -> None:
        """A question is done (the runner's ``on_progress``)."""
        self._pass(stage, done)
        self.total = total
        self.fresh, self.last_done_at = self.fresh + 1, self.clock()
        if not self.tty:
            eta = self.eta()
            err(f"[{stage} {done}/{total}] {row.question[:60]}"
                + ("" if eta is None else f" (ETA {_duration(eta)})"))
        self.draw()

    def eta(self) -> float | None:
        """Seconds left in this pass, or None before it has finished a question here."""
        if not self.fresh:
            return None
        spent = self.clock() - self.stage_began
        rate = max((self.last_done_at - self.stage_began) / self.fresh, spent / (self.fresh + 1))
        return max(0.0, rate * (self.fresh + self.total - self.done) - spent)

    def draw(self) -> None:
        if not self.tty or not self.stage:
            return
        width = 16
        bar = "#" * round(width * self.done / max(self.total, 1))
        eta = self.eta()
        # What the agents do comes last: on a narrow terminal it is what gets cut.
        line = (f"{self.stage} {self.done}/{self.total} [{bar:<{width}}] "
                f"{_duration(self.clock() - self.stage_began)} · "
                + ("ETA once a question is done" if eta is None else f"ETA {_duration(eta)}")
                + f" · {self._doing()}")
        columns = shutil.get_terminal_size().columns - 1
        line = fit(line, columns)
        shown = len(line)  # then spaces over what is left of the longer line before it
        self.stream.write("\r" + line + " " * max(0, min(self.drawn, columns) - shown))
        self.stream.flush()
        self.drawn = shown

    def _doing(self) -> str:
        """The runs under way: one run's agents each with what they do, several runs' agents
        counted by what they do."""
        if not self.runs:
            return "starting"
        if len(self.runs) == 1:
            [status] = self.runs.values()
            return ", ".join(f"{aid} {agent.phase}" for aid, agent in status.agents.items())
        phases = Counter(str(agent.phase) for status in self.runs.values()
                         for agent in status.agents.values())
        return (f"{len(self.runs)} runs: "
                + ", ".join(f"{n} {phase}" for phase, n in phases.most_common()))

    async def tick(self) -> None:
        """Redraw every second (the time and the ETA move between statuses)."""
        while self.tty:
            await asyncio.sleep(1.0)
            self.draw()

    def end(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = 0


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s"
