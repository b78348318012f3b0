"""A small GitHub REST client for posting a review where a pull request's reviewers read it:
who the token is, a pull request's issue comments and changed files, and creating or
updating a comment or a review.

The token is a credential like a provider's key: registered with
:func:`massgen_mcp.core.secrets.register_secret` the moment a client is made, so every record,
log line and message masks it; it goes only to ``GITHUB_API_URL`` (https, or http on this
machine), never over a redirect, and a ``Link`` to another origin is not followed. Every
failure is one :class:`GitHubError` line that names the request and GitHub's reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from massgen_mcp._version import __version__
from massgen_mcp.core.net import is_loopback
from massgen_mcp.core.outcomes import one_line
from massgen_mcp.core.secrets import redact, register_secret

API_VERSION = "2022-11-28"
ACTIONS_BOT = "github-actions[bot]"  # who GITHUB_TOKEN writes as; it may not read GET /user
PAGES = 30  # 3,000 comments or files at 100 a page: more is not a pull request we post on
TIMEOUT_S = 30.0
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class GitHubError(Exception):
    """A request GitHub refused or that did not reach it, in one line without the token;
    ``status`` is the HTTP status (None: no answer), ``cannot_write`` a 403 that is not a
    rate limit (a read-only token: a fork's pull request)."""

    def __init__(self, message: str, status: int | None = None, *,
                 cannot_write: bool = False) -> None:
        super().__init__(redact(message))
        self.status = status
        self.cannot_write = cannot_write


@dataclass(frozen=True)
class Identity:
    """Who the token writes as: a login, and its id where GitHub said (GET /user)."""

    login: str
    id: int | None = None

    def wrote(self, comment: dict[str, Any]) -> bool:
        """Whether ``comment`` (an issue comment as the API returns it) was written by this
        identity: its author's login, and id when known, are ours."""
        user = comment.get("user")
        if not isinstance(user, dict) or user.get("login") != self.login:
            return False
        return self.id is None or user.get("id") == self.id


def check_api_url(url: str) -> str:
    """``url`` without its trailing slash, if a token may go there: https, or http to this
    machine (a test's server); else one line that names ``GITHUB_API_URL``."""
    parts = urlsplit(url)
    if not parts.hostname or (parts.scheme != "https" and not (
            parts.scheme == "http" and is_loopback(parts.hostname))):
        raise GitHubError(f"GITHUB_API_URL: {one_line(url, 80)!r} is not an https URL; the "
                          "token goes only to GitHub's API over https")
    return url.rstrip("/")


def check_repository(name: str) -> str:
    if not _REPOSITORY.fullmatch(name):
        raise GitHubError(f"GITHUB_REPOSITORY: {one_line(name, 80)!r} is not owner/name")
    return name


def _reason(response: httpx.Response) -> str:
    """GitHub's own words for a refusal: its message and the first error's detail."""
    try:
        data = response.json()
    except ValueError:
        return one_line(response.text, 160) or response.reason_phrase
    if not isinstance(data, dict):
        return response.reason_phrase
    words = str(data.get("message") or response.reason_phrase)
    errors = data.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        detail = first.get("message") or first.get("code") if isinstance(first, dict) else first
        if detail:
            words += f" ({detail})"
    return one_line(words, 200)


def _rate_limited(response: httpx.Response) -> str | None:
    """How long until a rate-limited request may be made again, in words, or None when the
    answer is not a rate limit (a 429, or a 403 with no requests left or a Retry-After)."""
    headers = response.headers
    if response.status_code not in (403, 429):
        return None
    if "retry-after" in headers:
        return f"retry after {one_line(headers['retry-after'], 20)} s"
    if headers.get("x-ratelimit-remaining") == "0":
        reset = headers.get("x-ratelimit-reset")
        return f"the limit resets at {one_line(reset, 20)} (epoch seconds)" if reset else (
            "no requests left")
    return "rate limited" if response.status_code == 429 else None


class GitHub:
    """GitHub's REST API for one repository, with one token."""

    def __init__(self, api_url: str, token: str, repository: str, *,
                 timeout_s: float = TIMEOUT_S) -> None:
        register_secret(token)
        self.api_url = check_api_url(api_url)
        self.repository = check_repository(repository)
        self._client = httpx.Client(
            base_url=self.api_url, timeout=timeout_s, follow_redirects=False, trust_env=False,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                     "X-GitHub-Api-Version": API_VERSION,
                     "User-Agent": f"massgen-mcp/{__version__}"})

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, url: str, *, what: str, json: Any = None,
                 params: dict[str, Any] | None = None) -> httpx.Response:
        try:
            response = self._client.request(method, url, json=json, params=params)
        except httpx.HTTPError as exc:
            raise GitHubError(f"{what}: GitHub's API did not answer "
                              f"({type(exc).__name__}: {one_line(str(exc), 160)})") from None
        if response.is_success:
            return response
        status = response.status_code
        wait = _rate_limited(response)
        if wait is not None:
            raise GitHubError(f"{what}: GitHub's rate limit ({status}): {wait}", status)
        reason = _reason(response)
        if status == 403:
            raise GitHubError(f"{what}: the token may not do this (403: {reason})", status,
                              cannot_write=True)
        if status == 401:
            raise GitHubError(f"{what}: the token was refused (401: {reason})", status)
        if status == 404:
            raise GitHubError(f"{what}: not found, or not visible to the token (404: "
                              f"{reason})", status)
        raise GitHubError(f"{what}: GitHub refused it ({status}: {reason})", status)

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise GitHubError(f"{what}: GitHub's answer is not JSON") from None

    def _pages(self, path: str, what: str) -> list[dict[str, Any]]:
        """Every item of a paginated list (``Link: <...>; rel="next"``, followed only on the
        API's own origin, at most :data:`PAGES` pages)."""
        items: list[dict[str, Any]] = []
        url: str | None = path
        params: dict[str, Any] | None = {"per_page": 100}
        origin = urlsplit(self.api_url)[:2]
        for _ in range(PAGES):
            if url is None:
                break
            response = self._request("GET", url, what=what, params=params)
            page = self._json(response, what)
            if not isinstance(page, list):
                raise GitHubError(f"{what}: GitHub's answer is not a list")
            items += [item for item in page if isinstance(item, dict)]
            found = _NEXT.search(response.headers.get("link", ""))
            url = found.group(1) if found and urlsplit(found.group(1))[:2] == origin else None
            params = None  # the next link carries its own
        return items

    def identity(self) -> Identity:
        """Who the token writes as: GET /user, or, for an Actions token (which may not read
        it: 403), the Actions bot."""
        try:
            user = self._json(self._request("GET", "/user", what="GET /user"), "GET /user")
        except GitHubError as exc:
            if exc.cannot_write:
                return Identity(ACTIONS_BOT)
            raise
        if not isinstance(user, dict) or not isinstance(user.get("login"), str):
            raise GitHubError("GET /user: GitHub's answer has no login")
        uid = user.get("id")
        return Identity(user["login"], uid if isinstance(uid, int) else None)

    def comments(self, number: int) -> list[dict[str, Any]]:
        return self._pages(f"/repos/{self.repository}/issues/{number}/comments",
                           f"listing the comments of #{number}")

    def create_comment(self, number: int, body: str) -> dict[str, Any]:
        what = f"commenting on #{number}"
        response = self._request("POST", f"/repos/{self.repository}/issues/{number}/comments",
                                 what=what, json={"body": body})
        return dict(self._json(response, what))

    def update_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        what = f"updating comment {comment_id}"
        response = self._request("PATCH",
                                 f"/repos/{self.repository}/issues/comments/{comment_id}",
                                 what=what, json={"body": body})
        return dict(self._json(response, what))

    def changed_files(self, number: int) -> list[dict[str, Any]]:
        return self._pages(f"/repos/{self.repository}/pulls/{number}/files",
                           f"listing the files of #{number}")

    def create_review(self, number: int, commit: str, body: str,
                      comments: list[dict[str, Any]]) -> dict[str, Any]:
        what = f"posting a review on #{number}"
        response = self._request("POST", f"/repos/{self.repository}/pulls/{number}/reviews",
                                 what=what, json={"commit_id": commit, "event": "COMMENT",
                                                  "body": body, "comments": comments})
        return dict(self._json(response, what))
