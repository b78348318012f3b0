"""The shape of a run: what the caller asks for, who the agents are, which limits apply.

Every front end (CLI flags, an MCP tool call, a script) describes a run as one :class:`RunSpec`;
:mod:`massgen_mcp.team.choose` turns it into a :class:`TeamConfig`. Validation happens here,
once, with messages that name the field and the fix, so the engine can trust what it gets.
One agent is :mod:`massgen_mcp.core.agent`; the run's limits and switches, and the roles,
are :mod:`massgen_mcp.core.options`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from massgen_mcp.core.agent import AgentSpec, McpServerSpec
from massgen_mcp.core.edges import check_text
from massgen_mcp.core.env import VAR_REFERENCE
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import MAX_AGENTS, NO_ROLE, RunOptions
from massgen_mcp.core.outcomes import ReviewTarget
from massgen_mcp.core.secrets import register_secret

MAX_QUESTION_CHARS = 50_000
MAX_CONTEXT_CHARS = 200_000


class RunSpec(BaseModel):
    """One request to start a run, the same from every front end.

    The team is ``models`` (one agent each), or ``config`` (a MassGen YAML file or ``@preset``),
    or neither (the discovered default team). ``options`` override the team's options; only
    the fields set in it count.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    models: list[str] | None = None
    config: str | None = None
    base_url: str | None = None
    context: str | None = None
    context_files: list[str] = []
    options: RunOptions | None = None
    parent_session_id: str | None = None
    # A review run (massgen_mcp.review): set by the review faces from the change they
    # collected, never from a model's arguments.
    review: ReviewTarget | None = None

    def overrides(self) -> dict[str, Any]:
        return self.options.model_dump(exclude_unset=True) if self.options else {}


class TeamConfig(BaseModel):
    """The agents of a run plus its options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: Annotated[list[AgentSpec], Field(min_length=1, max_length=MAX_AGENTS)]
    options: RunOptions = RunOptions()

    @field_validator("agents")
    @classmethod
    def _unique_ids(cls, agents: list[AgentSpec]) -> list[AgentSpec]:
        seen: set[str] = set()
        servers: dict[str, McpServerSpec] = {}
        for agent in agents:
            if agent.id in seen:
                raise ValueError(f"agent id {agent.id!r} is used twice; give each agent its own id")
            seen.add(agent.id)
            for server in agent.mcp_servers:  # one run starts each named server once
                if servers.setdefault(server.name, server) != server:
                    raise ValueError(f"two different MCP servers are named {server.name!r}; "
                                     "give each its own name")
        return agents

    def required(self) -> list[str]:
        """The agents the majority may not decide without (``required: true`` or named in
        the options' ``require``)."""
        return [a.id for a in self.agents if a.required or a.id in self.options.require]
    def role_of(self, agent_id: str) -> str | None:
        """The role ``options.roles`` gives the agent (by its place in the team), or None."""
        for agent, role in zip(self.agents, self.options.roles, strict=False):
            if agent.id == agent_id:
                return None if role == NO_ROLE else role
        return None

    def roles_problem(self) -> str | None:
        """Why the options do not fit the team, or None: more roles than agents, or
        ``require`` naming no agent of it (the rules that need both)."""
        ids = [agent.id for agent in self.agents]
        for name in self.options.require:
            if name not in ids:
                return (f"options.require: {name!r} names no agent of the team (its agents: "
                        f"{', '.join(ids)}); use an agent id, e.g. --require {ids[-1]}")
        roles, agents = len(self.options.roles), len(self.agents)
        if roles <= agents:
            return None
        return (f"options.roles: {roles} roles for a team of {agents} agent"
                f"{'s' if agents > 1 else ''}; give at most one per agent, in the team's "
                "order (agents after the last role have none)")

    def mcp_servers(self) -> list[McpServerSpec]:
        """Every MCP server the run's agents name, once each."""
        return list({s.name: s for a in self.agents for s in a.mcp_servers}.values())

    def redacted(self) -> dict[str, Any]:
        """The config as JSON-ready data with every api_key replaced by '***'."""
        data = self.model_dump(mode="json")
        for agent in data["agents"]:
            if agent.get("api_key"):
                agent["api_key"] = "***"
            for server in agent.get("mcp_servers", []):  # only ${VAR} references are kept
                for part in ("env", "headers"):
                    server[part] = {k: v if VAR_REFERENCE.fullmatch(v) else "***"
                                    for k, v in server[part].items()}
        return data


def check_question(text: str, field: str = "question") -> str:
    """The question stripped, or a ConfigError naming ``field`` if it is empty, too long or
    not UTF-8 text."""
    text = check_text(text, field).strip()
    if not text:
        raise ConfigError(f"{field}: empty; ask something")
    if len(text) > MAX_QUESTION_CHARS:
        raise ConfigError(f"{field}: {len(text)} characters; the limit is "
                          f"{MAX_QUESTION_CHARS} (move material into context or context_files)")
    return text


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """Turn a pydantic error into one line per problem: ``agents[0].temperature: <why>``."""
    return "\n".join(f"{prefix}{path}: {message}" if path else
                     f"{prefix.rstrip('.') or 'input'}: {message}"
                     for path, message in validation_problems(exc))


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """Each problem of a pydantic error as (key path, why): ``("agents[0].temperature",
    "Input should be ...")``; the path is "" for the whole input. A file format that names
    its keys otherwise (MassGen YAML) renames the paths."""
    problems = []
    for err in exc.errors():
        path = ""
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = unknown_key(err["loc"])
        problems.append((path, message))
    return problems


def unknown_key(loc: tuple[int | str, ...]) -> str:
    """Why a key is refused: the nearest key of the same section (``timeout``: did you mean
    ``timeout_s``?) and the page that lists them all."""
    names = [str(part) for part in loc if not isinstance(part, int)]
    section = names[-2] if len(names) > 1 else ""
    models: dict[str, tuple[type[BaseModel], ...]] = {
        "options": (RunOptions,), "agents": (AgentSpec,), "mcp_servers": (McpServerSpec,),
        "": (RunOptions, TeamConfig)}  # RunOptions checked alone, or the whole team
    known = sorted({f for model in models.get(section, ()) for f in model.model_fields})
    near = difflib.get_close_matches(names[-1] if names else "", known, n=1, cutoff=0.6)
    guess = f"did you mean {near[0]!r}? " if near else ""
    page = "docs/options.md" if section in ("options", "") else "docs/config.md"
    return f"unknown key; {guess}remove or rename it (every accepted key: {page})"


def build_team(data: dict[str, Any], *, source: str = "config",
               rename: Callable[[str], str] | None = None) -> TeamConfig:
    """Validate plain data into a TeamConfig, raising ConfigError with named fields;
    ``rename`` gives a field's path as the caller's input names it (``models[0]`` for
    ``agents[0].model``)."""
    try:
        team = TeamConfig.model_validate(data)
    except ValidationError as exc:
        lines = (format_validation_error(exc) if rename is None else "\n".join(
            f"{rename(path)}: {why}" for path, why in validation_problems(exc)))
        raise ConfigError(f"{source} is invalid:\n{lines}") from None
    problem = team.roles_problem()  # the rules that need both the agents and the options
    if problem:
        raise ConfigError(problem)
    for agent in team.agents:
        if agent.api_key is not None:
            register_secret(agent.api_key.get_secret_value())
    return team


