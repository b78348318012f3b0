"""A scripted GitHub REST server on 127.0.0.1 for the tests that post a review: the endpoints
``review --post github`` calls, in the shapes GitHub's API answers them (docs.github.com/rest:
issue comments listed with ``Link`` pagination, created and updated; a pull request's files
with their ``patch``; a pull-request review created; ``GET /user``), who each token is, and
the refusals a test plants (403, 404, 422, a rate limit's 403 or 429 with its headers).

Every request is kept (:attr:`GitHubServer.requests`), so a test sees what was sent."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REPOSITORY = "octo/shop"
ACTIONS_TOKEN = "ghs_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # writes as github-actions[bot]
MAINTAINER_TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"  # a person, octocat
BOT = {"login": "github-actions[bot]", "id": 41898282, "type": "Bot"}
OCTOCAT = {"login": "octocat", "id": 583231, "type": "User"}
MALLORY = {"login": "mallory", "id": 666, "type": "User"}


@dataclass
class Sent:
    """One request as the server got it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Refusal:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


FORBIDDEN = Refusal(403, {"message": "Resource not accessible by integration",
                          "documentation_url": "https://docs.github.com/rest"})
NOT_FOUND = Refusal(404, {"message": "Not Found"})
UNPROCESSABLE = Refusal(422, {"message": "Unprocessable Entity", "errors": [
    "Line could not be resolved"]})
