"""Why a team cannot start, asked before its run writes anything: one place per kind of
model, so a new kind adds its check here and nowhere else.

Each function returns :class:`~massgen_mcp.core.errors.Refusal` paragraphs in the order the
checks have always run. An executor's preflight puts them together: a run in this process asks
everything (:meth:`massgen_mcp.providers.registry.ProviderRouter.problems`), a pool's front end
only what holds on any machine (:func:`anywhere`), since its workers have their own CLIs,
model cache and network.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from massgen_mcp.core.agent import PROVIDER_KEY_ENV
from massgen_mcp.core.errors import Refusal
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.cli import catalog
from massgen_mcp.providers.model_names import model_problem

BUNDLED_MODEL = "local/smollm2"


def anywhere(team: TeamConfig) -> list[Refusal]:
    """What no machine would run: model strings no provider serves, keys that are not set.
    No network, no process."""
    return [*model_strings(team), *keys(team)]


def model_strings(team: TeamConfig) -> list[Refusal]:
    """Model strings litellm could not route (``opnai/gpt-4o-mini``), named by field, with the
    string probably meant (:mod:`.model_names`). A team from ``models`` or a config file was
    told so as it loaded, in that input's own names (:mod:`massgen_mcp.team`)."""
    typos = [f"agents[{i}].model: {why}" for i, agent in enumerate(team.agents)
             if (why := model_problem(agent.model))]
    return [Refusal("\n".join(typos))] if typos else []


def keys(team: TeamConfig) -> list[Refusal]:
    """Agents whose provider needs a key that is not set."""
    missing = missing_credentials(team)
    return [Refusal("missing API keys:\n" + "\n".join(missing))] if missing else []


async def cli_versions(team: TeamConfig) -> list[Refusal]:
    """Coding-agent CLIs installed in a version that cannot run read-only (each asked for
    its version once; :mod:`massgen_mcp.providers.cli.versions`)."""
    refused = await catalog.refusals(team)
    return [Refusal("coding-agent CLIs that cannot run read-only:\n" + "\n".join(refused))
            ] if refused else []


def clis_here(team: TeamConfig) -> list[Refusal]:
    """A team of coding-agent CLIs none of which this machine has installed and logged in
    (@cli_team on a machine without them)."""
    missing = catalog.unusable(team)
    return [Refusal("no agent of this team can run here; every one is a coding-agent CLI "
                    "that is missing or not logged in:\n" + "\n".join(missing)
                    + "\n(massgen-mcp doctor shows the CLIs found)")] if missing else []


def servers(unreachable: Sequence[str]) -> list[Refusal]:
    """Servers that take no connection (:mod:`massgen_mcp.providers.endpoints`)."""
    return [Refusal("\n".join(unreachable), unreachable=True)] if unreachable else []


def offline_models(team: TeamConfig) -> list[Refusal]:
    """Offline models (``local/NAME``) that do not exist, or were never pulled (a run never
    downloads one but the bundled model)."""
    if not any(a.model.startswith("local/") for a in team.agents):
        return []
    from massgen_mcp.providers import local_model  # only for a team on this machine

    problems = local_model.team_problems(a.model for a in team.agents)
    return [Refusal("\n".join(problems))] if problems else []


async def here(team: TeamConfig, unreachable: Sequence[str] = ()) -> list[Refusal]:
    """Everything, for a run in this process, in the checks' order: model strings, keys,
    CLIs, the servers found ``unreachable``, offline models."""
    return [*anywhere(team), *clis_here(team), *await cli_versions(team),
            *servers(unreachable), *offline_models(team)]


async def fetch_bundled(team: TeamConfig, progress: Callable[[int, int], None]) -> None:
    """The bundled offline model's first fetch, with ``progress``, when the team has it and
    it is not here yet: before the record exists, so a failed fetch refuses the run."""
    if all(a.model != BUNDLED_MODEL for a in team.agents):
        return
    from massgen_mcp.providers import local_model

    if local_model.bundled_missing():
        await asyncio.to_thread(local_model.fetch_bundled, progress)


def missing_credentials(team: TeamConfig) -> list[str]:
    """One message per agent whose provider needs a key that is not set."""
    problems = []
    for agent in team.agents:
        if agent.base_url or agent.resolved_api_key():
            continue
        if agent.api_key_env:
            problems.append(
                f"agent {agent.id!r} ({agent.model}): environment variable "
                f"{agent.api_key_env} (api_key_env) is not set"
            )
            continue
        names = PROVIDER_KEY_ENV.get(agent.provider)
        if names:
            problems.append(
                f"agent {agent.id!r} ({agent.model}): set {' or '.join(names)}, or use a "
                "self-hosted endpoint (model@http://127.0.0.1:11434/v1, or base_url in a config)"
            )
    return problems
