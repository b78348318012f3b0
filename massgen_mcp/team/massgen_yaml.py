"""Read MassGen-format YAML configs into a :class:`~massgen_mcp.core.spec.TeamConfig`.

MassGen files look like ``agents: [{id, backend: {type, model, base_url, api_key, ...},
system_message}]`` plus ``orchestrator:`` and ``timeout_settings:``. We map what we support,
warn (never silently) about MassGen features we do not implement, and reject keys nobody knows,
naming the key and the closest key we do know.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from massgen_mcp.core.env import VAR_REFERENCE, getenv
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.secrets import looks_secret, register_secret
from massgen_mcp.core.spec import (
    MAX_AGENTS,
    WRITTEN,
    AgentSpec,
    McpServerSpec,
    RunOptions,
    TeamConfig,
    build_team,
    validation_problems,
)
from massgen_mcp.providers.model_names import bare_model_guess, model_problem
from massgen_mcp.team import consent
from massgen_mcp.team.massgen_keys import check_keys
from massgen_mcp.team.safe_yaml import parse_yaml, read_config_text

# MassGen backend type -> (litellm provider prefix, default base_url or None).
BACKEND_TYPES: dict[str, tuple[str, str | None]] = {
    "openai": ("openai", None),
    "claude": ("anthropic", None),
    "anthropic": ("anthropic", None),
    "gemini": ("gemini", None),
    "grok": ("xai", None),
    "xai": ("xai", None),
    "chatcompletion": ("openai", None),
    "azure_openai": ("azure", None),
    "openrouter": ("openrouter", None),
    "groq": ("groq", None),
    "together": ("together_ai", None),
    "fireworks": ("fireworks_ai", None),
    "cerebras": ("cerebras", None),
    "moonshot": ("moonshot", None),
    "nebius": ("nebius", None),
    "deepseek": ("deepseek", None),
    "mistral": ("mistral", None),
    "zai": ("zai", None),
    "ollama": ("ollama_chat", "http://127.0.0.1:11434"),
    "vllm": ("hosted_vllm", "http://127.0.0.1:8000/v1"),
    "sglang": ("openai", "http://127.0.0.1:30000/v1"),
    "lmstudio": ("lm_studio", "http://127.0.0.1:1234/v1"),
    "local": ("local", None),  # the embedded llama.cpp model (massgen-mcp[local])
}
# MassGen's coding-agent CLI backends -> our cli/<name> agents (massgen_mcp.providers.cli).
CLI_BACKENDS = {"claude_code": "claude", "codex": "codex", "gemini_cli": "gemini"}
UNSUPPORTED_BACKENDS = {"copilot", "ag2", "inference"}
# What a CLI backend's keys would do upstream that a read-only panel member does not:
# one warning each (model, base_url, api_key and the system prompt keys do map).
_CLI_IGNORED = {
    "cwd": "the CLI runs in an empty temporary folder, read-only",
    "allowed_tools": "the CLI runs with no built-in tools",
    "disallowed_tools": "the CLI runs with no built-in tools",
    "exclude_tools": "the CLI runs with no built-in tools",
    "permission_mode": "the CLI always runs in its read-only mode",
    "approval_mode": "the CLI always runs in its read-only mode",
    "sandbox": "the CLI always runs in its read-only mode",
    "max_thinking_tokens": "the CLI uses its own settings",
    "temperature": "the CLI uses its own sampling settings",
    "top_p": "the CLI uses its own sampling settings",
    "max_tokens": "the CLI uses its own settings",
    "tool_calling": "CLI agents decide in JSON",
    "mcp_servers": "the CLI starts no MCP servers",
    "enable_web_search": "the CLI runs with no built-in tools",
}
_CLI_SYSTEM_KEYS = ("system_prompt", "append_system_prompt")

# The keys we implement; MassGen's others are warned about (massgen_mcp.team.massgen_keys).
_AGENT_KEYS = {"id", "backend", "system_message"}
_BACKEND_KEYS = {
    "type", "model", "base_url", "api_key", "api_key_env",
    "temperature", "top_p", "max_tokens", "tool_calling",
    "mcp_servers", "allowed_tools", "exclude_tools", "enable_web_search",
}
_ORCHESTRATOR_KEYS = {"max_new_answers_per_agent", "skip_final_presentation",
                      "final_answer_strategy", "coordination_mode", "context_paths",
                      "answer_novelty_requirement", "max_orchestration_restarts"}
_TOP_KEYS = {"agents", "agent", "orchestrator", "timeout_settings", "options"}


Expanded = list[tuple[str, str]]  # (variable, where it went) for every ${VAR} expanded
_BARE_MASK = 8  # shorter values (a number, "openai") are masked only where quoted


class _Expansion:
    """The ``${VAR}`` expansions of one file: which variable went where (``used``, what
    consent asks about) and, per key path, the text the file has there and what it became.

    A value from the environment may be anything of the user's (a webhook URL, a token of a
    shape no redaction knows), and a config's errors go wherever the caller is, a model
    included: so no error quotes it. A problem with such a field quotes the file's own text
    (``'${SLACK_WEBHOOK_URL}'``), and no hint is derived from the value."""

    def __init__(self, used: Expanded) -> None:
        self.used = used
        self.fields: dict[str, tuple[str, str]] = {}  # key path -> (the file's text, value)

    def expand(self, value: Any, where: str) -> Any:
        """Replace ``${VAR}`` in strings with the environment variable; unset variables are
        errors.

        A credential-named variable may only be a whole ``api_key`` (see :func:`_agent`):
        anywhere else its value would travel as plain text, in a prompt or a URL, to whichever
        server."""
        if isinstance(value, str):
            def sub(match: re.Match[str]) -> str:
                name = match.group(1)
                if looks_secret(name):
                    raise ConfigError(f"{where}: ${{{name}}} looks like a credential; use it "
                                      f"only as the whole api_key (api_key: \"${{{name}}}\") "
                                      f"or as api_key_env: {name}")
                found = getenv(name)
                if found is None:
                    raise ConfigError(f"{where}: environment variable {name} is not set")
                self.used.append((name, where))
                return found
            result = VAR_REFERENCE.sub(sub, value)
            if result != value:
                self.fields[where] = (value, result)
            return result
        if isinstance(value, dict):
            return {k: self.expand(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.expand(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def agent(self, raw: Any, index: int) -> Any:
        """An agent with ``${VAR}`` expanded everywhere except a whole-``${VAR}`` api_key,
        which :func:`_agent` keeps as a reference."""
        if not isinstance(raw, dict):
            return raw
        where = f"agents[{index}]"
        expanded = {k: self.expand(v, f"{where}.{k}") for k, v in raw.items() if k != "backend"}
        backend = raw.get("backend")
        if isinstance(backend, dict):
            key = backend.get("api_key")
            keep = isinstance(key, str) and VAR_REFERENCE.fullmatch(key) is not None
            # mcp_servers keep their ${VAR}s: resolved when the server starts, never recorded.
            backend = {k: v if (k == "api_key" and keep) or k == "mcp_servers"
                       else self.expand(v, f"{where}.backend.{k}") for k, v in backend.items()}
        if "backend" in raw:
            expanded["backend"] = backend
        return expanded

    def written(self, where: str, text: str) -> str | None:
        """``text`` as the file writes it, when the field at ``where`` came from the
        environment (None when it did not): ``text`` is the field's value, or a string built
        to end with it (``openai/`` + the model)."""
        if where not in self.fields:
            return None
        source, value = self.fields[where]
        for tail, own in ((value, source), (value.strip(), source.strip())):
            if tail and text.endswith(tail):
                return text[:len(text) - len(tail)] + own
        return source

    def mask(self, line: str) -> str:
        """``line`` with every value a field took from the environment put back as the file's
        text: the last guard for a message that quotes a value :meth:`written` did not reach
        (an agent id named twice, say). Bare, a value is replaced only when it is long
        enough not to be a word of the message itself."""
        pairs = sorted(self.fields.values(), key=lambda pair: -len(pair[1]))
        for source, value in pairs:
            line = line.replace(repr(value), repr(source))
        for source, value in pairs:
            if len(value) >= _BARE_MASK:
                line = line.replace(value, source)
        return line


def _model_string(backend: dict[str, Any], where: str, expansion: _Expansion
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
           expansion: _Expansion) -> dict[str, Any]:
    """One agent's fields; misspelt keys go to ``problems``, the first other problem of the
    agent is raised (what follows from it would only repeat it)."""
    where = f"agents[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with id, backend and system_message")
    check_keys(raw, where, "agent", _AGENT_KEYS, warnings, problems)
    backend = raw.get("backend")
    if not isinstance(backend, dict):
        raise ConfigError(f"{where}.backend: required mapping with at least type and model")
    if backend.get("type") in CLI_BACKENDS:
        return _cli_agent(raw, backend, where, index, warnings, problems, expansion)
    check_keys(backend, f"{where}.backend", "backend", _BACKEND_KEYS, warnings, problems)
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
               warnings: list[str], problems: list[str], expansion: _Expansion
               ) -> dict[str, Any]:
    """An agent of a MassGen CLI backend (claude_code, codex, gemini_cli): the keys that mean
    something for a read-only panel member map, the others are named in a warning."""
    known = {"type", "model", "base_url", "api_key", "api_key_env", *_CLI_SYSTEM_KEYS}
    check_keys(backend, f"{where}.backend", "backend", known, warnings, problems,
               reasons=_CLI_IGNORED)
    model, base_url = _model_string(backend, f"{where}.backend", expansion)
    system = raw.get("system_message")
    for key in _CLI_SYSTEM_KEYS:  # Claude Code's names for the same thing
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
        name = reference.group(1)
        if getenv(name) is None:
            raise ConfigError(f"{where}.backend.api_key: environment variable {name} is not set")
        del agent["api_key"]
        agent["api_key_env"] = name


# MassGen keys that set one of our options directly: the key a problem with it is named by.
_OPTION_KEYS = {
    "max_new_answers_per_agent": "max_answers_per_agent",
    "skip_final_presentation": "skip_final_presentation",
    "answer_novelty_requirement": "answer_novelty",
    "max_orchestration_restarts": "max_orchestration_restarts",
}


def _options(data: dict[str, Any], warnings: list[str], problems: list[str],
             origin: dict[str, str], expansion: _Expansion) -> dict[str, Any]:
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
    check_keys(orchestrator, "orchestrator", "orchestrator", _ORCHESTRATOR_KEYS, warnings,
               problems)
    for key, value in orchestrator.items():
        if key in _OPTION_KEYS:
            options[_OPTION_KEYS[key]] = value
            origin[_OPTION_KEYS[key]] = f"orchestrator.{key}"
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
                options["context_paths"] = _context_paths(value, warnings)
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
    expansion = _Expansion([] if expanded is None else expanded)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with an 'agents' list")
    warnings: list[str] = []
    problems: list[str] = []
    check_keys(data, "", "top", _TOP_KEYS, warnings, problems)
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
    for i, raw in enumerate(raw_agents):
        try:
            agent = _agent(expansion.agent(raw, i), i, warnings, problems, expansion)
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
                if k not in ("agents", "agent")}
        options = _options(rest, warnings, problems, origin, expansion)
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


def _agent_problems(agent: dict[str, Any], written: str | None) -> list[tuple[str, str]]:
    """The agent's problems as (field, why), in its fields' order: a model string no
    provider serves comes in the model's place, after the id. ``written``: the file's text of
    a model that came from the environment, quoted instead of the value."""
    try:
        AgentSpec.model_validate(agent, context=None if written is None else {
            WRITTEN: {"model": written}})
        found = []
    except ValidationError as exc:
        found = validation_problems(exc)
    typo = None if any(path == "model" for path, _ in found) else model_problem(
        agent["model"], written)
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
    expansion = _Expansion(used)
    raw_agents = _raw_agents(data)
    for i, raw in enumerate(raw_agents if isinstance(raw_agents, list) else []):
        with contextlib.suppress(ConfigError):
            expansion.agent(raw, i)
    with contextlib.suppress(ConfigError):
        for key, value in data.items():
            if key not in ("agents", "agent"):
                expansion.expand(value, key)
    return used


# Agent fields written under another name in a MassGen file (the others keep their names,
# under backend: except these two).
_AGENT_RENAMED = {"web_search": "enable_web_search"}
_AGENT_TOP = ("id", "system_message")


def _agent_path(index: int, path: str) -> str:
    """The file's key path of a problem pydantic names by field (``model`` of agent 1 is
    ``agents[1].backend.model``)."""
    field, sep, rest = path.partition(".")
    field, bracket, more = field.partition("[")
    tail = f"{bracket}{more}{sep}{rest}"
    if not field:
        return f"agents[{index}]"
    if field in _AGENT_TOP:
        return f"agents[{index}].{field}{tail}"
    return f"agents[{index}].backend.{_AGENT_RENAMED.get(field, field)}{tail}"


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


def presets_dir() -> Path:
    """Where the ``configs/`` presets live (inside the wheel, or the source checkout)."""
    here = Path(__file__).resolve().parent.parent  # the massgen_mcp package
    packaged = here / "_configs"
    return packaged if packaged.is_dir() else here.parent / "configs"


def resolve_config_path(ref: str) -> Path:
    """``@name`` names a preset in ``configs/``; anything else is a file path."""
    if not ref.startswith("@"):
        if not Path(ref).exists() and (hint := preset_hint(ref)):
            raise ConfigError(f"config file {ref!r} does not exist{hint}")
        return Path(ref)
    name = ref[1:]
    path = presets_dir() / f"{name}.yaml"
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", name) or not path.is_file():
        known = sorted(p.stem for p in presets_dir().glob("*.yaml"))
        raise ConfigError(f"config {ref!r}: no such preset; presets: "
                          + ", ".join(f"@{k}" for k in known))
    return path


def preset_hint(ref: str) -> str:
    """``"; did you mean '@fast_cheap' (a preset)?"`` when ``ref``, which names no file, is a
    preset's name without its ``@`` (or close to one), else ``""``."""
    if "/" in ref or "\\" in ref:
        return ""
    known = sorted(p.stem for p in presets_dir().glob("*.yaml"))
    close = difflib.get_close_matches(ref.removesuffix(".yaml"), known, n=1, cutoff=0.8)
    return f"; did you mean '@{close[0]}' (a preset)?" if close else ""


