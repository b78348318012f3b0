"""``massgen-mcp sessions``, ``show`` and ``prune``: the records of past runs, for a person.

Everything is read through :class:`~massgen_mcp.service.ConsensusService` (the same door as
the MCP resources); this module only turns records into text.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import TYPE_CHECKING

from massgen_mcp.cli import flags
from massgen_mcp.cli.output import EXIT_OK, err, say, say_json
from massgen_mcp.core.errors import ConfigError, resume_hint
from massgen_mcp.core.records import EventType, RunStatus, clip

if TYPE_CHECKING:
    from massgen_mcp.service.records import RecordReads

QUESTION_CHARS = 60  # of the question, in a sessions line


def when(timestamp: float | None) -> str:
    """A start time as a person reads it, in local time: "today 14:02", "yesterday 09:15",
    "Nov 20 14:02" this year, else "2025-11-20 14:02"."""
    if timestamp is None:
        return "-"
    at = datetime.fromtimestamp(timestamp)
    today = datetime.now().date()
    if at.date() == today:
        return at.strftime("today %H:%M")
    if (today - at.date()).days == 1:
        return at.strftime("yesterday %H:%M")
    return at.strftime("%b %d %H:%M" if at.year == today.year else "%Y-%m-%d %H:%M")


def review_title(service: RecordReads, session_id: str, question: str) -> str | None:
    """A review's title (``review: the working tree against HEAD, 3 files``), which says
    what its 30-line prompt does not at a glance; None for any other run. Only a question
    that opens as a review's does is looked up (its request read)."""
    from massgen_mcp.review.request import REVIEW_OPENING

    if not question.startswith(REVIEW_OPENING):
        return None
    target = service.review_target(session_id)
    return target.title() if target is not None else None


def cmd_sessions(args: argparse.Namespace) -> int:
    service = flags.service(args)
    sessions, more = service.list_sessions(
        RunStatus(args.status) if args.status else None, args.limit,
        include_eval=args.all)
    evals = {s.session_id for s in sessions if args.all and service.is_eval(s.session_id)}
    if args.json:
        say_json(json.dumps([{**s.__dict__, "status": str(s.status),
                              "kind": "eval" if s.session_id in evals else "run"}
                             for s in sessions], indent=2))
        return EXIT_OK
    if not sessions:  # the hints are for a person: stdout stays the list (empty here)
        which = f"{args.status} sessions" if args.status else "sessions"
        err(f"no {which} in {service.records_dir}"
            + (f" (--status {args.status}; without it, every run is listed)"
               if args.status else "")
            + ("" if args.all else " (eval's runs are left out; --all lists them)"))
        return EXIT_OK
    say(f"{'SESSION':<26}  {'STARTED':<15}  {'STATUS':<11}  {'WINNER':<6}  QUESTION")
    for s in sessions:
        # An eval's sampling run is cancelled by eval once its drafts are in: marked, it is
        # not read as a run a person cancelled.
        question = (("[eval] " if s.session_id in evals else "")
                    + (review_title(service, s.session_id, s.question)
                       or " ".join(s.question.split())))
        parent = f"  (follow-up of {s.parent_session_id})" if s.parent_session_id else ""
        say(f"{s.session_id}  {when(s.started_at):<15}  {s.status:<11}  {s.winner or '-':<6}"
            f"  {clip(question, QUESTION_CHARS)[0]}{parent}")
    if more:
        say(f"(the newest {len(sessions)}; --limit N shows more)", err=True)
    # A hint, not a problem: err() would put the program's name before the command.
    say("'massgen-mcp show ID' shows one (the first characters of an ID are enough; "
        "'latest' is the newest)" + ("" if args.all else "; eval's runs: --all"), err=True)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from massgen_mcp.render.text import (
        coordination_table,
        cost_phrase,
        describe_event,
        other_errors,
        outcome_line,
        status_words,
    )

    service = flags.service(args)
    session_id = service.find_session(args.session_id)
    if args.html:
        from massgen_mcp.render.html import render_report

        path = service.write_report(session_id, render_report(service.record(session_id)))
        say(str(path))
        if args.open:
            import webbrowser

            if not webbrowser.open(path.as_uri()):  # it says False, and nothing else would
                err(f"no web browser found to open it; open {path} in one (or set BROWSER to "
                    "the command that starts yours)")
        return EXIT_OK
    record = service.record(session_id)
    status, result = record.status, record.result
    if args.json:
        say_json((result or status).model_dump_json(indent=2))
        return EXIT_OK
    parent = (f", follow-up of {status.parent_session_id}" if status.parent_session_id
              else "")
    say(f"session  {session_id}  (started {when(status.started_at)}{parent})")
    title = review_title(service, session_id, status.question)
    say(f"review   {title.removeprefix('review: ')}" if title else
        f"question {status.question}")
    say(f"record   {service.folder(session_id)}")
    say("outcome  " + (outcome_line(result) if result else status_words(status)))
    if status.status is RunStatus.INTERRUPTED:
        say(f"         {resume_hint(session_id)}")
    for problem in other_errors(result) if result else []:
        say(f"         {problem}")
    if result and result.tally:
        say("tally    " + ", ".join(f"{label}: {n}" for label, n in result.tally.items()))
    usage = (result or status).usage
    say(f"usage    {usage.calls} calls, {usage.prompt_tokens} prompt + "
        f"{usage.completion_tokens} completion tokens, cost "
        + cost_phrase(usage, running=result is None and not status.done))
    say()
    if record.events_skipped:
        say(f"{record.events_skipped:,} earlier events skipped: the record holds more than "
            f"are read at once; shown are the last {len(record.events):,}")
    say(coordination_table(record.events, list(status.agents)))
    tool_lines = [describe_event(e) for e in record.events if e.type is EventType.TOOL_CALL]
    if tool_lines:
        say("\ntool calls")
        for line in tool_lines:
            say(f"  {line or ''}")
    notes = [describe_event(e) for e in record.events if e.type is EventType.STEERED]
    if notes:  # the NOTE columns of the table, in words
        say("\nnotes")
        for line in notes:
            say(f"  {line or ''}")
    if result and result.final_answer is not None:
        say("\n" + result.final_answer)
    return EXIT_OK


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '45s' -> seconds."""
    units = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
    number, unit = text[:-1], text[-1:].lower()
    if unit not in units or not number.replace(".", "", 1).isdigit():
        raise ConfigError(f"--older-than {text!r}: use a number and a unit, e.g. 30d, 12h, 90m")
    return float(number) * units[unit]


def cmd_prune(args: argparse.Namespace) -> int:
    service = flags.service(args)
    candidates = service.prune_candidates(parse_age(args.older_than))
    if not candidates:
        say(f"no finished sessions older than {args.older_than} in {service.records_dir}")
        return EXIT_OK
    verb = "deleting" if args.yes else "would delete"
    for s in candidates:
        say(f"{verb} {s.session_id}  {s.status:<11} {' '.join(s.question.split())[:50]}")
        if args.yes:
            service.delete(s.session_id)
    if not args.yes:
        say(f"{len(candidates)} session(s); nothing deleted. Run again with --yes to delete.")
    return EXIT_OK


