"""``review``'s flags for CI: ``--post github`` (the job summary, the step's outputs, the one
summary comment on the pull request, and with ``--post-review`` a review with inline comments;
:mod:`massgen_mcp.review.post`) and ``--sarif-file`` (the SARIF beside another ``--format``),
all from one run, after its output is printed; what fails is said in one line each and the
exit code stays the review's."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from massgen_mcp.cli.output import err
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import replace_file
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.core.secrets import redact, register_secret


def add_flags(review: Any) -> None:
    review.add_argument("--post", choices=("github",),
                        help="github: post the review where the pull request's reviewers read "
                             "it: the job summary, the step's outputs and one summary comment, "
                             "updated on every run (GITHUB_TOKEN, GITHUB_EVENT_PATH, ...; "
                             "docs/review.md#github-actions)")
    review.add_argument("--post-review", action="store_true",
                        help="with --post github: also a pull-request review with the "
                             "findings as inline comments on the diff's lines")
    review.add_argument("--sarif-file", metavar="PATH",
                        help="also write the review as SARIF 2.1.0 to PATH (for code scanning, "
                             "beside --format github)")


def after_review(args: argparse.Namespace) -> Callable[[ResultRecord], None] | None:
    """What to do with the finished review's result, or None when no flag asks. The token
    is registered as a secret now, before the run starts, so no record or line shows it."""
    if args.post_review and not args.post:
        raise ConfigError("--post-review: it posts with --post github; add --post github")
    if not args.post and not args.sarif_file:
        return None
    register_secret(os.environ.get("GITHUB_TOKEN"))

    def after(result: ResultRecord) -> None:
        from massgen_mcp.render.review import as_sarif
        from massgen_mcp.review.post import post

        if result.review is None:
            err("github: not posted: the review has no outcome" if args.post
                else "--sarif-file: not written: the review has no outcome")
            return
        models = {aid: agent.model for aid, agent in result.agents.items()}
        if args.sarif_file:
            sarif = as_sarif(result.review, models, session_id=result.session_id)
            try:
                replace_file(Path(args.sarif_file),
                             redact(json.dumps(sarif, ensure_ascii=False, indent=2)) + "\n")
            except OSError as exc:
                err(f"--sarif-file: not written to {args.sarif_file}: {exc.strerror or exc}")
        if args.post == "github":
            for line in post(result.review, models, os.environ,
                             inline=args.post_review).lines:
                err(redact(line))

    return after
