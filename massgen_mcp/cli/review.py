"""``massgen-mcp review``: the team reviews a change (the working tree, ``--staged``, ``--base
REF``, ``--commit SHA``, a patch file or ``-`` for stdin, or plain paths).

A thin shell, as ``run`` is: :func:`massgen_mcp.review.changes.collect` finds what to review,
:func:`massgen_mcp.review.request.review_spec` turns it into a run, and the run starts through
the service and ends as ``run`` ends (the same team, limit and ``--json`` flags, output and exit
codes; recorded, resumable and steerable like any run). Its workspace is the repository, so
API members' read-only workspace tools open the files around the change.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from massgen_mcp.cli import flags, post
from massgen_mcp.cli.output import EXIT_CODES_HELP, err
from massgen_mcp.cli.run import add_limit_flags, follow_to_the_end, options_from
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.outcomes import COUNTED_TIERS, ReviewOutput, Severity, Tier, named
from massgen_mcp.core.settings import SETTINGS

if TYPE_CHECKING:
    from massgen_mcp.core.run_state import ResultRecord
    from massgen_mcp.service import ConsensusService, StartedRun

PATCH_SUFFIXES = (".patch", ".diff")

DESCRIPTION = """\
The team reviews a change: each member answers with findings (file, lines, severity, claim,
evidence, fix), reads the others' reviews and votes or revises, and the findings a majority
of the members backs make the verdict (approve, changes requested, blocked), with the
dissent. The review goes to stdout (--format), progress and the outcome to stderr.

