"""The team as one model in Python: ``run`` and ``arun``, and ``follow`` (wait for a run's
result) shared with the OpenAI-compatible endpoint and the evaluator.

from massgen_mcp import run
    result = run("Is 2**61 - 1 prime?", models=["openai/gpt-4.1-mini", "gemini/gemini-2.5-flash"])
    print(result.final_answer, result.winner, result.usage.cost_usd)

Everything goes through :class:`~massgen_mcp.service.ConsensusService`, the same door as the
CLI and the MCP tools, so every run leaves its record under ``.massgen/``. Team model names
(``massgen``, ``massgen/@preset``, ...) are :mod:`massgen_mcp.api.team_names`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.records import ResultRecord, StatusRecord
from massgen_mcp.core.spec import RunOptions, RunSpec, format_validation_error
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace


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
               base_url: str | None = None, home: str | Path | None = None,
               roles: list[str] | None = None) -> ResultRecord:
    """Run one consensus and return its result (a typed record: ``final_answer``,
    ``winner``, ``tally``, ``votes``, ``answers``, ``usage``, ``session_id``, ...).

    The team is ``models`` (litellm model strings), or ``config`` (a MassGen YAML file or
    ``@preset``), or neither (the default team). ``home`` is the record folder (default
    ``$MASSGEN_HOME`` or ``./.massgen``). ``roles``: one per agent in the team's order
    (``options.roles``; docs/options.md). Bad input raises :class:`ConfigError` naming the
    field; a run that fails still returns its record (``status`` says how it ended)."""
    try:
        if roles is not None:
            given = (options.model_dump(exclude_unset=True) if isinstance(options, RunOptions)
                     else dict(options or {}))
            if "roles" in given:
                raise ConfigError("roles: given twice (roles= and options['roles']); give "
                                  "one")
            options = {**given, "roles": roles}
        if isinstance(options, dict):
            options = RunOptions.model_validate(options)
        spec = RunSpec(question=question, models=models, config=config, context=context,
                       options=options, base_url=base_url)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    # The caller's own paths, as on the command line: not confined to the working folder.
    service = ConsensusService.local(Path(home) if home else None,
                                     Workspace(Path.cwd(), confined=False), drafts=False)
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
