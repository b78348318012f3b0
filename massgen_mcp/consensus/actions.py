"""Turn a model's reply into exactly one valid workflow action, or say precisely what is wrong.

The same rules apply to native tool calls and to the JSON fallback, so a model without tool
calling plays by the same protocol. Problems are phrased for the model, because the message is
sent back to it as the corrective retry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from massgen_mcp.consensus.findings import review_problem
from massgen_mcp.consensus.state import View, normalise
from massgen_mcp.core.edges import UnsafeJson, find_json_object, load_json
from massgen_mcp.core.repetition import loop_start, without_loop
from massgen_mcp.providers.base import Completion

MAX_REASON_CHARS = 2_000
# Every answer goes to every peer on every turn and into the record: a runaway reply must not.
MAX_ANSWER_CHARS = 100_000


@dataclass(frozen=True)
class NewAnswer:
    content: str


@dataclass(frozen=True)
class CastVote:
    label: str
    reason: str


@dataclass(frozen=True)
class Invalid:
    problem: str  # sent back to the model
    kind: str  # short machine-readable reason for the record


Action = NewAnswer | CastVote

# MassGen's answer_novelty_requirement, measured without a model call: the share of words a new
# answer has in common with a current answer (Jaccard similarity of their lower-cased word
# sets). A new answer at or above the level's limit against any current answer (its author's
# own included) only rephrases it, and is refused with a corrective retry that says to vote.
# lenient: only identical answers are refused (as always).
NOVELTY_LIMITS = {"balanced": 0.70, "strict": 0.50}
_WORD = re.compile(r"\w+")


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of two texts' word sets (0: no word in common, 1: the same words)."""
    left, right = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def _calls_from_json(text: str | None) -> list[tuple[str, object]] | Invalid:
    try:
        value = find_json_object(text or "")
    except UnsafeJson as exc:
        return Invalid(f"your JSON is not usable: {exc}.", "bad_arguments")
    if not isinstance(value, dict):
        return Invalid("your reply did not contain a JSON object.", "no_action")
    action = value.get("action")
    if action == "vote":
        return [("vote", {"answer": value.get("answer"), "reason": value.get("reason", "")})]
    if action == "new_answer":
        return [("new_answer", {"content": value.get("content")})]
    return Invalid('"action" must be "vote" or "new_answer".', "no_action")


def _calls_from_tools(completion: Completion) -> list[tuple[str, object]] | Invalid:
    calls: list[tuple[str, object]] = []
    for call in completion.tool_calls:
        if call.name not in ("vote", "new_answer"):
            return Invalid(f"there is no tool named {call.name!r}.", "unknown_tool")
        try:
            arguments = load_json(call.arguments or "{}")
        except UnsafeJson as exc:
            return Invalid(f"the arguments of {call.name} are not valid JSON: {exc}.",
                           "bad_arguments")
        calls.append((call.name, arguments))
    if not calls:
        return Invalid("you did not call a tool.", "no_action")
    return calls


def parse_action(completion: Completion, view: View, *, native_tools: bool,
                 novelty: str = "lenient", retried: bool = False,
                 reviews: bool = False) -> Action | Invalid:
    """Validate one reply against the view it was given (``novelty``: the run's
    answer_novelty_requirement; ``retried``: the reply answers a corrective retry;
    ``reviews``: a review run, whose answers must be reviews, :mod:`.findings`)."""
    calls = _calls_from_tools(completion) if native_tools else _calls_from_json(completion.content)
    if isinstance(calls, Invalid):
        return calls
    names = {name for name, _ in calls}
    if names == {"vote", "new_answer"}:
        return Invalid("you called both vote and new_answer; choose one.", "both_actions")
    name, arguments = calls[-1]  # several calls of one tool: the last one stands
    if not isinstance(arguments, dict):
        return Invalid(f"the arguments of {name} must be a JSON object.", "bad_arguments")
    if name == "new_answer":
        checked = _check_answer(arguments.get("content"), view, novelty, retried)
        if reviews and isinstance(checked, NewAnswer):
            problem = review_problem(checked.content)
            if problem is not None:
                return Invalid(problem, "bad_review")
        return checked
    return _check_vote(arguments.get("answer"), arguments.get("reason"), view)


