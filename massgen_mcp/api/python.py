"""The team as one model in Python: ``run`` and ``arun``, ``review`` and ``areview`` (the team
reviews a code change), and ``follow (wait for a run's
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
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import COUNTED_TIERS, Severity, Tier, named
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
from massgen_mcp.core.spec import RunSpec, format_validation_error
from massgen_mcp.review.start import ChangeToReview, finish_review, start_review
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
    return _in_new_loop(arun(question, **kwargs), "massgen_mcp.run()",
                        "massgen_mcp.arun(...)")


async def areview(*, staged: bool = False, base: str | None = None, commit: str | None = None,
                  patch: str | None = None, paths: list[str] | None = None,
                  focus: str | None = None, fail_on: Severity | str | None = None,
                  fail_on_tier: Tier | str = Tier.AGREED,
                  models: list[str] | None = None, config: str | None = None,
                  options: RunOptions | dict[str, Any] | None = None,
                  base_url: str | None = None, repo: str | Path | None = None,
                  home: str | Path | None = None) -> ResultRecord:
    """The team reviews a change in the git repository at ``repo`` (default: the one the
    working folder is in) and returns the run's result, whose ``review`` holds the findings
    in their tiers, the verdict, the agreement and the dissent (a run that failed or timed
    out before any vote: ``inconclusive``, with why; ``status`` says how it ended).

    What to review, at most one: nothing (the working tree's changes against HEAD),
    ``staged``, ``base`` (the branch's commits since its merge base with that ref),
    ``commit``, ``patch`` (a unified diff as text, e.g. ``gh pr diff``'s) or ``paths``
    (files or folders as they are, relative to ``repo``). ``fail_on``: the least severity
    of a counted finding that makes the verdict ``changes_requested`` (default: the
    repository's ``review.fail_on``, else ``major``); ``fail_on_tier``: the least tier
    counted (``agreed``, or ``unconfirmed`` to count those too). The team,
    ``options`` and ``home`` are :func:`arun`'s. Bad input raises :class:`ConfigError`
    naming the field."""
    try:
        if isinstance(options, dict):
            options = RunOptions.model_validate(options)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "options.")) from None
    # None: the repository's review.fail_on, else major
    threshold = named(Severity, fail_on, "fail_on") if fail_on is not None else None
    tier = named(Tier, fail_on_tier, "fail_on_tier", COUNTED_TIERS)
    folder = Path(repo).expanduser().absolute() if repo is not None else Path.cwd()
    # The caller's own repository, as on the command line: not confined; the workspace
    # tools are rooted at its top. A config file is the one the caller names from here.
    config = (str(Path(config).expanduser().absolute())
              if config and not config.startswith("@") else config)
    service = ConsensusService.local(Path(home) if home else None,
                                     Workspace(folder, confined=False), drafts=False)
    try:
        change = ChangeToReview(staged=staged, base=base, commit=commit, patch=patch,
                                paths=paths or ())
        begun = await start_review(service, service.workspace, change, focus=focus,
                                   models=models, config=config, base_url=base_url,
                                   options=options, threshold=threshold, tier=tier)
        if begun.parts:  # a review in parts: every part's run, merged
            return await finish_review(service, begun)
        return await follow(service, begun.run.session_id)
    finally:
        await service.aclose()


def review(**kwargs: Any) -> ResultRecord:
    """:func:`areview` for code that is not async (it starts and closes its own event
    loop)."""
    return _in_new_loop(areview(**kwargs), "massgen_mcp.api.review()",
                        "massgen_mcp.api.areview(...)")


def _in_new_loop(work: Coroutine[Any, Any, ResultRecord], called: str, instead: str
                 ) -> ResultRecord:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    work.close()  # never awaited: no "was never awaited" warning
    raise RuntimeError(f"{called} was called inside a running event loop; use "
                       f"'await {instead}' there")