RATE_LIMITED = Refusal(403, {"message": "API rate limit exceeded for installation."},
                       {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1767225600"})
SECONDARY_LIMIT = Refusal(429, {"message": "You have exceeded a secondary rate limit."},
                          {"retry-after": "60"})


class GitHubServer:
    """The scripted API: ``comments`` and ``reviews`` are the pull requests' state, ``files``
    each pull request's changed files, ``refuse`` maps ``"METHOD /path"`` (a regular
    expression, matched whole) to the refusal answered instead."""

    def __init__(self) -> None:
        self.users = {ACTIONS_TOKEN: BOT, MAINTAINER_TOKEN: OCTOCAT}
        self.comments: dict[int, list[dict[str, Any]]] = {}
        self.reviews: dict[int, list[dict[str, Any]]] = {}
        self.files: dict[int, list[dict[str, Any]]] = {}
        self.refuse: dict[str, Refusal] = {}
        self.requests: list[Sent] = []
        self._next_id = 1000
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def start(self) -> GitHubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def plant(self, number: int, user: dict[str, Any], body: str) -> dict[str, Any]:
        """A comment someone wrote on pull request ``number`` (a forged marker, say)."""
        return self._new_comment(number, user, body)

    def _new_comment(self, number: int, user: dict[str, Any], body: str) -> dict[str, Any]:
        self._next_id += 1
        cid = self._next_id
        comment = {"id": cid, "node_id": f"IC_{cid}", "body": body, "user": dict(user),
                   "html_url": f"https://github.com/{REPOSITORY}/pull/{number}#issuecomment-{cid}",
                   "url": f"{self.url}/repos/{REPOSITORY}/issues/comments/{cid}",
                   "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
                   "author_association": "NONE",
                   "performed_via_github_app": ({"slug": "github-actions"}
                                                if user["login"] == BOT["login"] else None)}
        self.comments.setdefault(number, []).append(comment)
        return comment

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None
                        ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                sent = Sent(self.command, parts.path, parse_qs(parts.query),
                            {k.lower(): v for k, v in self.headers.items()},
                            json.loads(raw) if raw else None)
                with server._lock:
                    server.requests.append(sent)
                    status, body, headers = server._route(sent)
                self._answer(status, body, headers)

            do_GET = do_POST = do_PATCH = _serve

        return Handler

    def _route(self, sent: Sent) -> tuple[int, Any, dict[str, str]]:
        auth = sent.headers.get("authorization", "")
        user = self.users.get(auth.removeprefix("Bearer "))
        if not auth.startswith("Bearer ") or user is None:
            return 401, {"message": "Bad credentials"}, {}
        for pattern, refusal in self.refuse.items():
            if re.fullmatch(pattern, f"{sent.method} {sent.path}"):
                return refusal.status, refusal.body, refusal.headers
        if sent.path == "/user" and sent.method == "GET":
            if user is BOT:  # an installation token may not read /user
                return FORBIDDEN.status, FORBIDDEN.body, {}
            return 200, {**user, "html_url": f"https://github.com/{user['login']}"}, {}
        repo = f"/repos/{REPOSITORY}"
        if match := re.fullmatch(rf"{repo}/issues/(\d+)/comments", sent.path):
            number = int(match.group(1))
            if sent.method == "GET":
                return self._page(sent, self.comments.get(number, []))
            return 201, self._new_comment(number, user, str(sent.body["body"])), {}
        if match := re.fullmatch(rf"{repo}/issues/comments/(\d+)", sent.path):
            cid = int(match.group(1))
            found = [c for cs in self.comments.values() for c in cs if c["id"] == cid]
            if not found:
                return NOT_FOUND.status, NOT_FOUND.body, {}
            if found[0]["user"]["login"] != user["login"]:  # Actions' token edits its own
                return FORBIDDEN.status, FORBIDDEN.body, {}
            found[0].update(body=str(sent.body["body"]), updated_at="2026-12-02T00:00:00Z")
            return 200, found[0], {}
        if match := re.fullmatch(rf"{repo}/pulls/(\d+)/files", sent.path):
            return self._page(sent, self.files.get(int(match.group(1)), []))
        if match := re.fullmatch(rf"{repo}/pulls/(\d+)/reviews", sent.path):
            number = int(match.group(1))
            review = {"id": len(self.reviews.get(number, [])) + 1, "user": dict(user),
                      "state": "COMMENTED", **sent.body}
            self.reviews.setdefault(number, []).append(review)
            return 200, review, {}
        return NOT_FOUND.status, NOT_FOUND.body, {}

    def _page(self, sent: Sent, items: list[dict[str, Any]]) -> tuple[int, Any, dict[str, str]]:
        per_page = int(sent.query.get("per_page", ["30"])[0])
        page = int(sent.query.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page:page * per_page]
        headers = {}
        if page * per_page < len(items):
            headers["Link"] = (f'<{self.url}{sent.path}?per_page={per_page}&page={page + 1}>; '
                               f'rel="next", <{self.url}{sent.path}?per_page={per_page}&page='
                               f'{-(-len(items) // per_page)}>; rel="last"')
        return 200, chunk, headers


# The runner's parse of a log line (actions/runner ActionCommandManager.TryProcessCommand):
# a line that starts with "::" after its leading blanks is a command (TryParseV2: name,
# properties, "::", data); failing that, "##[name ...]data" anywhere in it (TryParse, legacy).
_V2 = re.compile(r"^::([^\s:]+)(?: ([^:]*))?::(.*)$")
_LEGACY = re.compile(r"##\[([^\]\s]+)[^\]]*\](.*)$")


def _unescape(text: str, *, prop: bool = False) -> str:
    pairs = [("%0D", "\r"), ("%0A", "\n")] + ([("%3A", ":"), ("%2C", ",")] if prop else [])
    for escaped, plain in [*pairs, ("%25", "%")]:
        text = text.replace(escaped, plain)
    return text


def runner_commands(log: str) -> list[tuple[str, dict[str, str], str]]:
    """Every workflow command GitHub's runner would obey in ``log`` (its lines split as .NET's
    ReadLine splits them: CR, LF or CRLF), properties and data unescaped; a legacy one's
    name is given as ``##[name``."""
    found = []
    for line in re.split(r"\r\n|\r|\n", log):
        v2 = _V2.match(line.lstrip(" \t"))
        if v2 is not None:
            props = dict(p.split("=", 1) for p in (v2.group(2) or "").split(",") if p)
            found.append((v2.group(1), {k: _unescape(v, prop=True) for k, v in props.items()},
                          _unescape(v2.group(3))))
        elif (legacy := _LEGACY.search(line)) is not None:
            found.append(("##[" + legacy.group(1), {}, legacy.group(2)))
    return found


def event_file(folder: Path, number: int = 7, *, head: str = "0" * 40,
               fork: bool = False) -> Path:
    """A ``pull_request`` event's file, as GitHub writes ``$GITHUB_EVENT_PATH``."""
    head_repo = "mallory/shop" if fork else REPOSITORY
    event = {"action": "synchronize", "number": number, "pull_request": {
        "number": number, "state": "open", "title": "Shop changes",
        "head": {"ref": "feature", "sha": head, "repo": {"full_name": head_repo}},
        "base": {"ref": "main", "sha": "f" * 40, "repo": {"full_name": REPOSITORY}}},
        "repository": {"full_name": REPOSITORY}}
    path = folder / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    return path

