"""A finished review, posted where a pull request's reviewers read it, from what a CI job's
environment provides (GitHub Actions sets it all; another CI can set the same variables):

- ``GITHUB_STEP_SUMMARY``: the job summary gets the review as Markdown;
- ``GITHUB_OUTPUT``: the step's outputs (the verdict, the findings by tier and severity, the
  comment's URL);
- ``GITHUB_API_URL``, ``GITHUB_TOKEN``, ``GITHUB_REPOSITORY`` and ``GITHUB_EVENT_PATH`` (a
  ``pull_request`` event): **one** summary comment on the pull request, found again by its
  hidden marker and its author, created the first time and updated after; and, when asked, a
  pull-request review whose inline comments sit on the diff's lines.

A comment that carries the marker but that another identity wrote is never updated nor read
(anyone may paste the marker). Posting never changes the review: whatever fails (no token, a
fork's read-only token, GitHub's 403, 404, 422 or rate limit) is one line in the log, and the
review's output and exit code stay what they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from massgen_mcp.core.outcomes import ReviewOutcome, one_line
from massgen_mcp.core.secrets import register_secret
from massgen_mcp.render.github import (
    MARKER,
    comment_body,
    hunks_of,
    inline_comments,
    outputs,
    review_body,
    summary_markdown,
)
from massgen_mcp.tools.github import GitHub, GitHubError

DEFAULT_API_URL = "https://api.github.com"
TOKEN_HINT = ("give the step `env: GITHUB_TOKEN: ${{ github.token }}` and the job "
              "`permissions: pull-requests: write`")


@dataclass(frozen=True)
class PullRequest:
    """The pull request a ``pull_request`` event names: its number, head commit, and
    whether its head is another repository's (a fork: the token is read-only)."""

    number: int
    head: str | None
    fork: bool


@dataclass
class Posted:
    """What posting did, for the log: one line per thing said, and the comment's URL."""

    lines: list[str] = field(default_factory=list)
    comment_url: str | None = None


def pull_request_of(event_path: str | None) -> PullRequest:
    """The pull request of the event file, or one line that says why there is none."""
    if not event_path:
        raise GitHubError("GITHUB_EVENT_PATH is not set: posting needs the pull_request "
                          "event's file")
    try:
        event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GitHubError(f"GITHUB_EVENT_PATH: the event file cannot be read as JSON "
                          f"({type(exc).__name__})") from None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    number = pr.get("number") if isinstance(pr, dict) else None
    if not isinstance(pr, dict) or not isinstance(number, int):
        raise GitHubError("GITHUB_EVENT_PATH: the event is not a pull request's (run on "
                          "pull_request)")

    def repo(side: str) -> Any:
        part = pr.get(side)
        found = part.get("repo") if isinstance(part, dict) else None
        return found.get("full_name") if isinstance(found, dict) else None

    head = pr.get("head")
    sha = head.get("sha") if isinstance(head, dict) else None
    return PullRequest(number, sha if isinstance(sha, str) else None,
                       fork=repo("head") is not None and repo("head") != repo("base"))


def append(path: str, text: str, what: str) -> str | None:
    """Append ``text`` to a file the runner gave; a line saying why not, or None."""
    try:
        with open(path, "a", encoding="utf-8") as file:
            file.write(text)
    except OSError as exc:
        return f"github: {what} not written: {type(exc).__name__}: {one_line(str(exc), 120)}"
    return None


def write_outputs(path: str | None, values: Mapping[str, str]) -> str | None:
    if not path:
        return None
    text = "".join(f"{name}={value}\n" for name, value in values.items()
                   if "\n" not in value and "\r" not in value)
    return append(path, text, "GITHUB_OUTPUT")