def _check_answer(content: object, view: View, novelty: str = "lenient",
                  retried: bool = False) -> NewAnswer | Invalid:
    if not view.may_answer:
        return Invalid("you have no answers left; you can only vote.", "answer_limit")
    if not isinstance(content, str) or not content.strip():
        return Invalid("new_answer needs a non-empty 'content' string.", "empty_answer")
    if len(content) > MAX_ANSWER_CHARS:
        return Invalid(f"your answer is {len(content)} characters; the limit is "
                       f"{MAX_ANSWER_CHARS}. Shorten it and call new_answer again.",
                       "answer_too_long")
    if loop_start(content) is not None:
        # A model caught in a loop (core/repetition.py) is too long in another way: told so
        # once; if the retry loops too, its answer is kept up to the loop's first copy, as
        # the agent is better kept than dropped for a tiny model's habit.
        if not retried:
            return Invalid("your answer repeats the same words over and over. Say it once, "
                           "briefly, and call new_answer again.", "answer_too_long")
        content = without_loop(content)
    wanted = normalise(content)
    for answer in view.answers:
        if normalise(answer.content) == wanted:
            return Invalid(
                f"your answer is identical to {answer.label}; vote for it instead.",
                "duplicate_answer",
            )
    limit = NOVELTY_LIMITS.get(novelty)
    if limit is not None:
        for answer in view.answers:
            shared = similarity(content, answer.content)
            if shared >= limit:
                return Invalid(
                    f"your answer shares {shared:.0%} of its words with {answer.label}; this "
                    f"run requires new answers to differ more ({novelty}: under "
                    f"{limit:.0%}). If {answer.label} is right, vote for it; otherwise give "
                    "an answer that is substantially different.", "not_novel")
    return NewAnswer(content.strip())


def _check_vote(label: object, reason: object, view: View) -> CastVote | Invalid:
    if view.first_round:
        return Invalid("there are no answers to vote for yet.", "vote_no_answers")
    if isinstance(label, str) and label == view.own and label not in view.vote_labels:
        return Invalid(
            f"{label} is your own answer, and this run does not count votes for one's own "
            f"answer; vote for one of {', '.join(view.vote_labels)}, or give a better answer.",
            "self_vote")
    if not isinstance(label, str) or label not in view.vote_labels:
        return Invalid(
            f"{label!r} is not a current answer label; valid labels: "
            f"{', '.join(view.vote_labels)}.", "invalid_vote_label",
        )
    text = reason.strip() if isinstance(reason, str) else ""
    return CastVote(label, text[:MAX_REASON_CHARS])


_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL | re.IGNORECASE)


def presented_action(text: str) -> tuple[str, str | None] | None:
    """What a final presentation is when the whole reply is a workflow action, not an answer
    (a coding-agent CLI that keeps playing the protocol answered ``{"action": "vote", ...}``):
    ``("new_answer", content)`` for an answer with usable content, ``(action, None)`` for a
    vote or anything else with an ``action``. None for a reply that is an answer (JSON an
    answer merely contains is left alone: only a reply that is nothing but the object)."""
    fenced = _FENCE.match(text.strip())
    body = fenced.group(1) if fenced else text.strip()
    if not body.startswith("{"):
        return None
    try:
        value = load_json(body)
    except UnsafeJson:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        return None
    action = value["action"][:40]
    content = value.get("content")
    if action == "new_answer" and isinstance(content, str) and content.strip() and (
            len(content) <= MAX_ANSWER_CHARS):
        return action, content.strip()
    return action, None


def parse_check(text: str) -> tuple[str, str | None]:
    """(verdict, feedback) from a check reply; anything but a well-formed restart accepts."""
    try:
        value = find_json_object(text)
    except UnsafeJson:
        value = None
    if value is not None and value.get("verdict") == "restart":
        feedback = str(value.get("feedback") or "").strip()[:2_000]
        if feedback:
            return "restart", feedback
    if value is not None and value.get("verdict") == "accept":
        return "accept", None
    return "accept", "the check's reply was not a verdict; the answer stands"
