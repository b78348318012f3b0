"""The team as one model: a Python API, and the naming and message rules shared by the
OpenAI-compatible endpoint (:mod:`massgen_mcp.server.openai_api`) and the LiteLLM provider
(:mod:`massgen_mcp.api.litellm_team`).

from massgen_mcp import run
    result = run("Is 2**61 - 1 prime?", models=["openai/gpt-4.1-mini", "gemini/gemini-2.5-flash"])
    print(result.final_answer, result.winner, result.usage.cost_usd)

Everything goes through :class:`~massgen_mcp.service.ConsensusService`, the same door as the
CLI and the MCP tools, so every run leaves its record under ``.massgen/``.

A *team model name* says which team answers: ``massgen`` (the default team, as with no
models), ``massgen/@preset`` (a preset from ``configs/``) or ``massgen/<name>`` (the file
``<name>.yaml`` in the user config folder, e.g. ``~/.config/massgen-mcp/research.yaml``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from massgen_mcp.core.env import user_config_dir
from massgen_mcp.core.errors import ConfigError, UnknownTeamError
from massgen_mcp.core.records import ResultRecord, StatusRecord
from massgen_mcp.core.spec import RunOptions, RunSpec, format_validation_error
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace

DEFAULT_TEAM = "massgen"
_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")




def team_names() -> list[str]:
    """Every team model name that works here: the default, the presets, the user's configs."""
    from massgen_mcp.team.massgen_yaml import presets_dir

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
        from massgen_mcp.team.massgen_yaml import presets_dir

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
            "tally": result.tally, "cost_usd": result.usage.cost_usd}


def usage_counts(result: ResultRecord) -> dict[str, int]:
    """The whole team's tokens, in OpenAI's ``usage`` shape."""
    return {"prompt_tokens": result.usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens,
            "total_tokens": result.usage.total_tokens}


async def follow(service: ConsensusService, session_id: str,
                 on_status: Callable[[StatusRecord], Awaitable[None]] | None = None
                 ) -> ResultRecord:
    """Wait for a run's end and return its result; cancelling the wait cancels the run."""
    try:
        await service.wait(session_id, None, until_done=True, on_change=on_status)
    except asyncio.CancelledError:
        await service.cancel(session_id)
        raise
    return await service.result(session_id)


async def arun(question: str, *, models: list[str] | None = None, config: str | None = None,
               context: str | None = None, options: RunOptions | dict[str, Any] | None = None,
               base_url: str | None = None, home: str | Path | None = None) -> ResultRecord:
    """Run one consensus and return its result (a typed record: ``final_answer``,
    ``winner``, ``tally``, ``votes``, ``answers``, ``usage``, ``session_id``, ...).

    The team is ``models`` (litellm model strings), or ``config`` (a MassGen YAML file or
    ``@preset``), or neither (the default team). ``home`` is the record folder (default
    ``$MASSGEN_HOME`` or ``./.massgen``). Bad input raises :class:`ConfigError` naming the
    field; a run that fails still returns its record (``status`` says how it ended)."""
    try:
        if isinstance(options, dict):
            options = RunOptions.model_validate(options)
        spec = RunSpec(question=question, models=models, config=config, context=context,
                       options=options, base_url=base_url)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    # The caller's own paths, as on the command line: not confined to the working folder.
    service = ConsensusService.local(Path(home) if home else None,
                                     Workspace(Path.cwd(), confined=False))
    try:
        return await follow(service, (await service.start(spec)).session_id)
    finally:
        await service.aclose()


def run(question: str, **kwargs: Any) -> ResultRecord:
    """:func:`arun` for code that is not async (it starts and closes its own event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun(question, **kwargs))
    raise RuntimeError("massgen_mcp.run() was called inside a running event loop; "
                       "use 'await massgen_mcp.arun(...)' there")
