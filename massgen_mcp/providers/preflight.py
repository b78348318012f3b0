"""Why a team cannot start, asked before its run writes anything: what every model string
needs (a provider that serves it, a key), then each kind's own checks (a row's ``checks`` in
:mod:`massgen_mcp.providers.kinds`, so a new kind adds its check there and nowhere else).

Each function returns :class:`~massgen_mcp.core.errors.Refusal` paragraphs in the order the
checks have always run. An executor's preflight puts them together: a run in this process asks
everything (:meth:`massgen_mcp.providers.registry.ProviderRouter.problems`), a pool's front end
only what holds on any machine (:func:`anywhere`), since its workers have their own CLIs,
model cache and network. ``massgen-mcp validate`` asks the same rows of a config file's team
(:func:`of_file`), as warnings and errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from massgen_mcp.core.errors import Refusal
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.kinds import KINDS, PROVIDER_KEY_ENV, api_key, provider_of
from massgen_mcp.providers.model_names import model_problem

BUNDLED_MODEL = "local/smollm2"


async def anywhere(team: TeamConfig) -> list[Refusal]:
    """What no machine would run: model strings no provider serves, keys that are not set,
    and each kind's checks that hold anywhere (a coding-agent CLI too old to run read-only)."""
    return [*model_strings(team), *keys(team), *await _kinds(team, (), anywhere_only=True)]


async def here(team: TeamConfig, unreachable: Sequence[str] = ()) -> list[Refusal]:
    """Everything, for a run in this process, in the checks' order: model strings, keys,
    then each kind's checks (CLIs, the servers found ``unreachable``, offline models)."""
    return [*model_strings(team), *keys(team),
            *await _kinds(team, unreachable, anywhere_only=False)]


@dataclass(frozen=True)
class Findings:
    """What ``massgen-mcp validate`` says of a config file's team: ``warnings``, what a run
    on this machine would be refused for now (a key to set, a CLI to install, a server to
    start); ``errors``, what no environment fixes (an offline model that does not exist)."""

    warnings: list[str]
    errors: list[str]


async def of_file(team: TeamConfig) -> Findings:
    """Every row's checks, as ``validate`` words them (a check's ``per_agent`` lines, else
    the lines of its refusals), after the keys: a check a new row adds is said here too.
    Every server is probed: the file is the user's own."""
    from massgen_mcp.providers.endpoints import unreachable

    found = Findings(missing_credentials(team), [])
    servers = await unreachable(team.agents)
    for kind in KINDS:
        for check in kind.checks:
            lines = (await check.per_agent(team) if check.per_agent is not None else
                     [line for refusal in await check.ask(team, servers)
                      for line in refusal.text.splitlines()])
            (found.warnings if check.fixable else found.errors).extend(lines)
    return found


async def _kinds(team: TeamConfig, unreachable: Sequence[str], *, anywhere_only: bool
                 ) -> list[Refusal]:
    return [refusal for kind in KINDS for check in kind.checks
            if check.anywhere or not anywhere_only
            for refusal in await check.ask(team, unreachable)]


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
        if agent.base_url or api_key(agent):
            continue
        if agent.api_key_env:
            problems.append(
                f"agent {agent.id!r} ({agent.model}): environment variable "
                f"{agent.api_key_env} (api_key_env) is not set"
            )
            continue
        names = PROVIDER_KEY_ENV.get(provider_of(agent))
        if names:
            problems.append(
                f"agent {agent.id!r} ({agent.model}): set {' or '.join(names)}, or use a "
                "self-hosted endpoint (model@http://127.0.0.1:11434/v1, or base_url in a config)"
            )
    return problems
