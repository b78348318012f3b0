"""The ``massgen-mcp`` command: the argument parser and the dispatch to each command.

``massgen-mcp`` with no command serves MCP over stdio (what hosts spawn). Everything else
is a subcommand; see ``massgen-mcp --help``. The commands live beside this module, each a
thin shell over :class:`~massgen_mcp.service.ConsensusService` (the same door as the MCP
tools): :mod:`.run` (run), :mod:`.review` (review), :mod:`.evaluate` (eval), :mod:`.records`
(sessions, show, prune), :mod:`.config` (validate, trust), :mod:`.serve` (serve, worker, doctor,
install). What they write and the exit codes are in :mod:`.output`.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Sequence

from massgen_mcp._version import __version__
from massgen_mcp.cli import evaluate, flags, follow_up, models, review, steer
from massgen_mcp.cli.config import cmd_trust, cmd_validate
from massgen_mcp.cli.output import (
    EXIT_BY_STATUS,
    EXIT_CANCELLED,
    EXIT_CODES_HELP,
    EXIT_DROPPED,
    EXIT_EXECUTION,
    EXIT_INPUT,
    EXIT_LISTEN,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    err,
)
from massgen_mcp.cli.records import cmd_prune, cmd_sessions, cmd_show
from massgen_mcp.cli.run import add_limit_flags, cmd_run
from massgen_mcp.cli.serve import cmd_doctor, cmd_install, cmd_serve, cmd_worker
from massgen_mcp.core.edges import check_text
from massgen_mcp.core.errors import (
    ListenError,
    MassgenError,
    RecordWriteError,
    SessionNotFoundError,
)
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.secrets import RedactingFormatter, redact

__all__ = ["EXIT_BY_STATUS", "EXIT_CANCELLED", "EXIT_DROPPED", "EXIT_EXECUTION", "EXIT_INPUT",
           "EXIT_LISTEN", "EXIT_OK", "EXIT_TIMEOUT", "EXIT_USAGE", "build_parser", "main"]


DESCRIPTION = """A team of models answers, votes and agrees on one answer.

first steps:
  massgen-mcp doctor                what this machine offers: keys, CLIs, local models
  massgen-mcp run "a question"      ask the default team (or --models / --config)
  massgen-mcp sessions              past runs; massgen-mcp show latest for the newest
  massgen-mcp install claude-code   add massgen to an MCP host (see install --help)

