"""The shape of a run: what the caller asks for, who the agents are, which limits apply.

Every front end (CLI flags, an MCP tool call, a script) describes a run as one :class:`RunSpec`;
:mod:`massgen_mcp.team.choose` turns it into a :class:`TeamConfig`. Validation happens here,
once, with messages that name the field and the fix, so the engine can trust what it gets.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from massgen_mcp.core.edges import check_text, has_control_characters, text_problem
from massgen_mcp.core.env import VAR_REFERENCE, getenv
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.model_map import bare_provider
from massgen_mcp.core.outcomes import ReviewTarget
from massgen_mcp.core.secrets import redact, register_secret

MAX_AGENTS = 8
MAX_QUESTION_CHARS = 50_000
MAX_CONTEXT_CHARS = 200_000
MAX_ROLE_CHARS = 2_000

# The roles with a meaning of their own (massgen_mcp.consensus.prompts words them); any other
# role is free text, told to its agent as the user wrote it. "none": no role (a gap in a list).
STANCES = ("for", "against", "neutral")
DEVILS_ADVOCATE = "devils_advocate"
NO_ROLE = "none"
ROLE_NAMES = (*STANCES, DEVILS_ADVOCATE, NO_ROLE)

# Coding-agent CLIs that can sit on a team as cli/<name> or cli/<name>/<model>
# (massgen_mcp.providers.cli runs them).
CLI_NAMES = ("claude", "codex", "gemini")
CLI_PROVIDERS = {"claude": "anthropic", "codex": "openai", "gemini": "gemini"}  # whose API
# Agent settings a CLI agent cannot honour: it samples with its own settings and has no tools.
_NOT_FOR_CLI = ("temperature", "top_p", "max_tokens", "tool_calling", "web_search",
                "mcp_servers", "allowed_tools", "exclude_tools")

_AGENT_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MODEL = re.compile(r"[A-Za-z0-9_.:@\-/]{1,200}")

# Which environment variable a provider reads its key from (litellm's own names). A model behind
# an explicit base_url is a self-hosted endpoint and needs no key.
PROVIDER_KEY_ENV: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "xai": ("XAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY", "TOGETHER_API_KEY"),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
    "cerebras": ("CEREBRAS_API_KEY",),
    "zai": ("ZAI_API_KEY",),
    "moonshot": ("MOONSHOT_API_KEY",),
    "nebius": ("NEBIUS_API_KEY",),
    "azure": ("AZURE_API_KEY",),
}


def provider_key(provider: str) -> str | None:
    """The first of the provider's own key variables that is set, else None."""
    for name in PROVIDER_KEY_ENV.get(provider, ()):
        value = getenv(name)
        if value:
            return value
    return None