what to review (one of them; default: the working tree's changes against HEAD, staged and
unstaged; untracked files are not included):
  --staged                 what is staged
  --base REF               the branch's commits since its merge base with REF
  --commit SHA             one commit
  PATCH.patch, PATCH.diff  a patch file; '-' reads one from stdin (gh pr diff 12 | ... -)
  PATH ...                 files (or folders' tracked files) as they are

Files on the secret-file deny-list (.env, keys, credentials) are never sent: their changes
are left out and named. API members can read the repository's files (read-only tools)."""


def add_parser(sub: Any) -> None:
    review = sub.add_parser("review", help="the team reviews a change: the working tree, "
                                           "--staged, --base, --commit, a patch or files",
                            description=DESCRIPTION, epilog=EXIT_CODES_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    review.add_argument("targets", nargs="*", metavar="PATCH|PATH",
                        help="a .patch/.diff file, '-' for a patch on stdin, or files to "
                             "review as they are")
    what = review.add_mutually_exclusive_group()
    what.add_argument("--staged", action="store_true", help="review what is staged")
    what.add_argument("--base", metavar="REF",
                      help="review the commits since the merge base with REF (e.g. main)")
    what.add_argument("--commit", metavar="SHA", help="review one commit")
    review.add_argument("--focus", metavar="TEXT",
                        help="what to look at most, e.g. 'security' or 'error handling'")
    review.add_argument("--format", choices=("text", "markdown", "sarif", "json", "github"),
                        default="text",
                        help="text: findings grouped by file (default); markdown: for a pull "
                             "request; sarif: SARIF 2.1.0 for code scanning; json: as --json; "
                             "github: GitHub Actions annotations on the diff")
    # Names checked by cmd_review, not argparse's choices: a typo gets one line, not usage.
    review.add_argument("--fail-on", metavar="SEVERITY",
                        help="for CI: exit 8 when a counted finding is this severe or worse "
                             "(blocker, major, minor or nit: the verdict's threshold; default "
                             "threshold: the repository's review.fail_on, else major, exit 0)")
    review.add_argument("--fail-on-tier", metavar="TIER",
                        help="the findings the verdict (and --fail-on) counts: agreed (a "
                             "majority backs them; the default) or unconfirmed (those fewer "
                             "back and no majority disputes, too)")
    review.add_argument("--explain-config", action="store_true",
                        help="print the review rules that apply here (the repository's "
                             ".massgen/config.yaml review: block, the command line, the "
                             "defaults) and where each came from, then exit without reviewing")
    flags.team_arguments(review)
    flags.protocol_arguments(review)
    flags.role_arguments(review)
    add_limit_flags(review)
    post.add_flags(review)
    review.set_defaults(func=cmd_review)


def patch_or_paths(targets: list[str]) -> tuple[str | None, list[str]]:
    """(patch, paths) the positional arguments name: ``-`` or one ``.patch``/``.diff`` file
    is a patch; anything else is paths to review as they are."""
    if targets == ["-"] or (len(targets) == 1 and targets[0].endswith(PATCH_SUFFIXES)):
        return targets[0], []
    if "-" in targets:
        raise ConfigError("patch: '-' reads a patch from stdin and goes alone; give it "
                          "without paths")
    return None, targets


def cmd_review(args: argparse.Namespace) -> int:
    from massgen_mcp.review.start import (
        ChangeToReview,
        ReviewStarted,
        finish_review,
        start_review,
    )
    from massgen_mcp.team.context_files import Workspace

    if args.explain_config:
        return explain_config(args)
    patch, paths = patch_or_paths(args.targets)
    # None: the repository's review.fail_on, else major (review/rules.py).
    threshold = (named(Severity, args.fail_on, "--fail-on") if args.fail_on is not None
                 else None)
    tier = (named(Tier, args.fail_on_tier, "--fail-on-tier", COUNTED_TIERS)
            if args.fail_on_tier is not None else Tier.AGREED)
    if args.format == "json":
        args.json = True
    output = ReviewOutput(format="json" if args.json else args.format,
                          fail_on=threshold)
    options = options_from(args)
    models = args.models.split(",") if args.models else None
    # The run's workspace is the repository's top folder; a config file named from a
    # subfolder is still the one beside the user.
    config = (str(Path(args.config).absolute())
              if args.config and not args.config.startswith("@") else args.config)
    change = ChangeToReview(staged=args.staged, base=args.base, commit=args.commit,
                            paths=paths, patch_file=patch)

    begun: list[ReviewStarted] = []

    async def start(service: ConsensusService) -> StartedRun:
        # The user's own repository, read by the user's own command: not confined (as
        # run's --context-file).
        started = await start_review(service, Workspace(Path.cwd(), confined=False), change,
                                     focus=args.focus, models=models, config=config,
                                     base_url=args.base_url, options=options,
                                     threshold=threshold, tier=tier, output=output)
        begun.append(started)
        if args.fail_on is None and started.fail_on is not None:
            args.fail_on = str(started.fail_on)  # the repository's default: exits as --fail-on
        for note in started.notes:
            if not (args.quiet and note.startswith("estimate: ")):
                err(note)
        return started.run

    async def finish(service: ConsensusService, run: StartedRun) -> ResultRecord:
        return await finish_review(service, begun[0])  # a review in parts: all of them

    root = records_home(args)
    return follow_to_the_end(args, start, finish=finish, after=post.after_review(args),
                             root=root)


def explain_config(args: argparse.Namespace) -> int:
    """``review --explain-config``: the rules that apply in this repository and where each
    came from, on stdout; nothing is reviewed, no model is called, nothing is recorded."""
    import asyncio

    from massgen_mcp.cli.output import say
    from massgen_mcp.review.changes import repository
    from massgen_mcp.review.rules import Guidance, explain, load_rules, read_guidance

    async def gather() -> list[str]:
        top = await repository(Path.cwd())
        loaded = await asyncio.to_thread(load_rules, top)
        guidance = await read_guidance(top) if loaded.rules.guidance else Guidance()
        return explain(loaded, top, guidance=guidance, flags={
            "fail_on": args.fail_on, "focus": args.focus, "models": args.models,
            "config": args.config})

    say("\n".join(asyncio.run(gather())))
    return 0


def records_home(args: argparse.Namespace) -> Path:
    """The repository's top folder, whose ``.massgen/`` gets the review's records unless
    ``--home`` or ``$MASSGEN_HOME`` names another place (``args.home`` is set to it): one
    place from any subfolder, never the folder the review ran from. A folder that is not
    in a repository is refused here, in the words of :func:`repository`."""
    import asyncio

    from massgen_mcp.review.changes import RECORDS, repository

    root = asyncio.run(repository(Path.cwd()))
    if args.home is None and SETTINGS.home.read() is None and os.access(root, os.W_OK):
        args.home = str(root / RECORDS)
    return root
