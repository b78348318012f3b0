"""Choose the team for a run, in one place.

:func:`choose_team` is the only entry point. A :class:`~massgen_mcp.core.spec.RunSpec` names its
team in one of three ways, and whichever it is, the spec's ``options`` and ``base_url`` are then
applied by the same merge (:func:`with_overrides`, which also serves ``continue_session``):

1. ``models``: one agent per model string (``agent_a``, ``agent_b``, ...);
   ``provider/model@http://host:port/v1`` gives one agent its own OpenAI-compatible endpoint;
2. ``config``: a MassGen YAML file (read through the run's workspace) or an ``@preset``;
3. neither: the default team that :mod:`massgen_mcp.team.discover` discovers, with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from massgen_mcp.core.env import user_config_dir
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import MAX_AGENTS
from massgen_mcp.core.records import ConfigFile
from massgen_mcp.core.spec import RunSpec, TeamConfig, build_team
from massgen_mcp.providers.model_names import model_problem
from massgen_mcp.team import consent
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.team.massgen_yaml import read_config_file
from massgen_mcp.team.presets import preset_hint, resolve_config_path


@dataclass(frozen=True)
class TeamChoice:
    team: TeamConfig
    notes: list[str] = field(default_factory=list)  # config warnings, or why this default team
    # The config file of a team with inline api_keys, to read them again (RequestRecord).
    config_file: ConfigFile | None = None


def config_file_of(path: Path, text: str) -> ConfigFile:
    """``path`` as read now, with the SHA-256 of its text: what a record keeps instead of
    the inline keys the file holds."""
    return ConfigFile(path=str(path.resolve()),
                      sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


async def reread_config(recorded: ConfigFile, *, check_trust: bool) -> TeamConfig | None:
    """The team of a recorded config file while its text is the one recorded, else None
    (changed, gone, or no longer valid). ``check_trust`` as for the run that read it."""
    try:
        loaded = await asyncio.to_thread(read_config_file, Path(recorded.path),
                                         check_trust=check_trust)
    except ConfigError:
        return None
    if config_file_of(loaded.path, loaded.text).sha256 != recorded.sha256:
        return None
    return loaded.team


async def choose_team(spec: RunSpec, workspace: Workspace) -> TeamChoice:
    """The team for ``spec``, with its option overrides applied; ConfigError if none."""
    if spec.models and spec.config:
        raise ConfigError("give either models or config, not both")
    notes: list[str] = []
    source: ConfigFile | None = None
    if spec.models:
        team = _team_from_models(spec.models)
    elif spec.config:
        # A file a model names may have come with the project, so it needs the user's
        # consent to send their keys abroad (massgen_mcp.team.consent); the user's own CLI flag and
        # our presets do not.
        path, own = _config_path(spec.config, workspace)
        loaded = await asyncio.to_thread(
            read_config_file, path, check_trust=workspace.confined and not own)
        team, notes = loaded.team, loaded.warnings
        if any(agent.api_key is not None for agent in team.agents):
            source = config_file_of(path, loaded.text)
    else:
        from massgen_mcp.team.discover import discover

        found = await discover()
        if found.team is None:
            raise ConfigError(f"no team given and none found: {found.reason}")
        team, notes = found.team, [f"default team ({found.source}): {found.reason}"]
    final = with_overrides(team, spec.overrides(), spec.base_url,
                           source=spec.config or "models")
    if workspace.confined:  # the caller is a model (MCP, /v1): it decides less than a file
        consent.check_call(team, final, spec.overrides(), spec.base_url,
                           {"context_files": spec.context_files})
    return TeamChoice(final, notes, source)


def _config_path(ref: str, workspace: Workspace) -> tuple[Path, bool]:
    """The config file ``ref`` names, and whether it is the user's own or ours (a preset, or
    a file in the user config folder, accepted by path even outside the workspace)."""
    if ref.startswith("@"):
        return resolve_config_path(ref), True
    user_dir = user_config_dir().resolve()
    given = Path(ref).expanduser()
    if given.is_absolute() and given.resolve().is_relative_to(user_dir):
        if not given.is_file():
            raise ConfigError(f"config: {ref!r} does not exist or is not a file")
        return given.resolve(), True
    try:
        found = workspace.path(ref, "config")  # exists, inside the workspace
    except ConfigError as exc:  # "fast_cheap" for "@fast_cheap"
        raise ConfigError(f"{exc}{preset_hint(ref)}") from None
    if workspace.may_hold_secrets(ref, found):  # a config's errors quote what it holds
        raise ConfigError(f"config: {ref!r} may hold secrets; a model's call cannot use it as "
                          "a config (the secret-file deny-list of the workspace tools: a "
                          "config's errors quote its lines); run it yourself with massgen-mcp "
                          "run --config FILE")
    # Consent is recorded for the file where it is reached (massgen_mcp.team.consent.place).
    return Path(os.path.abspath(workspace.root / ref)), False


def _team_from_models(models: list[str]) -> TeamConfig:
    models = [m.strip() for m in models if m.strip()]
    if not models:
        raise ConfigError("models: give at least one model, e.g. openai/gpt-4o-mini")
    if len(models) > MAX_AGENTS:
        raise ConfigError(f"models: at most {MAX_AGENTS} agents per run, got {len(models)}")
    agents = []
    for i, spec in enumerate(models):
        model, _, own_url = spec.partition("@")
        agents.append({"id": f"agent_{chr(ord('a') + i)}", "model": model,
                       "base_url": own_url or None})
    team = build_team({"agents": agents}, source="models", rename=lambda path: re.sub(
        r"^agents\[(\d+)\]\.(model|base_url)$", r"models[\1]", path))
    # A provider litellm does not know, said now and named as the call names it (the run's
    # preflight would name it agents[0].model).
    typos = [f"models[{i}]: {why}" for i, agent in enumerate(team.agents)
             if (why := model_problem(agent.model))]
    if typos:
        raise ConfigError("models is invalid:\n" + "\n".join(typos))
    return team


def with_overrides(team: TeamConfig, options: dict[str, Any], base_url: str | None = None, *,
                   source: str) -> TeamConfig:
    """``team`` with ``options`` over its own options and ``base_url`` for every agent that
    has no endpoint of its own; validated again, so a bad override names its field."""
    if not options and not base_url:
        return team
    merged = team.model_dump(mode="python")
    merged["options"] = {**merged["options"], **options}
    for agent, original in zip(merged["agents"], team.agents, strict=True):
        agent["base_url"] = agent["base_url"] or base_url
        # model_dump keeps SecretStr objects; pass the plain value so it validates again.
        agent["api_key"] = original.api_key.get_secret_value() if original.api_key else None
    return build_team(merged, source=source)