class McpServerSpec(BaseModel):
    """One MCP server an agent may use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: Literal["stdio", "streamable-http", "http"] = "stdio"
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}

    @field_validator("command", "cwd", "url")
    @classmethod
    def _check_text(cls, value: str | None) -> str | None:
        if value is not None and (has_control_characters(value) or "\n" in value):
            raise ValueError("contains a control character (ESC, BEL, a newline, ...); "
                             "remove it")
        return value

    @field_validator("args")
    @classmethod
    def _check_args(cls, value: list[str]) -> list[str]:
        for arg in value:
            if has_control_characters(arg):
                raise ValueError("contains a control character (ESC, BEL, ...); remove it")
        return value

    def describe(self) -> str:
        if self.type == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        return self.url or ""


# The validation context key of fields whose value came from the environment (a config's
# ``${VAR}``, massgen_mcp.team.massgen_yaml): ``{WRITTEN: {"model": "openai/${MODEL}"}}``. An
# error quotes that text instead of the value, which may be anything of the user's, and
# derives no hint from the value.
WRITTEN = "written"


def written(info: ValidationInfo, field: str) -> str | None:
    """The text to quote for ``field`` instead of its value (see :data:`WRITTEN`), or None."""
    context = info.context
    texts = context.get(WRITTEN) if isinstance(context, dict) else None
    text = texts.get(field) if isinstance(texts, dict) else None
    return text if isinstance(text, str) else None


class AgentSpec(BaseModel):
    """One agent: a model (litellm model string), an optional persona and sampling settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    model: str
    system_message: Annotated[str | None, Field(max_length=20_000)] = None
    temperature: Annotated[float | None, Field(ge=0, le=2)] = None
    top_p: Annotated[float | None, Field(gt=0, le=1)] = None
    max_tokens: Annotated[int | None, Field(gt=0, le=200_000)] = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    tool_calling: bool | None = None
    # The majority may not decide before this agent's first answer has joined the review
    # (massgen_mcp.consensus.state): for the slow, strong member a fast majority would skip.
    required: bool = False
    # Ask the provider to search the web (MassGen's enable_web_search; litellm's provider-native
    # web_search_options: OpenAI search models, Anthropic, Gemini, xAI, Perplexity, ...).
    web_search: bool = False
    # MCP servers whose tools this agent may call (massgen_mcp.tools.mcp_servers).
    mcp_servers: list[McpServerSpec] = []
    allowed_tools: list[str] | None = None
    exclude_tools: list[str] | None = None

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not _AGENT_ID.fullmatch(value):
            raise ValueError("use 1-64 letters, digits, '_', '-' or '.'")
        return value

    @field_validator("model")
    @classmethod
    def _check_model(cls, value: str) -> str:
        if not _MODEL.fullmatch(value):
            raise ValueError(
                "expected a litellm model string such as 'openai/gpt-4o-mini' or "
                "'anthropic/claude-sonnet-4-5' (no spaces)"
            )
        return value  # whether a provider serves it: the run's preflight asks

    @model_validator(mode="after")
    def _check_cli(self, info: ValidationInfo) -> AgentSpec:
        if not self.model.startswith("cli/"):
            return self
        name = self.model.split("/")[1]
        shown = written(info, "model") or self.model
        if (name not in CLI_NAMES or self.model.count("/") > 2 or self.model.endswith("/")
                or self.model.split("/")[-1].startswith("-")):
            raise ValueError(f"model {shown!r}: a coding-agent CLI is cli/<name> or "
                             f"cli/<name>/<model>, with <name> one of {', '.join(CLI_NAMES)}")
        for name in _NOT_FOR_CLI:
            # A setting given with its default value asks for nothing: a team rebuilt from
            # its own dump (run --timeout, with_overrides) passes temperature=None.
            field = type(self).model_fields[name]
            if (name in self.model_fields_set
                    and getattr(self, name) != field.get_default(call_default_factory=True)):
                raise ValueError(f"{name}: not available for a coding-agent CLI agent "
                                 f"({shown}); remove it (the CLI runs read-only with "
                                 "its own settings)")
        return self

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is not None and (not re.fullmatch(r"https?://\S+", value)
                                  or has_control_characters(value)):
            raise ValueError("expected an http(s) URL such as 'http://127.0.0.1:11434/v1' "
                             "(no spaces or control characters)")
        return value

    @property
    def cli(self) -> str | None:
        """The coding-agent CLI this agent runs ('claude' for cli/claude/opus), else None."""
        return self.model.split("/")[1] if self.model.startswith("cli/") else None

    @property
    def cli_model(self) -> str | None:
        """The model a CLI agent asks its CLI for ('opus' for cli/claude/opus), else None."""
        parts = self.model.split("/", 2)
        return parts[2] if self.cli and len(parts) == 3 else None

    @property
    def provider(self) -> str:
        """The provider that serves the model: its prefix ('openai' for 'openai/gpt-4o'), or
        for a bare name the one litellm routes it to ('openai' for 'gpt-4o';
        :func:`~massgen_mcp.core.model_map.bare_provider`); '' when none is known. The key
        check, consent and the call all read this, so every spelling is checked alike."""
        if "/" in self.model:
            return self.model.split("/", 1)[0]
        return bare_provider(self.model) or ""

    @property
    def routed_model(self) -> str:
        """The model string a call sends to litellm: a bare name with its provider in front
        (``gemini/gemini-2.5-flash``), so the call goes where the checks before the run
        looked (litellm alone would send a bare gemini-* to Vertex AI)."""
        provider = self.provider
        if "/" in self.model or not provider:
            return self.model
        return f"{provider}/{self.model}"

    def uses_native_tools(self) -> bool:
        """Whether to offer the workflow actions as tools rather than the JSON fallback (a
        CLI's final message is text, so CLI agents always decide in JSON)."""
        if self.cli:
            return False
        return True if self.tool_calling is None else self.tool_calling

    def resolved_api_key(self) -> str | None:
        """The key this agent sends: its own ``api_key``, else ``api_key_env``, else (only
        for the provider's own API, never a custom ``base_url``) the provider's variable.

        The value is registered for redaction here, the one place a credential is resolved,
        so it is masked on every way out whatever the variable was called."""
        key = self._find_api_key()
        register_secret(key)
        return key

    def _find_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            return getenv(self.api_key_env)
        return None if self.base_url else provider_key(self.provider)


def check_role(value: str) -> str:
    """One role, as :attr:`RunOptions.roles` keeps it: a role name (any case, ``-`` or a space
    for ``_``, "devil's advocate") as its name, else the free text stripped. Refused, with
    the fix: an empty role, text over :data:`MAX_ROLE_CHARS`, a control character, and a
    word or two that misspell a role name ("agianst", "devil advocate"), which would
    otherwise quietly become free text. Free text is untrusted like a question (the prompt
    escapes its tags); known key shapes in it are masked, since it is recorded and sent to
    every provider of its agent."""
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    text = value.strip()
    if not text:
        raise ValueError(f"empty; give a stance ({', '.join(STANCES)}), {DEVILS_ADVOCATE}, "
                         f"free text, or {NO_ROLE} for no role")
    if len(text) > MAX_ROLE_CHARS:
        raise ValueError(f"{len(text)} characters; the limit is {MAX_ROLE_CHARS}")
    if has_control_characters(text):
        raise ValueError("contains a control character (ESC, BEL, ...); remove it")
    name = re.sub(r"[\s\-]+", "_", text.lower().replace("'", "").replace("\u2019", ""))
    if name in ROLE_NAMES:
        return name
    if re.fullmatch(r"\w{1,24}", name):
        near = difflib.get_close_matches(name, ROLE_NAMES, n=1, cutoff=0.75)
        if near:
            raise ValueError(f"{text!r} is close to the role name {near[0]!r}; write "
                             f"{near[0]!r}, or a longer phrase for a role of your own")
    return redact(text)


