"""``massgen-mcp continue ID "..."`` and ``massgen-mcp resume ID``: what the MCP tools
``continue_session`` and ``resume_session`` do, from a terminal.

``steer`` on a finished run says to ask a follow-up; a person at a terminal needs a way to.
Both go through the same service methods as the tools, and end as ``run`` does: the answer
on stdout (or ``--json``), progress and the outcome on stderr, ``run``'s exit codes.
"""

from __future__ import annotations

import argparse
from typing import Any

from massgen_mcp.cli.output import EXIT_CODES_HELP
from massgen_mcp.cli.run import (
    add_limit_flags,
    follow_to_the_end,
    options_from,
    read_question,
)

# Inline api_keys are never recorded: they are read again from the config file the run used
# while it is unchanged, or from the file given here (the same agents).
CONFIG_HELP = ("the config file the session ran with, for its inline api_keys, when that file "
               "has changed or moved since (the agents must be the same)")


def add_parsers(sub: Any) -> None:
    follow = sub.add_parser(
        "continue", help="ask a finished run's team a follow-up (the earlier question, your "
                         "notes and its answer are its context)",
        description="Ask the team of a finished run a follow-up: a new run, linked to the "
                    "earlier one, whose agents see the earlier question, your notes to it "
                    "and its final answer. Output and exit codes as for run.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    follow.add_argument("session_id", metavar="ID",
                        help="a finished session's id, its first characters, or 'latest'")
    follow.add_argument("follow_up", metavar="FOLLOW_UP",
                        help="the follow-up question ('-' reads it from stdin)")
    add_limit_flags(follow)
    follow.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    follow.set_defaults(func=cmd_continue)

    resume = sub.add_parser(
        "resume", help="go on with an interrupted run from its recorded answers and votes",
        description="Go on with a run whose process ended (status interrupted), in the same "
                    "record, from its recorded answers and votes. Output and exit codes as "
                    "for run.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    resume.add_argument("session_id", metavar="ID",
                        help="an interrupted session's id, its first characters, or 'latest'")
    resume.add_argument("--json", action="store_true",
                        help="print one JSON object, as run --json does")
    resume.add_argument("--quiet", action="store_true", help="no progress on stderr")
    resume.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    resume.set_defaults(func=cmd_resume)


def cmd_continue(args: argparse.Namespace) -> int:
    follow_up = read_question(args.follow_up, "follow_up")
    options = options_from(args)
    given = options if options.model_fields_set else None
    return follow_to_the_end(args, lambda service: service.continue_session(
        service.find_session(args.session_id), follow_up, options=given, config=args.config))


def cmd_resume(args: argparse.Namespace) -> int:
    return follow_to_the_end(args, lambda service: service.resume_session(
        service.find_session(args.session_id), config=args.config))
