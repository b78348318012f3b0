"""Whether a review's team can do it, asked before anything runs: which members can write a
review at all, and how much of a diff each member's context window holds.

A review's largest call is a member's vote: the instructions, the diff and every member's
review (:mod:`.estimate` counts it the same way). A member whose window is known and cannot
hold that call would fail mid-run (llama.cpp answers ``exceed_context_size_error``, an API
a 400), after its peers had spent their calls; so the diff is split into parts that fit the
smallest known window (:mod:`.parts`), and a window that cannot hold even the instructions
is refused in one line. A window is known for the embedded model (its ``n_ctx``) and for
models litellm's model map lists (``max_input_tokens``, at its provider's API or at a
server of one's own); a name the map does not know, or a coding CLI, is not judged (its
server knows, and the run says what it answers).

The embedded model (SmolLM2-135M, or any GGUF run in-process) is refused for a review in one
line that names what works: measured on the fixture repository's 575-byte change, three
embedded members wrote no usable review in 9 tries (every member dropped with
``bad_review``, 155 s on a busy 2-core machine). A grammar could force the JSON's shape,
not a finding worth reading, and an empty review is an approval.
"""

from __future__ import annotations

from collections.abc import Sequence

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.providers.llamacpp_provider import CONTEXT_TOKENS
from massgen_mcp.providers.model_map import model_map
from massgen_mcp.review.estimate import REPLY_TOKENS, call_chars

WHAT_WORKS = ("review with models that can: API models with their keys (--models "
              "openai/gpt-4o-mini,anthropic/claude-haiku-4-5,gemini/gemini-2.5-flash), a "
              "local server (--models qwen2.5-coder@http://127.0.0.1:11434/v1), or coding "
              "CLIs (--models cli/claude,cli/codex,cli/gemini)")


def context_window(agent: AgentSpec) -> int | None:
    """The tokens ``agent``'s model reads in one call, where that is known: the embedded
    model's ``n_ctx``, else litellm's map (``max_input_tokens``, or the older ``max_tokens``
    that meant the same). None: a coding CLI, or a name the map does not list (most models a
    server of one's own serves: its server decides)."""
    if agent.model.startswith("local/"):
        return CONTEXT_TOKENS
    if agent.cli:
        return None
    table = model_map() or {}
    entry = table.get(agent.model) or table.get(agent.model.split("/", 1)[-1])
    if not isinstance(entry, dict):
        return None
    for key in ("max_input_tokens", "max_tokens"):
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def refuse_embedded(agents: Sequence[AgentSpec]) -> None:
    """Refuse a review whose team has embedded members, in one line naming them and what
    works (the module's docstring says why)."""
    embedded = [f"{agent.id} ({agent.model})" for agent in agents
                if agent.model.startswith("local/")]
    if embedded:
        raise ConfigError(f"models: {', '.join(embedded)} run on the embedded model, which "
                          "cannot write a usable review (it is for offline runs of "
                          f"questions); {WHAT_WORKS}")


def diff_room(agents: Sequence[AgentSpec], question: str) -> int | None:
    """The most characters of diff one review run can send for ``agents`` asked
    ``question``: what the smallest known window holds of a vote call, less the reply;
    None when no member's window is known. A window that cannot hold even the instructions
    (no room for one line of diff) is refused in one line naming the member."""
    room: int | None = None
    for agent in agents:
        window = context_window(agent)
        if window is None:
            continue
        bare = call_chars(len(agents), question, "") + QUESTION_SLACK_CHARS
        held = (window - REPLY_TOKENS) * WINDOW_CHARS_PER_TOKEN - bare
        if held < MIN_PART_CHARS:
            raise ConfigError(
                f"models: {agent.id} ({agent.model}) reads {window:,} tokens in a call, and "
                f"this review's instructions and replies alone take "
                f"~{bare // WINDOW_CHARS_PER_TOKEN + REPLY_TOKENS:,}; choose a model with a "
                "larger context window, or a smaller team")
        room = held if room is None else min(room, held)
    return room


MIN_PART_CHARS = 2_000  # less than this: a part would hold a hunk or two
# Code and diffs tokenize denser than prose (punctuation, indentation): a window is filled
# at 3 characters a token, not the 4 the cost estimate reckons, so a part surely fits.
WINDOW_CHARS_PER_TOKEN = 3
QUESTION_SLACK_CHARS = 500  # a part's question names its part (the room is reckoned once)
