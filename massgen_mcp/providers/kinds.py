"""Every kind of model string this server runs, one row each: the one place a new provider,
or a new kind of model string, is added (``docs/architecture.md``, "where do I add X").

A row (:class:`Kind`) says what a model string's prefix means here:

* ``route``: which of :class:`~massgen_mcp.providers.registry.ProviderRouter`'s providers
  serves it (:func:`~massgen_mcp.providers.registry.served_by`);
* ``keys``: the environment variables its key is read from, first set wins (litellm's own
  names), and ``hosts``: its API's hosts (consent asks before a key goes anywhere else);
* ``problem``: what the rest of the string must be, said as ``models`` or a config file
  loads and in every run's preflight (:func:`~massgen_mcp.providers.model_names.model_problem`);
* ``checks``: why a team with it cannot start, asked before its run writes anything
  (:mod:`~massgen_mcp.providers.preflight` asks every row's, in the rows' order, for a run
  and for ``massgen-mcp validate``).

Which provider serves a model string, a bare name included (:func:`provider_of`, with the
Gemini-versus-Vertex policy), is answered here too. The ground floor
(:mod:`massgen_mcp.core.agent`) knows none of this: an :class:`~massgen_mcp.core.agent.AgentSpec`
checks only the shape of a model string, and its own key; which names, providers and keys
exist is this table's, one floor up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.env import getenv
from massgen_mcp.core.errors import Refusal
from massgen_mcp.core.secrets import register_secret
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.cli import catalog
from massgen_mcp.providers.model_map import bare_models

# The router's providers: a coding-agent CLI, the embedded model, litellm (or a direct call to
# an OpenAI-format server: massgen_mcp.providers.openai_direct).
Route = Literal["cli", "local", "remote"]


@dataclass(frozen=True)
class Check:
    """One check before a run: ``ask(team, unreachable)`` gives its refusals (``unreachable``:
    the servers the router found taking no connection). ``anywhere``: it holds on any machine,
    so a pool's front end asks it too (the rest are for the machine that runs the team).

    ``massgen-mcp validate`` asks every check too (:func:`~massgen_mcp.providers.preflight.
    of_file`): ``per_agent`` gives what it says of a config file's team instead of ``ask``'s
    refusals, one line per agent; ``fixable``: whether the environment fixes what it finds
    (a warning), else the file is wrong (an error)."""

    ask: Callable[[TeamConfig, Sequence[str]], Awaitable[list[Refusal]]]
    anywhere: bool = False
    per_agent: Callable[[TeamConfig], Awaitable[list[str]]] | None = None
    fixable: bool = True


@dataclass(frozen=True)
class Kind:
    """One kind of model string: ``<prefix>/...``, or a bare name litellm routes to
    ``prefix`` (``gpt-4o``: openai). See the module's docstring for the fields."""

    prefix: str
    route: Route = "remote"
    keys: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    problem: Callable[[str, str | None], str | None] | None = None
    checks: tuple[Check, ...] = ()


# -- the cli/ kind: a coding-agent CLI (massgen_mcp.providers.cli) --------------------------------

def cli_problem(model: str, written: str | None = None) -> str | None:
    """Why ``model`` (``cli/...``) names no coding-agent CLI this server runs, or None.
    ``written``: the config's text to quote instead of a value from the environment."""
    parts = model.split("/")
    if len(parts) in (2, 3) and parts[1] in catalog.CLIS:
        return None  # the rest of the shape (no empty part, no '-' first) is AgentSpec's
    return (f"model {written or model!r}: a coding-agent CLI is cli/<name> or "
            f"cli/<name>/<model>, with <name> one of {', '.join(catalog.CLIS)}")


async def _clis_here(team: TeamConfig, unreachable: Sequence[str]) -> list[Refusal]:
    """A team of coding-agent CLIs none of which this machine has installed and logged in
    (@cli_team on a machine without them)."""
    missing = catalog.unusable(team)
    return [Refusal("no agent of this team can run here; every one is a coding-agent CLI "
                    "that is missing or not logged in:\n" + "\n".join(missing)
                    + "\n(massgen-mcp doctor shows the CLIs found)")] if missing else []


async def _cli_versions(team: TeamConfig, unreachable: Sequence[str]) -> list[Refusal]:
    """Coding-agent CLIs installed in a version that cannot run read-only (each asked for
    its version once; :mod:`massgen_mcp.providers.cli.versions`)."""
    refused = await catalog.refusals(team)
    return [Refusal("coding-agent CLIs that cannot run read-only:\n" + "\n".join(refused))
            ] if refused else []


