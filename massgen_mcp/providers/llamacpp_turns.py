"""What one turn of the embedded model is asked, and how its reply is read back.

A tiny model cannot be trusted to call tools, so the workflow decision is generated under a
JSON grammar built from the tools offered on the turn (:func:`decision_schema`): the reply is
always a well-formed ``vote`` (with a label from the current enum) or ``new_answer``, which
:func:`parse_decision` reads back, closing a last string cut off by the token cap. The
conversation goes in as plain chat turns (:func:`plain_messages`), with the reply's form
described in words (:func:`decision_hint`): a tiny model copies placeholder text if it is
shown one.

A small model falls into loops ("which is 16, which is 16, ...") and writes them until it is
stopped, so every turn has a token cap sized to the model (:func:`token_cap`).

These are pure functions of the turn, apart from the engine that runs it
(:mod:`.llamacpp_provider`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.edges import UnsafeJson, find_json_object
from massgen_mcp.providers import local_model

MAX_TOKENS = 512  # a turn's cap for a model of the user's own or a pulled one
# The bundled 135M model's cap: its useful answers are a few sentences, and past that it
# rambles or loops (a 3-question eval spent minutes in "which is 16, ...").
BUNDLED_TOKENS = 192
# A turn that can only vote: the JSON with its label and a reason of VOTE_REASON_CHARS.
VOTE_TOKENS = 96
VOTE_REASON_CHARS = 200  # what get_result shows of a reason, too (SUMMARY_REASON_CHARS)


def decision_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON schema whose every instance is exactly one valid workflow call."""
    options = []
    for tool in tools:
        fn = tool["function"]
        if fn["name"] == "new_answer":
            options.append({"type": "object", "properties": {
                "action": {"const": "new_answer"},
                "content": {"type": "string", "minLength": 1}},
                "required": ["action", "content"]})
        elif fn["name"] == "vote":
            labels = fn["parameters"]["properties"]["answer"]["enum"]
            options.append({"type": "object", "properties": {
                "action": {"const": "vote"},
                "answer": {"enum": labels},
                # A reason is a sentence: unbounded, a tiny model rambles until max_tokens.
                "reason": {"type": "string", "maxLength": VOTE_REASON_CHARS}},
                "required": ["action", "answer", "reason"]})
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_decision(text: str) -> dict[str, Any] | None:
    """The decision in ``text``, closing a final string cut off by ``max_tokens``.

    The grammar fixes the key order (action, then label, then the free text), so only the last
    string can be unfinished.
    """
    trimmed = re.sub(r"\\(u[0-9a-fA-F]{0,3})?$", "", text)  # a half-written escape
    for candidate in (text, trimmed + '"}'):
        try:
            value = find_json_object(candidate)
        except UnsafeJson:
            continue
        if value is not None and "action" in value:
            return value
    return None


def decision_hint(tools: list[dict[str, Any]]) -> str:
    """Describe the reply in words: a tiny model copies placeholder text if it is shown one,
    and the grammar already enforces the JSON shape."""
    names = [t["function"]["name"] for t in tools]
    forms = []
    if "vote" in names:
        forms.append('to vote, "action" is "vote", "answer" is the label of the best answer '
                     'and "reason" says why in a few words')
    if "new_answer" in names:
        forms.append('to answer, "action" is "new_answer" and "content" is your own complete '
                     "answer to the question")
    return "Reply with a JSON object: " + "; ".join(forms) + "."


def token_cap(agent: AgentSpec, tools: list[dict[str, Any]] | None) -> int:
    """The most tokens one turn of ``agent`` may generate: its own ``max_tokens``, else a
    cap sized to the model (the bundled tiny one gets less than a pulled or custom one), and
    a turn that can only vote gets what a vote needs."""
    if agent.max_tokens:
        return agent.max_tokens
    if tools and {t["function"]["name"] for t in tools} == {"vote"}:
        return VOTE_TOKENS
    name = agent.model.removeprefix("local/")
    return BUNDLED_TOKENS if name == local_model.BUNDLED_NAME else MAX_TOKENS


def plain_messages(messages: list[dict[str, Any]], hint: str | None) -> list[dict[str, str]]:
    """OpenAI-style messages (with tool calls and tool results) as plain chat turns."""
    plain: list[dict[str, str]] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            call = message["tool_calls"][0]["function"]
            content = json.dumps({"action": call["name"], **json.loads(call["arguments"] or "{}")})
        elif role == "tool":
            role = "user"
        if plain and plain[-1]["role"] == role == "user":
            plain[-1]["content"] += "\n" + content
        else:
            plain.append({"role": role, "content": content})
    if hint and plain and plain[0]["role"] == "system":
        plain[0]["content"] += "\n\n" + hint
    return plain
