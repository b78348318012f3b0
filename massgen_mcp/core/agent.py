"""One agent of a team, as every front end describes it: its model string, checked once
here for its shape, and what the model string says of a coding-agent CLI.

Which providers and CLIs exist, which provider serves a model string
(:func:`massgen_mcp.providers.kinds.provider_of`), and which variable holds a provider's key,
is not the ground floor's: it is one row per kind in :mod:`massgen_mcp.providers.kinds`,
which checks a model string's names as it loads
(:func:`massgen_mcp.providers.model_names.model_problem`) and in every run's preflight, and
finds an agent's key (:func:`massgen_mcp.providers.kinds.api_key`).
What stays here is what must hold for every agent whatever path built it (a record read back,
a pool's payload): the shape of ``cli/<name>/<model>``, which becomes a command line.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from massgen_mcp.core.edges import has_control_characters
from massgen_mcp.core.env import getenv
from massgen_mcp.core.secrets import register_secret

# Agent settings a CLI agent cannot honour: it samples with its own settings and has no tools.
_NOT_FOR_CLI = ("temperature", "top_p", "max_tokens", "tool_calling", "web_search",
                "mcp_servers", "allowed_tools", "exclude_tools")

_AGENT_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MODEL = re.compile(r"[A-Za-z0-9_.:@\-/]{1,200}")


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
        shown = written(info, "model") or self.model
        # Both parts go on the CLI's command line: neither may be empty or read as an option
        # (cli/codex/--dangerously-bypass-approvals-and-sandbox). Which names exist is the
        # cli/ kind's check (massgen_mcp.providers.kinds.cli_problem).
        if any(part == "" or part.startswith("-") for part in self.model.split("/", 2)[1:]):
            raise ValueError(f"model {shown!r}: a coding-agent CLI is cli/<name> or "
                             "cli/<name>/<model>, neither part empty nor starting with '-'")
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

    def uses_native_tools(self) -> bool:
        """Whether to offer the workflow actions as tools rather than the JSON fallback (a
        CLI's final message is text, so CLI agents always decide in JSON)."""
        if self.cli:
            return False
        return True if self.tool_calling is None else self.tool_calling

    def own_api_key(self) -> str | None:
        """The key this agent's own config gives: ``api_key``, else the variable
        ``api_key_env`` names (None when it is not set); None when it gives neither (then
        the provider's own variable may hold one: :func:`massgen_mcp.providers.kinds.api_key`).

        The value is registered for redaction here, where it is resolved, so it is masked on
        every way out whatever the variable was called."""
        if self.api_key is not None:
            key: str | None = self.api_key.get_secret_value()
        else:
            key = getenv(self.api_key_env) if self.api_key_env else None
        register_secret(key)
        return key