async def _clis_not_ready(team: TeamConfig) -> list[str]:
    return await asyncio.to_thread(catalog.not_ready, team)  # may start each CLI once


async def _clis_refused(team: TeamConfig) -> list[str]:
    return [f"agent {agent.id!r} ({agent.model}): refused: {why}"
            for agent, why in await catalog.refused(team)]


# -- litellm's providers, and servers a model names ------------------------------------------------

async def _servers(team: TeamConfig, unreachable: Sequence[str]) -> list[Refusal]:
    """Servers that take no connection (:mod:`massgen_mcp.providers.endpoints`)."""
    return [Refusal("\n".join(unreachable), unreachable=True)] if unreachable else []


# -- the local/ kind: the embedded model (massgen_mcp.providers.llamacpp_provider) ----------------

async def _offline_models(team: TeamConfig, unreachable: Sequence[str]) -> list[Refusal]:
    """Offline models (``local/NAME``) that do not exist, or were never pulled (a run never
    downloads one but the bundled model)."""
    if not any(a.model.startswith("local/") for a in team.agents):
        return []
    from massgen_mcp.providers import local_model  # only for a team on this machine

    problems = local_model.team_problems(a.model for a in team.agents)
    return [Refusal("\n".join(problems))] if problems else []


async def _unknown_offline_models(team: TeamConfig) -> list[str]:
    """Offline models that do not exist (one not pulled yet is the run's to say: a config
    file is looked at, not this machine's cache)."""
    from massgen_mcp.providers import local_model

    return local_model.team_problems((a.model for a in team.agents), pulled=False)


# The rows, in the order their checks run (the order they always ran in: an error takes the
# class of its first refusal, massgen_mcp.core.errors.refusal_error). LITELLM is every other
# string: litellm's providers without a row of their own, and bare names it cannot place.
CLI = Kind("cli", route="cli", problem=cli_problem,
           checks=(Check(_clis_here, per_agent=_clis_not_ready),
                   Check(_cli_versions, anywhere=True, per_agent=_clis_refused)))
LITELLM = Kind("", checks=(Check(_servers),))
LOCAL = Kind("local", route="local",
             checks=(Check(_offline_models, per_agent=_unknown_offline_models, fixable=False),))