With no command: serve MCP over stdio, which is what MCP hosts start."""


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser that refuses what it does not know itself, with its own usage
    and the nearest flag: argparse would hand the leftovers to the top parser, which printed
    the usage of ``massgen-mcp`` for a typo in ``run --jsn``."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            flags = [f for action in self._actions for f in action.option_strings
                     if f.startswith("--")]
            near = [m for extra in extras if extra.startswith("-")
                    for m in difflib.get_close_matches(extra.split("=", 1)[0], flags, 1, 0.6)]
            hint = f"; did you mean {' or '.join(dict.fromkeys(near))}?" if near else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="massgen-mcp",
        description=DESCRIPTION, epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"massgen-mcp {__version__}")
    parser.add_argument("--home", help="record folder (default: $MASSGEN_HOME or ./.massgen)")
    sub = parser.add_subparsers(dest="command", parser_class=CommandParser)

    run = sub.add_parser("run", help="ask the team one question and print the agreed answer",
                         description="Ask the team one question: the answer goes to stdout, "
                                     "progress and the outcome to stderr.\nWithout --models "
                                     "or --config the default team answers (doctor shows "
                                     "which).",
                         epilog=EXIT_CODES_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("question", help="the question ('-' reads it from stdin)")
    flags.team_arguments(run)
    flags.protocol_arguments(run)
    run.add_argument("--context", help="background text for every agent")
    run.add_argument("--context-file", action="append", metavar="PATH",
                     help="a text file shared with every agent (repeat for more)")
    flags.role_arguments(run)
    add_limit_flags(run)
    run.set_defaults(func=cmd_run)
    follow_up.add_parsers(sub)
    review.add_parser(sub)

    evaluate.add_parser(sub)
    models.add_parser(sub)
    steer.add_parser(sub)

    validate = sub.add_parser("validate", help="check a config file and print the team")
    validate.add_argument("file", help="YAML file or @preset")
    validate.add_argument("--servers", action="store_true",
                          help="start the config's MCP servers (commands it names: only for "
                               "a file you trust) and warn about tools the size caps cut")
    validate.set_defaults(func=cmd_validate)

    trust = sub.add_parser("trust", help="allow a project's config to do what needs your "
                                         "consent (send keys or files to the servers it "
                                         "names, start MCP servers, open secret files); "
                                         "recorded with the file's hash and place")
    trust.add_argument("file", nargs="?",
                       help="config file (default: the project's .massgen/config.yaml)")
    trust.add_argument("--revoke", action="store_true", help="withdraw consent")
    trust.set_defaults(func=cmd_trust)

    sessions = sub.add_parser("sessions", help="list past runs, newest first")
    sessions.add_argument("--status", choices=[str(s) for s in RunStatus],
                          help="only runs that ended so (or are running)")
    sessions.add_argument("--limit", type=int, default=20,
                          help="how many to list (default 20)")
    sessions.add_argument("--json", action="store_true", help="print a JSON list")
    sessions.add_argument("--all", action="store_true",
                          help="also the runs massgen-mcp eval made (left out by default)")
    sessions.set_defaults(func=cmd_sessions)

    show = sub.add_parser("show", help="print a run's outcome, answer and coordination table")
    show.add_argument("session_id", metavar="ID",
                      help="a session id, its first characters (enough to name one), or "
                           "'latest'")
    show.add_argument("--json", action="store_true", help="print result.json")
    show.add_argument("--html", action="store_true",
                      help="(re)write the session's report.html and print its path")
    show.add_argument("--open", action="store_true", help="with --html: open it in a browser")
    show.set_defaults(func=cmd_show)

    prune = sub.add_parser("prune", help="delete old finished session records (dry run "
                                         "unless --yes)")
    prune.add_argument("--older-than", required=True, help="age such as 30d, 12h or 90m")
    prune.add_argument("--yes", action="store_true", help="really delete")
    prune.set_defaults(func=cmd_prune)

    doctor = sub.add_parser("doctor", help="show keys, local servers, the default team and why")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    flags.pool_arguments(doctor)
    doctor.set_defaults(func=cmd_doctor)

    from massgen_mcp.cli.install import HOSTS

    install = sub.add_parser("install", help="add massgen to an MCP host's config")
    install.add_argument("host", choices=list(HOSTS), metavar="HOST",
                         help="the MCP host: " + ", ".join(HOSTS))
    install.add_argument("--scope", choices=["project", "user"], default="project",
                         help="project folder config (default) or your user config")
    install.add_argument("--print", action="store_true",
                         help="print the entry and the file it belongs in; change nothing")
    install.add_argument("--uvx", action="store_true",
                         help="start the server with 'uvx massgen-mcp' instead of this install "
                              "(the release on PyPI: none before massgen-mcp's first one; then "
                              "use --uvx-from)")
    install.add_argument("--uvx-from", metavar="PATH",
                         help="start the server with 'uvx --from PATH massgen-mcp': PATH is a "
                              "massgen-mcp checkout or a wheel built from one")
    install.add_argument("--approve-tools", action="store_true",
                         help="let the host's model call every massgen tool without asking, "
                              "headless runs included (codex: default_tools_approval_mode = "
                              "\"approve\"; gemini-cli: \"trust\": true); it can then start "
                              "paid runs on its own")
    install.set_defaults(func=cmd_install)

    serve = sub.add_parser("serve", help="serve MCP (stdio by default; --http for HTTP)",
                           description="Serve MCP over stdio (what hosts start; stdout is "
                                       "the protocol) or, with --http, over streamable HTTP "
                                       "with live session pages at /sessions and the "
                                       "OpenAI-compatible /v1.")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1",
                       help="with --http: the address to listen on (default 127.0.0.1, this "
                            "machine only; another address needs MASSGEN_MCP_TOKEN)")
    serve.add_argument("--port", type=int, default=8765,
                       help="with --http: the port (default 8765)")
    serve.add_argument("--path", default="/mcp",
                       help="with --http: where MCP is served (default /mcp); the live "
                            "session pages are at /sessions")
    serve.add_argument("--api", choices=["both", "mcp", "openai"], default="both",
                       help="with --http: MCP at --path, the OpenAI-compatible "
                            "/v1/chat/completions and /v1/models, or both (default)")
    serve.add_argument("--tasks", action="store_true",
                       help="make run_consensus and review_changes MCP tasks for clients that "
                            "ask (always on with --redis)")
    flags.pool_arguments(serve)
    serve.set_defaults(func=cmd_serve, http=False)

    worker = sub.add_parser("worker", help="run sessions from a pool's Redis queue (start "
                                           "front ends with serve --http --redis)")
    flags.pool_arguments(worker)
    worker.add_argument("--concurrency", type=int, default=32,
                        help="runs at once in this process (default 32)")
    worker.add_argument("--redelivery-timeout", type=float, default=30.0, metavar="S",
                        help="a run whose worker is silent this long goes to another worker "
                             "(default 30)")
    worker.set_defaults(func=cmd_worker)
    return parser


def main(argv: list[str] | None = None) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:  # what MCP hosts spawn: serve over stdio
            args = parser.parse_args([*(argv or sys.argv[1:]), "serve"])
    except SystemExit as exc:  # argparse has printed the usage and the problem
        return EXIT_USAGE if exc.code == 2 else int(exc.code or 0)
    try:
        for name, value in vars(args).items():  # undecodable bytes in an argument
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str):
                    check_text(text, name)
        code: int = args.func(args)
        return code
    except RecordWriteError as exc:  # the input was fine; the disk was not
        err(redact(str(exc)))
        return EXIT_EXECUTION
    except ListenError as exc:
        err(str(exc))
        return EXIT_LISTEN
    except SessionNotFoundError as exc:  # the store names no face's way to list ids
        err(f"{redact(str(exc))}; 'massgen-mcp sessions' lists them")
        return EXIT_INPUT
    except MassgenError as exc:
        err(redact(str(exc)))
        return EXIT_INPUT



if __name__ == "__main__":
    sys.exit(main())
