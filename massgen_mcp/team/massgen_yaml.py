"""Read MassGen-format YAML configs into a :class:`~massgen_mcp.core.spec.TeamConfig`.

MassGen files look like ``agents: [{id, backend: {type, model, base_url, api_key, ...},
system_message}]`` plus ``orchestrator:`` and ``timeout_settings:``. We map what we support,
warn (never silently) about MassGen features we do not implement, and reject keys nobody knows,
naming the key and the closest key we do know. This module is the mapping; the key tables it
maps through are :mod:`.massgen_keys`, what each ``${VAR}`` became is tracked by
:mod:`.expansion`, and an agent's ``mcp_servers`` are read by :mod:`.mcp_config`.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from massgen_mcp.core.agent import WRITTEN, AgentSpec
from massgen_mcp.core.env import VAR_REFERENCE, expand_vars
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import MAX_AGENTS, NO_ROLE, RunOptions, check_role
from massgen_mcp.core.spec import TeamConfig, build_team, validation_problems
from massgen_mcp.providers.kinds import kind_problem
from massgen_mcp.providers.model_names import bare_model_guess, model_problem
from massgen_mcp.team import consent
from massgen_mcp.team.expansion import Expanded, Expansion
from massgen_mcp.team.massgen_keys import (
    AGENT_KEYS,
    AGENT_RENAMED,
    AGENT_TOP,
    BACKEND_KEYS,
    BACKEND_TYPES,
    CLI_BACKENDS,
    CLI_IGNORED,
    CLI_SYSTEM_KEYS,
    NOT_TEAM_KEYS,
    OPTION_KEYS,
    ORCHESTRATOR_KEYS,
    TOP_KEYS,
    UNSUPPORTED_BACKENDS,
    check_keys,
)
from massgen_mcp.team.mcp_config import parse_servers
from massgen_mcp.team.safe_yaml import parse_yaml, read_config_text


def _model_string(backend: dict[str, Any], where: str, expansion: Expansion
                  ) -> tuple[str, str | None]:
    model = backend.get("model")
    if backend.get("type") in CLI_BACKENDS:  # the model is optional: the CLI has a default
        name = CLI_BACKENDS[backend["type"]]
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ConfigError(f"{where}.model: expected a model name such as 'sonnet', or "
                              "leave it out for the CLI's default")
        return (f"cli/{name}/{model.strip()}" if model else f"cli/{name}"), backend.get(
            "base_url")
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where}.model: required; e.g. model: gpt-4o-mini")
    backend_type = backend.get("type")
    base_url = backend.get("base_url")
    if backend_type is None:
        if "/" in model:
            return model, base_url
        return _infer_provider(model, where, expansion.written(f"{where}.model", model)
                               ) + "/" + model, base_url
    if backend_type in UNSUPPORTED_BACKENDS:
        raise ConfigError(
            f"{where}.type: backend {backend_type!r} is not supported by massgen-mcp; use an "
            "API backend such as openai, claude or gemini, or a CLI backend (claude_code, "
            "codex, gemini_cli)"
        )
    if backend_type not in BACKEND_TYPES:
        written = expansion.written(f"{where}.type", str(backend_type))
        shown = str(backend_type) if written is None else written
        known = sorted(set(BACKEND_TYPES) | set(CLI_BACKENDS))
        close = difflib.get_close_matches(shown, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known types: {', '.join(known)}"
        raise ConfigError(f"{where}.type: unknown backend type {shown!r}; {hint}")
    prefix, default_url = BACKEND_TYPES[backend_type]
    if backend_type == "chatcompletion" and not base_url:
        raise ConfigError(f"{where}.base_url: required for type chatcompletion")
    if model.startswith(prefix + "/"):
        return model, base_url or default_url
    return f"{prefix}/{model}", base_url or default_url


def _infer_provider(model: str, where: str, written: str | None) -> str:
    """The provider of a bare model name, or a ConfigError; ``written`` is the file's text
    when the name came from the environment (quoted instead, and no guess is made from it)."""
    for prefix, provider in (
        ("gpt-", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"),
        ("claude", "anthropic"), ("gemini", "gemini"), ("grok", "xai"),
    ):
        if model.startswith(prefix):
            return provider
    guess = bare_model_guess(model) if written is None else None
    hint = (f"did you mean {guess!r}? Or " if guess else "") + (
        "set backend.type (e.g. type: openai) or write the model as provider/model")
    raise ConfigError(f"{where}.model: cannot tell the provider of model "
                      f"{model if written is None else written!r}; {hint}")


def _agent(raw: Any, index: int, warnings: list[str], problems: list[str],
           expansion: Expansion) -> dict[str, Any]:
    """One agent's fields; misspelt keys go to ``problems``, the first other problem of the
    agent is raised (what follows from it would only repeat it)."""
    where = f"agents[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with id, backend and system_message")
    check_keys(raw, where, "agent", AGENT_KEYS, warnings, problems)
    required = raw.get("required", False)
    if not isinstance(required, bool):
        raise ConfigError(f"{where}.required: use true or false (true: the majority may not "
                          "decide before this agent's first answer)")
    agent = _agent_fields(raw, where, index, warnings, problems, expansion)
    if required:
        agent["required"] = True
    return agent


def _agent_fields(raw: dict[str, Any], where: str, index: int, warnings: list[str],
                  problems: list[str], expansion: Expansion) -> dict[str, Any]:
    backend = raw.get("backend")
    if not isinstance(backend, dict):
        raise ConfigError(f"{where}.backend: required mapping with at least type and model")
    if backend.get("type") in CLI_BACKENDS:
        return _cli_agent(raw, backend, where, index, warnings, problems, expansion)
    check_keys(backend, f"{where}.backend", "backend", BACKEND_KEYS, warnings, problems)
    model, base_url = _model_string(backend, f"{where}.backend", expansion)
    agent = {
        "id": raw.get("id", f"agent{index + 1}"),
        "model": model,
        "system_message": raw.get("system_message"),
        "base_url": base_url,
    }
    for key in ("api_key", "api_key_env", "temperature", "top_p", "max_tokens", "tool_calling",
                "allowed_tools", "exclude_tools"):
        if key in backend:
            agent[key] = backend[key]
    if "enable_web_search" in backend:
        if not isinstance(backend["enable_web_search"], bool):
            raise ConfigError(f"{where}.backend.enable_web_search: use true or false")
        agent["web_search"] = backend["enable_web_search"]
    if "mcp_servers" in backend:
        agent["mcp_servers"] = [s.model_dump() for s in parse_servers(
            backend["mcp_servers"], f"{where}.backend.mcp_servers", warnings)]
    _api_key_reference(agent, backend, where)
    return agent


def _cli_agent(raw: dict[str, Any], backend: dict[str, Any], where: str, index: int,
               warnings: list[str], problems: list[str], expansion: Expansion
               ) -> dict[str, Any]:
    """An agent of a MassGen CLI backend (claude_code, codex, gemini_cli): the keys that mean
    something for a read-only panel member map, the others are named in a warning."""
    known = {"type", "model", "base_url", "api_key", "api_key_env", *CLI_SYSTEM_KEYS}
    check_keys(backend, f"{where}.backend", "backend", known, warnings, problems,
               reasons=CLI_IGNORED)
    model, base_url = _model_string(backend, f"{where}.backend", expansion)
    system = raw.get("system_message")
    for key in CLI_SYSTEM_KEYS:  # Claude Code's names for the same thing
        if backend.get(key):
            system = "\n\n".join(s for s in (system, str(backend[key])) if s)
    agent = {"id": raw.get("id", f"agent{index + 1}"), "model": model,
             "system_message": system, "base_url": base_url}
    for key in ("api_key", "api_key_env"):
        if key in backend:
            agent[key] = backend[key]
    _api_key_reference(agent, backend, where)
    return agent


def _api_key_reference(agent: dict[str, Any], backend: dict[str, Any], where: str) -> None:
    """``api_key: "${NAME}"`` is recorded as the reference, never the value, so the record
    holds no key and a resumed run reads the variable again."""
    reference = VAR_REFERENCE.fullmatch(str(backend.get("api_key", "")))
    if reference:
        expand_vars(reference.group(0), f"{where}.backend.api_key")  # only: is it set?
        del agent["api_key"]
        agent["api_key_env"] = reference.group(1)


def _options(data: dict[str, Any], warnings: list[str], problems: list[str],
             origin: dict[str, str], expansion: Expansion) -> dict[str, Any]:
    """The run options the file sets; ``origin`` gets the file's key path of each option
    set from a MassGen key, so a bad value is named where it was written."""
    given = data.get("options") or {}
    if not isinstance(given, dict):
        problems.append("options: expected a mapping of run options")
        given = {}
    options: dict[str, Any] = dict(given)
    orchestrator = data.get("orchestrator") or {}
    if not isinstance(orchestrator, dict):
        problems.append("orchestrator: expected a mapping")
        orchestrator = {}
    check_keys(orchestrator, "orchestrator", "orchestrator", ORCHESTRATOR_KEYS, warnings,
               problems)
    for key, value in orchestrator.items():
        if key in OPTION_KEYS:
            options[OPTION_KEYS[key]] = value
            origin[OPTION_KEYS[key]] = f"orchestrator.{key}"
        elif key == "final_answer_strategy":
            if value == "winner_reuse":
                options["skip_final_presentation"] = True
            elif value == "synthesize":
                warnings.append("orchestrator.final_answer_strategy: 'synthesize' is not "
                                "supported; the winner presents (winner_present)")
            elif value != "winner_present":
                problems.append("orchestrator.final_answer_strategy: use winner_present or "
                                "winner_reuse")
        elif key == "context_paths":
            try:
                paths = _context_paths(value, warnings)
                # MassGen's quickstart writes `context_paths: []`: no path, no file access.
                # Tools with no paths would see the whole workspace, the opposite.
                if paths:
                    options["context_paths"] = paths
                    options["workspace_tools"] = True
                    origin["context_paths"] = "orchestrator.context_paths"
            except ConfigError as exc:
                problems.append(str(exc))
        elif key == "coordination_mode" and value != "voting":
            written = expansion.written("orchestrator.coordination_mode", str(value))
            problems.append(f"orchestrator.coordination_mode: "
                            f"{value if written is None else written!r} is not supported; "
                            "massgen-mcp implements 'voting'")
    timeouts = data.get("timeout_settings") or {}
    if not isinstance(timeouts, dict):
        problems.append("timeout_settings: expected a mapping")
        timeouts = {}
    check_keys(timeouts, "timeout_settings", "timeout_settings",
               {"orchestrator_timeout_seconds"}, warnings, problems)
    if "orchestrator_timeout_seconds" in timeouts:
        options["timeout_s"] = timeouts["orchestrator_timeout_seconds"]
        origin["timeout_s"] = "timeout_settings.orchestrator_timeout_seconds"
    return options


def _context_paths(value: Any, warnings: list[str]) -> list[str]:
    """MassGen's ``[{path, permission}]`` (or plain strings) as paths the workspace tools
    may read; write permission is not granted (agents' tools are read-only)."""
    if not isinstance(value, list):
        raise ConfigError("orchestrator.context_paths: expected a list of {path, permission}")
    paths = []
    for i, item in enumerate(value):
        entry = {"path": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ConfigError(f"orchestrator.context_paths[{i}].path: required, a path")
        if entry.get("permission", "read") != "read":
            warnings.append(f"orchestrator.context_paths[{i}].permission: agents' tools are "
                            "read-only in massgen-mcp; read access only")
        paths.append(entry["path"])
    return paths


def team_from_mapping(data: Any, *, source: str = "config", expanded: Expanded | None = None
                      ) -> tuple[TeamConfig, list[str]]:
    """Translate a MassGen-format mapping; returns the team and warnings about ignored keys.
    ``expanded`` collects each ``${VAR}`` put into the config (a trust check needs them).

    Every problem of the file is reported at once, one line each, named by its key path in
    the file (``agents[1].backend.model``): fixing a config one run at a time costs a
    newcomer a run per typo."""
    expansion = Expansion([] if expanded is None else expanded)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with an 'agents' list")
    warnings: list[str] = []
    problems: list[str] = []
    check_keys(data, "", "top", TOP_KEYS, warnings, problems)
    raw_agents = _raw_agents(data)
    if not isinstance(raw_agents, list) or not raw_agents:
        problems.append("agents: required, a list of 1-8 agents")
        raw_agents = []
    elif len(raw_agents) > MAX_AGENTS:
        problems.append(
            f"agents: {len(raw_agents)} agents; massgen-mcp runs at most {MAX_AGENTS}. Every "
            "agent reads every current answer on every turn, so a round's tokens grow with "
            f"the square of the team (a round of {len(raw_agents)} reads "
            f"~{(len(raw_agents) / 3) ** 2:.0f}x what a round of 3 does) and votes split; "
            "keep the 8 most different models")
    agents = []
    roles: list[str] = []  # each agent's role: key, "none" where it has none
    for i, raw in enumerate(raw_agents):
        try:
            expanded_agent = expansion.agent(raw, i)
            agent = _agent(expanded_agent, i, warnings, problems, expansion)
            roles.append(_agent_role(expanded_agent, i))
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        written = expansion.written(f"agents[{i}].backend.model", agent["model"])
        problems.extend(f"{_agent_path(i, path)}: {why}"
                        for path, why in _agent_problems(agent, written))
        agents.append(agent)
    origin: dict[str, str] = {}
    options: dict[str, Any] = {}
    try:
        rest = {k: expansion.expand(v, k) for k, v in data.items()
                if k not in NOT_TEAM_KEYS}
        options = _options(rest, warnings, problems, origin, expansion)
        if any(role != NO_ROLE for role in roles):
            if "roles" in options:
                problems.append("options.roles: the agents have role: keys too; give the "
                                "roles here or on the agents, not both")
            options["roles"] = roles
        RunOptions.model_validate(options)
    except ConfigError as exc:
        problems.append(str(exc))
    except ValidationError as exc:
        problems.extend(f"{_option_path(path, origin)}: {why}"
                        for path, why in validation_problems(exc))
    if problems:
        raise ConfigError("\n".join(expansion.mask(line) for line in problems))
    try:
        team = build_team({"agents": agents, "options": options}, source=source)
    except ConfigError as exc:  # what only the whole team shows (an id used twice)
        raise ConfigError(expansion.mask(str(exc))) from None
    return team, warnings


def _agent_role(raw: dict[str, Any], index: int) -> str:
    """An agent's ``role:`` as one of options.roles (``none`` when it has none); a bad one
    is named by its key (``agents[1].role``)."""
    role = raw.get("role")
    if role is None:
        return NO_ROLE
    if not isinstance(role, str):
        raise ConfigError(f"agents[{index}].role: expected text: a stance (for, against, "
                          "neutral), devils_advocate, or your own words")
    try:
        return check_role(role)
    except ValueError as exc:
        raise ConfigError(f"agents[{index}].role: {exc}") from None


def _agent_problems(agent: dict[str, Any], written: str | None) -> list[tuple[str, str]]:
    """The agent's problems as (field, why), in its fields' order: a model string no
    provider serves comes in the model's place, after the id; one its kind does not serve
    (``cli/cursor``, :mod:`massgen_mcp.providers.kinds`) alone, for the agent. ``written``:
    the file's text of a model that came from the environment, quoted instead of the value."""
    try:
        AgentSpec.model_validate(agent, context=None if written is None else {
            WRITTEN: {"model": written}})
        found = []
    except ValidationError as exc:
        found = validation_problems(exc)
    if any(path == "model" for path, _ in found):
        return found
    own = kind_problem(agent["model"], written)
    if own:  # named for the agent, as AgentSpec's check of the shape is: it quotes the model
        return found or [("", own)]
    typo = model_problem(agent["model"], written)
    if typo:
        found.insert(sum(path == "id" for path, _ in found), ("model", typo))
    return found


def _raw_agents(data: dict[str, Any]) -> Any:
    """The file's agents as written: ``agents:``, or MassGen's single ``agent:``."""
    raw = data.get("agents")
    return [data["agent"]] if raw is None and "agent" in data else raw


def _variables_read(data: Any) -> Expanded:
    """Each ``${VAR}`` a parsed config copies from the environment into its fields, as
    :func:`team_from_mapping` records them, found without validating anything: consent for
    them is asked before an error could quote what they hold. A part whose expansion fails is
    skipped (that error names the variable, not a value)."""
    used: Expanded = []
    if not isinstance(data, dict):
        return used
    expansion = Expansion(used)
    raw_agents = _raw_agents(data)
    for i, raw in enumerate(raw_agents if isinstance(raw_agents, list) else []):
        with contextlib.suppress(ConfigError):
            expansion.agent(raw, i)
    with contextlib.suppress(ConfigError):
        for key, value in data.items():
            if key not in NOT_TEAM_KEYS:
                expansion.expand(value, key)
    return used


def _agent_path(index: int, path: str) -> str:
    """The file's key path of a problem pydantic names by field (``model`` of agent 1 is
    ``agents[1].backend.model``)."""
    field, sep, rest = path.partition(".")
    field, bracket, more = field.partition("[")
    tail = f"{bracket}{more}{sep}{rest}"
    if not field:
        return f"agents[{index}]"
    if field in AGENT_TOP:
        return f"agents[{index}].{field}{tail}"
    return f"agents[{index}].backend.{AGENT_RENAMED.get(field, field)}{tail}"


def _option_path(path: str, origin: dict[str, str]) -> str:
    field, sep, rest = path.partition(".")
    field, bracket, more = field.partition("[")
    return f"{origin.get(field, f'options.{field}')}{bracket}{more}{sep}{rest}"


@dataclass(frozen=True)
class LoadedConfig:
    """A config file as read: the team, the warnings, and what a trust decision hashes (the
    text and the ``${VAR}`` values it expands)."""

    path: Path
    team: TeamConfig
    warnings: list[str]
    text: str
    expanded: Expanded


def read_config_file(path: str | Path, *, check_trust: bool = False) -> LoadedConfig:
    """Read and validate a YAML (or JSON) config file; errors name the file and the key.
    ``check_trust`` applies the project-config rule of :mod:`massgen_mcp.team.consent`: the
    values the file reads from the environment need consent before it is validated (an error
    about a field must not be the way they leave), the rest once the team is known.
    Blocking (it reads a file): call it off the event loop."""
    path = Path(path)
    text = read_config_text(path)
    data = parse_yaml(text, path.name)
    if check_trust:
        consent.check_reads(path, text, _variables_read(data))
    expanded: Expanded = []
    try:
        team, warnings = team_from_mapping(data, source=path.name, expanded=expanded)
    except ConfigError as exc:  # one line per problem, each naming the file
        raise ConfigError("\n".join(
            line if line.startswith(path.name) else f"{path.name}: {line}"
            for line in str(exc).splitlines())) from None
    if check_trust:
        consent.check(team, path, text, expanded)
    return LoadedConfig(path, team, warnings, text, expanded)


def load_config_file(path: str | Path, *, check_trust: bool = False
                     ) -> tuple[TeamConfig, list[str]]:
    """The team and warnings of a config file (see :func:`read_config_file`)."""
    loaded = read_config_file(path, check_trust=check_trust)
    return loaded.team, loaded.warnings


def review_rules_only(path: Path) -> bool:
    """Whether the config file at ``path`` holds a repository's review rules (``review:``)
    and no team (no ``agents:``): a project's ``.massgen/config.yaml`` may say only how its
    changes are reviewed, and then it names no default team. Blocking: reads the file."""
    data = parse_yaml(read_config_text(path), path.name)
    return isinstance(data, dict) and "review" in data and not ({"agents", "agent"} & set(data))