Role = Annotated[str, AfterValidator(check_role)]


class RunOptions(BaseModel):
    """Limits and switches of one run; every field has a safe default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_answers_per_agent: Annotated[int, Field(ge=1, le=20)] = 3
    # When coordination ends (massgen_mcp.consensus.state): "all" is MassGen's rule (every
    # live agent has voted); "majority" ends it as soon as a strict majority of the live
    # agents vote for one current answer, which no later vote can outweigh.
    decide: Literal["majority", "all"] = Field("majority", description=(
        "'majority': decide once most live agents vote for one answer, review without "
        "stragglers (faster); 'all': MassGen's rule, every agent answers and votes"))
    # With decide "majority", round one waits for a straggler only this many times the
    # median time of its peers' first answers (massgen_mcp.consensus.pace); its answer still
    # joins when it arrives. "all" waits for every first answer, as MassGen does.
    late_factor: Annotated[float, Field(ge=1, le=100)] = 3.0
    # After the final answer, the winner checks it against the question; "restart" (with
    # feedback for every agent) starts a new coordination round, at most this many times.
    max_orchestration_restarts: Annotated[int, Field(ge=0, le=5)] = 0
    # MassGen's answer_novelty_requirement (massgen_mcp.consensus.actions.NOVELTY_LIMITS).
    answer_novelty: Literal["lenient", "balanced", "strict"] = "lenient"
    timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 600.0
    call_timeout_s: Annotated[float, Field(gt=0, le=3_600)] = 120.0
    # One turn of a coding-agent CLI (cli/* agents): a process start plus an agentic turn,
    # often a minute or more. A CLI that times out is dropped, not retried.
    cli_call_timeout_s: Annotated[float, Field(gt=0, le=3_600)] = 300.0
    max_retries: Annotated[int, Field(ge=0, le=10)] = 3
    retry_backoff_s: Annotated[float, Field(ge=0, le=30)] = 1.0
    max_cost_usd: Annotated[float | None, Field(gt=0)] = None
    max_total_tokens: Annotated[int | None, Field(gt=0)] = None
    skip_final_presentation: bool = False
    # Who writes the final answer (docs/protocol.md): "present", the winner's author after the
    # decision (MassGen's rule); "answer", nobody: the winning answer is the final answer (as
    # skip_final_presentation); "speculative", the leading answer's author starts as soon as
    # an answer leads the votes and its author has voted, in flight with the remaining turns,
    # and the text is used when that answer wins (discarded, and written again, otherwise).
    final: Literal["present", "answer", "speculative"] = "present"
    workspace_tools: bool = Field(False, description=(
        "let agents read the project's files (read-only; secret files never) before they "
        "decide; what they read is sent to their providers"))
    context_paths: Annotated[list[str], Field(max_length=20, description=(
        "with workspace_tools: only these files or folders (inside the workspace) are "
        "visible"))] = []
    # Secret-file names or deny-list patterns to lift for this run, e.g. [".env.*"] so agents
    # may read .env.example. The user's decision alone (massgen_mcp.team.consent): a model's
    # call may not set it, a project config needs consent.
    allow_secret_files: Annotated[list[str], Field(max_length=30)] = []
    max_tool_calls_per_turn: Annotated[int, Field(ge=1, le=64)] = 8
    max_tool_calls_per_run: Annotated[int, Field(ge=1, le=1_000)] = 64
    # "auto": the two cheapest members open alone; if they agree in round one the run ends
    # there, else the whole team joins from their answers (massgen_mcp.consensus.state).
    depth: Literal["full", "auto"] = Field("full", description=(
        "auto: the 2 cheapest members first, the rest only if they disagree"))
    # False: an agent may not vote for its own answer (unless it is the only one).
    self_vote: bool = True
    # Agent ids the majority may not decide without: no decision before each one's first
    # answer has joined the review.
    require: Annotated[list[str], Field(max_length=8, description=(
        "agent ids the majority waits for"))] = []
    # One role per agent, in the team's order (fewer: the rest have none); each is told only
    # to its own agent (massgen_mcp.consensus.prompts.role_text), never to its peers.
    roles: Annotated[list[Role], Field(max_length=MAX_AGENTS, description=(
        "one per agent, in order: for, against, neutral, devils_advocate, none, or free "
        "text"))] = []

    @field_validator("roles")
    @classmethod
    def _trim_roles(cls, roles: list[str]) -> list[str]:
        while roles and roles[-1] == NO_ROLE:  # a trailing "none" says nothing
            roles = roles[:-1]
        return roles


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
