"""Team model names and the message rules shared by the team's two model faces: the
OpenAI-compatible endpoint (:mod:`massgen_mcp.server.openai_api`) and the LiteLLM provider
(:mod:`massgen_mcp.api.litellm_team`). Kept apart from :mod:`massgen_mcp.api.python` (the run
functions) so each face reads the same rules and says the same things.

A *team model name* says which team answers: ``massgen`` (the default team, as with no
models), ``massgen/@preset`` (a preset from ``configs/``) or ``massgen/<name>`` (the file
``<name>.yaml`` in the user config folder, e.g. ``~/.config/massgen-mcp/research.yaml``).
"""

from __future__ import annotations

import re
from typing import Any

from massgen_mcp.core.env import user_config_dir
from massgen_mcp.core.errors import ConfigError, UnknownTeamError
from massgen_mcp.core.run_state import ResultRecord

DEFAULT_TEAM = "massgen"
_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")




def team_names() -> list[str]:
    """Every team model name that works here: the default, the presets, the user's configs."""
    from massgen_mcp.team.presets import presets_dir

    names = [DEFAULT_TEAM]
    names += [f"{DEFAULT_TEAM}/@{p.stem}" for p in sorted(presets_dir().glob("*.yaml"))]
    folder = user_config_dir()
    if folder.is_dir():
        names += [f"{DEFAULT_TEAM}/{p.stem}" for p in sorted(folder.glob("*.yaml"))
                  if _NAME.fullmatch(p.stem) and p.stem != "config"]
    return names


def team_config(model: str) -> str | None:
    """The ``config`` a team model name stands for (None: the default team)."""
    if model == DEFAULT_TEAM:
        return None
    prefix, _, name = model.partition("/")
    if prefix == DEFAULT_TEAM and name.startswith("@") and _NAME.fullmatch(name[1:]):
        from massgen_mcp.team.presets import presets_dir

        if (presets_dir() / f"{name[1:]}.yaml").is_file():
            return name
    if prefix == DEFAULT_TEAM and _NAME.fullmatch(name):
        path = user_config_dir() / f"{name}.yaml"
        if path.is_file():
            return str(path)
    raise UnknownTeamError(
        f"model {model!r}: no such team; use one of {', '.join(team_names())} (a config "
        "<name>.yaml in the user config folder of massgen-mcp is massgen/<name>)")


def split_messages(messages: list[dict[str, Any]]) -> tuple[str, str | None]:
    """(question, context) from chat messages: the last user message is the question; the
    messages before it are the context, as a transcript."""
    def text(message: dict[str, Any], where: str) -> str:
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(
                isinstance(p, dict) and p.get("type") == "text" for p in content):
            return "\n".join(str(p.get("text", "")) for p in content)
        raise ConfigError(f"{where}.content: only text is supported (a string, or a list of "
                          "{'type': 'text', 'text': ...} parts)")

    if not messages:
        raise ConfigError("messages: give at least one user message")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ConfigError(f"messages[{i}]: expected an object with role and content")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise ConfigError("messages: the last message must be the user's question "
                          "(role 'user')")
    question = text(last, f"messages[{len(messages) - 1}]")
    earlier = [f"{m.get('role', 'user')}: {text(m, f'messages[{i}]')}"
               for i, m in enumerate(messages[:-1])]
    return question, ("\n\n".join(earlier) or None)


def run_summary(result: ResultRecord) -> dict[str, Any]:
    """What a caller of the team-as-a-model needs to open the record: the ``massgen`` field
    of the OpenAI endpoint's replies and the LiteLLM provider's ``_hidden_params``."""
    return {"session_id": result.session_id, "status": result.status.value,
            "finish_reason": result.finish_reason,
            "winner": result.winner.model_dump(mode="json") if result.winner else None,
            "tally": result.tally, "cost_usd": result.usage.cost_usd,
            "agreement": (result.agreement.model_dump(mode="json")
                          if result.agreement is not None else None)}


def usage_counts(result: ResultRecord) -> dict[str, int]:
    """The whole team's tokens, in OpenAI's ``usage`` shape."""
    return {"prompt_tokens": result.usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens,
            "total_tokens": result.usage.total_tokens}


def no_answer(result: ResultRecord, subject: str = "the run") -> str:
    """Why a run gave no final answer, said the same way by every face."""
    return (f"{subject} ended {result.status.value} ({result.finish_reason}) with no answer: "
            f"{'; '.join(result.errors) or 'no details'}")