_SERVER_NAME = re.compile(r"[A-Za-z0-9_\-]{1,40}")


# MassGen server keys with no meaning here: ignored with a warning saying what they do upstream.
_SERVER_IGNORED = {"defer_loading": "deferring the server's tools behind tool search"}


def parse_servers(raw: Any, where: str, warnings: list[str] | None = None
                  ) -> list[McpServerSpec]:
    """MassGen's ``mcp_servers`` (mapping or list form) as specs; ConfigError naming the key.
    Keys of :data:`_SERVER_IGNORED` are dropped, with a line in ``warnings``."""
    items: list[tuple[str, Any]]
    if isinstance(raw, dict):
        items = [(str(name), body) for name, body in raw.items()]
    elif isinstance(raw, list):
        items = [(str(body.get("name", "")) if isinstance(body, dict) else "", body)
                 for body in raw]
    else:
        raise ConfigError(f"{where}: expected a mapping of name -> server, or a list of servers")
    servers = []
    for i, (name, body) in enumerate(items):
        here = f"{where}.{name}" if isinstance(raw, dict) else f"{where}[{i}]"
        if not isinstance(body, dict):
            raise ConfigError(f"{here}: expected a mapping with type and command or url")
        if not _SERVER_NAME.fullmatch(name) or "__" in name:
            raise ConfigError(f"{here}.name: use 1-40 letters, digits, '_' or '-' (no '__', "
                              "which separates server and tool in mcp__server__tool)")
        for key in set(body) & set(_SERVER_IGNORED):
            if warnings is not None:
                warnings.append(f"{here}.{key}: ignored (MassGen: {_SERVER_IGNORED[key]}; not "
                                "in massgen-mcp)")
        data = {k: v for k, v in body.items() if k != "name" and k not in _SERVER_IGNORED}
        try:
            spec = McpServerSpec(name=name, **data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            message = ("unknown key; remove it" if first["type"] == "extra_forbidden"
                       else first["msg"])
            raise ConfigError(f"{here}{'.' + field if field else ''}: {message}") from None
        if spec.type == "stdio" and not spec.command:
            raise ConfigError(f"{here}.command: required for a stdio server")
        if spec.type != "stdio" and not (spec.url or "").startswith(("http://", "https://")):
            raise ConfigError(f"{here}.url: required, an http(s) URL, for a {spec.type} server")
        for key, value in {**spec.env, **spec.headers}.items():
            if looks_secret(key) or key.lower() == "authorization":
                register_secret(value)  # a literal credential: masked wherever it appears
        servers.append(spec)
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: two servers share a name")
    return servers