def post_comment(github: GitHub, pr: PullRequest, body: str, said: Posted) -> None:
    """Update the pull request's one comment of ours (marker and author), or create it."""
    me = github.identity()
    marked = [c for c in github.comments(pr.number) if MARKER in str(c.get("body") or "")]
    ours = [c for c in marked if me.wrote(c)]
    if len(marked) > len(ours):
        said.lines.append(f"github: {len(marked) - len(ours)} comment(s) with the review's "
                          f"marker written by someone other than {me.login} left alone")
    if ours and isinstance(ours[0].get("id"), int):
        posted = github.update_comment(ours[0]["id"], body)
        said.lines.append(f"github: updated the review comment on #{pr.number}")
    else:
        posted = github.create_comment(pr.number, body)
        said.lines.append(f"github: commented the review on #{pr.number}")
    url = posted.get("html_url")
    said.comment_url = url if isinstance(url, str) else None


def post_review(github: GitHub, pr: PullRequest, review: ReviewOutcome, said: Posted) -> None:
    """A pull-request review with the findings that sit on the diff's lines as inline
    comments; none is posted when no finding does."""
    if pr.head is None:
        said.lines.append("github: no inline review: the event names no head commit")
        return
    hunks = {str(f.get("filename")): hunks_of(str(f.get("patch") or ""))
             for f in github.changed_files(pr.number)}
    comments, missed = inline_comments(review, hunks)
    if not comments:
        said.lines.append("github: no inline review: no finding sits on a line of the diff")
        return
    github.create_review(pr.number, pr.head, review_body(review), comments)
    said.lines.append(f"github: posted a review with {len(comments)} inline comment(s) on "
                      f"#{pr.number}" + (f" ({missed} not on the diff's lines)" if missed
                                         else ""))


def post(review: ReviewOutcome, models: Mapping[str, str], env: Mapping[str, str], *,
         inline: bool = False) -> Posted:
    """Post ``review`` as the environment says (see the module's docstring); never raises
    for GitHub's or the runner's failures: each is one line of :attr:`Posted.lines`."""
    said = Posted()
    token = env.get("GITHUB_TOKEN", "")
    register_secret(token)
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        problem = append(summary, summary_markdown(review, models) + "\n", "the job summary")
        said.lines += [problem] if problem else []
    try:
        if not token:
            raise GitHubError(f"GITHUB_TOKEN is not set; {TOKEN_HINT}")
        pr = pull_request_of(env.get("GITHUB_EVENT_PATH"))
        repository = env.get("GITHUB_REPOSITORY", "")
        with GitHub(env.get("GITHUB_API_URL") or DEFAULT_API_URL, token, repository) as github:
            try:
                run_url = _run_url(env)
                post_comment(github, pr, comment_body(review, models, head=pr.head,
                                                      run_url=run_url), said)
                if inline:
                    post_review(github, pr, review, said)
            except GitHubError as exc:
                if exc.cannot_write:
                    fork = " (a pull request from a fork: its token is read-only)" if (
                        pr.fork) else ""
                    said.lines.append(f"github: {_failed(said)}: the token cannot write to "
                                      f"{repository}{fork}; {exc}")
                    return _with_outputs(said, review, env)
                raise
    except GitHubError as exc:
        said.lines.append(f"github: {_failed(said)}: {exc}")
    return _with_outputs(said, review, env)


def _failed(said: Posted) -> str:
    """How a failure begins: nothing posted, or the comment posted and the rest not."""
    return "not posted" if said.comment_url is None else "the comment is posted, the rest not"


def _run_url(env: Mapping[str, str]) -> str | None:
    server, repository, run = (env.get("GITHUB_SERVER_URL"), env.get("GITHUB_REPOSITORY"),
                               env.get("GITHUB_RUN_ID"))
    if server and repository and run and run.isdigit() and server.startswith("https://"):
        return f"{server.rstrip('/')}/{repository}/actions/runs/{run}"
    return None


def _with_outputs(said: Posted, review: ReviewOutcome, env: Mapping[str, str]) -> Posted:
    values = outputs(review)
    if said.comment_url:
        values["comment_url"] = said.comment_url
    problem = write_outputs(env.get("GITHUB_OUTPUT"), values)
    said.lines += [problem] if problem else []
    return said
