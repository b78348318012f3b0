"""Scripted policies: what a scripted model is asked (:class:`ChatRequest`, parsed: which
model, which labels the vote tool allows, which answers the prompt shows, what the call is
for) and what it answers (:class:`Reply`, built with the helpers below), and the policy every
demo uses (:func:`agree`).

A call's purpose is recognised by the marks the protocol's prompts are built around
(:mod:`massgen_mcp.providers.marks`), never by other words of a prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from massgen_mcp.core.records import CallPurpose
from massgen_mcp.providers.marks import JSON_MARK, PURPOSE_MARKS

_ANSWER = re.compile(r'<answer label="([A-H][0-9]{1,2})">\n(.*?)\n</answer>', re.DOTALL)


@dataclass
class ChatRequest:
    """One chat-completion request, parsed for the policy."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    call_index: int  # how many requests this model received before this one
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def vote_labels(self) -> list[str]:
        for tool in self.tools:
            if tool["function"]["name"] == "vote":
                return list(tool["function"]["parameters"]["properties"]["answer"]["enum"])
        return []

    @property
    def system(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "system"), "")

    @property
    def user(self) -> str:
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")

    @property
    def answers(self) -> dict[str, str]:
        """Label -> answer text shown in the prompt."""
        return dict(_ANSWER.findall(self.user))

    @property
    def purpose(self) -> CallPurpose | None:
        """FINAL or CHECK for a call without tools whose system prompt names it, else None
        (a workflow turn: told apart by its tools, or by :attr:`wants_json`)."""
        if self.tools:
            return None
        return next((p for p, mark in PURPOSE_MARKS.items() if mark in self.system), None)

    @property
    def is_final(self) -> bool:
        return self.purpose is CallPurpose.FINAL

    @property
    def is_check(self) -> bool:
        """The winner's check of the final answer (max_orchestration_restarts)."""
        return self.purpose is CallPurpose.CHECK

    @property
    def wants_json(self) -> bool:
        """A workflow turn of a model without tool calling: answer or vote as JSON."""
        return not self.tools and self.purpose is None and JSON_MARK in self.system

    @property
    def is_retry(self) -> bool:
        return len(self.messages) > 2

    def label_of(self, text: str) -> str:
        """The label of the shown answer containing ``text``."""
        for label, content in self.answers.items():
            if text in content:
                return label
        raise LookupError(f"no answer containing {text!r} in {self.answers}")

    def prompt_chars(self) -> int:
        return len(json.dumps(self.messages)) + (len(json.dumps(self.tools)) if self.tools else 0)


@dataclass
class Reply:
    """What the server sends back. Build it with the helpers below."""

    kind: str  # "answer" | "vote" | "text" | "tool_calls" | "error" | "raw" | "drop"
    content: str = ""
    label: str = ""
    reason: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def answer(content: str, delay_s: float = 0.0) -> Reply:
    return Reply("answer", content=content, delay_s=delay_s)


def vote(label: str, reason: str = "best answer", delay_s: float = 0.0) -> Reply:
    return Reply("vote", label=label, reason=reason, delay_s=delay_s)


def text(content: str, delay_s: float = 0.0) -> Reply:
    return Reply("text", content=content, delay_s=delay_s)


def tool_calls(*calls: tuple[str, str]) -> Reply:
    """Raw tool calls: (name, arguments JSON text) pairs, valid or not."""
    return Reply("tool_calls", calls=list(calls))


def error(status: int, message: str = "scripted error", retry_after: float | None = None
          ) -> Reply:
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return Reply("error", content=message, status=status, headers=headers)


def raw(body: str, status: int = 200) -> Reply:
    """Send ``body`` as-is (e.g. truncated JSON)."""
    return Reply("raw", content=body, status=status)


def drop() -> Reply:
    """Close the connection without answering."""
    return Reply("drop")


Policy = Callable[[ChatRequest], Reply]


def agree(req: ChatRequest) -> Reply:
    """Scenario A of the benchmarks: answer first, then vote for the first valid choice."""
    if req.is_final:
        return text("Final: " + next(iter(req.answers.values()), "no answer"))
    if req.is_check:
        return text('{"verdict": "accept"}')
    if req.vote_labels:
        return vote(req.vote_labels[0], "it answers the question")
    if req.wants_json and "<answers>" in req.user:
        return vote(next(iter(req.answers)), "it answers the question")
    return answer(f"The answer from {req.model} is 42.")


def converge(req: ChatRequest) -> Reply:
    """Like :func:`agree`, but every agent votes for the same answer (the first by label),
    as when models agree (our views are rotated, the viewer's own answer last, so under
    :func:`agree` the first shown differs per agent; MassGen 0.1.97 rotates its views too)."""
    if req.vote_labels and not (req.is_final or req.is_check):
        return vote(sorted(req.vote_labels)[0], "it answers the question")
    return agree(req)