KINDS: tuple[Kind, ...] = (
    CLI, LITELLM, LOCAL,
    Kind("openai", keys=("OPENAI_API_KEY",), hosts=("api.openai.com",)),
    Kind("anthropic", keys=("ANTHROPIC_API_KEY",), hosts=("api.anthropic.com",)),
    Kind("gemini", keys=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
         hosts=("generativelanguage.googleapis.com",)),
    Kind("xai", keys=("XAI_API_KEY",), hosts=("api.x.ai",)),
    Kind("openrouter", keys=("OPENROUTER_API_KEY",), hosts=("openrouter.ai",)),
    Kind("groq", keys=("GROQ_API_KEY",), hosts=("api.groq.com",)),
    Kind("deepseek", keys=("DEEPSEEK_API_KEY",), hosts=("api.deepseek.com",)),
    Kind("mistral", keys=("MISTRAL_API_KEY",), hosts=("api.mistral.ai",)),
    Kind("together_ai", keys=("TOGETHERAI_API_KEY", "TOGETHER_API_KEY"),
         hosts=("api.together.xyz",)),
    Kind("fireworks_ai", keys=("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
         hosts=("api.fireworks.ai",)),
    Kind("cerebras", keys=("CEREBRAS_API_KEY",), hosts=("api.cerebras.ai",)),
    Kind("zai", keys=("ZAI_API_KEY",), hosts=("api.z.ai",)),
    Kind("moonshot", keys=("MOONSHOT_API_KEY",), hosts=("api.moonshot.ai", "api.moonshot.cn")),
    Kind("nebius", keys=("NEBIUS_API_KEY",),
         hosts=("api.studio.nebius.ai", "api.studio.nebius.com")),
    Kind("azure", keys=("AZURE_API_KEY",)),
)
_BY_PREFIX = {kind.prefix: kind for kind in KINDS if kind.prefix}
# Prefixes that are ours, not litellm's (massgen_mcp.providers.model_names).
OWN_PREFIXES = frozenset(kind.prefix for kind in KINDS if kind.route != "remote")
# provider -> the variables its key is read from, for those that read one (a view of KINDS).
PROVIDER_KEY_ENV: dict[str, tuple[str, ...]] = {
    kind.prefix: kind.keys for kind in KINDS if kind.keys}


# -- which provider serves a model string ------------------------------------------------------
#
# The one answer every check and every call uses: the key check before a run
# (preflight.missing_credentials), the consent of who receives the data, the per-provider
# bound and the call itself all ask provider_of, so a bare name is checked exactly as its
# prefixed spelling is, and goes where it was checked.
#
# One deliberate difference from litellm: a bare ``gemini-*`` goes to Gemini's API (a
# ``GEMINI_API_KEY``), as its prefixed spelling ``gemini/...`` does, not to Vertex AI, which
# litellm picks from its map and which needs a Google Cloud project and the ``google``
# package; unless Vertex is configured (a project or its credentials in the environment).

# What says Vertex AI is set up (litellm's own variable names): then bare gemini-* names go
# there, as litellm sends them.
VERTEX_ENV = ("VERTEXAI_PROJECT", "VERTEX_PROJECT", "VERTEXAI_CREDENTIALS")


def bare_provider(model: str) -> str | None:
    """The provider a bare model name goes to (``gpt-4o``: ``openai``), or None when the name
    is not in litellm's map (the run's preflight then refuses it, with a guess)."""
    routes = bare_models()
    route = routes.get(model) if routes else None
    if route is None and model.startswith("ft:"):  # fine-tuned OpenAI models (ft:gpt-4o:org::id)
        route = "openai"
    if route == "vertex_ai" and model.startswith("gemini") and not vertex_configured():
        return "gemini"
    return route


def vertex_configured() -> bool:
    """Whether the environment sets up Vertex AI (see :data:`VERTEX_ENV`)."""
    return any(getenv(name) for name in VERTEX_ENV)


def provider_of(agent: AgentSpec) -> str:
    """The provider that serves ``agent``'s model: its prefix ('openai' for 'openai/gpt-4o'),
    or for a bare name the one litellm routes it to ('openai' for 'gpt-4o';
    :func:`bare_provider`); '' when none is known."""
    if "/" in agent.model:
        return agent.model.split("/", 1)[0]
    return bare_provider(agent.model) or ""


def routed_model(agent: AgentSpec) -> str:
    """The model string a call sends to litellm: a bare name with its provider in front
    (``gemini/gemini-2.5-flash``), so the call goes where the checks before the run looked
    (litellm alone would send a bare gemini-* to Vertex AI)."""
    provider = provider_of(agent)
    if "/" in agent.model or not provider:
        return agent.model
    return f"{provider}/{agent.model}"


def kind_of(agent: AgentSpec) -> Kind:
    """The row that serves ``agent``: its provider's (:func:`provider_of`: the prefix, or
    the provider litellm routes a bare name to), else :data:`LITELLM`."""
    return _BY_PREFIX.get(provider_of(agent), LITELLM)


def kind_problem(model: str, written: str | None = None) -> str | None:
    """Why the row of ``model``'s prefix serves no such string (``cli/cursor``), or None
    (also for a prefix without a row). ``written``: the text to quote instead of a value
    that came from the environment (a config's ``${VAR}``)."""
    kind = _BY_PREFIX.get(model.partition("/")[0])
    return kind.problem(model, written) if kind and kind.problem else None


def own_provider(agent: AgentSpec) -> str:
    """The provider whose API the agent's key goes to: a CLI agent's, its CLI's vendor
    (Claude Code: anthropic); '' for a CLI this server does not run."""
    if agent.cli:
        cli = catalog.CLIS.get(agent.cli)
        return cli.provider if cli else ""
    return provider_of(agent)


def api_hosts(provider: str) -> tuple[str, ...]:
    """The hosts of ``provider``'s own API (litellm's defaults), first the one it calls;
    () when its row names none."""
    kind = _BY_PREFIX.get(provider)
    return kind.hosts if kind else ()


def provider_key(provider: str) -> str | None:
    """The first of the provider's own key variables that is set, else None."""
    kind = _BY_PREFIX.get(provider)
    for name in kind.keys if kind else ():
        value = getenv(name)
        if value:
            return value
    return None


def api_key(agent: AgentSpec) -> str | None:
    """The key ``agent`` sends: its own (:meth:`AgentSpec.own_api_key`: ``api_key``, else
    ``api_key_env``), else, only for the provider's own API (no ``base_url``), the first of
    its row's ``keys`` that is set.

    The value is registered for redaction here, where the provider's variable is read, so it
    is masked on every way out whatever the variable was called."""
    if agent.api_key is not None or agent.api_key_env:
        return agent.own_api_key()
    key = None if agent.base_url else provider_key(provider_of(agent))
    register_secret(key)
    return key
