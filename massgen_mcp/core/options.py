"""The limits and switches of one run (:class:`RunOptions`), and the roles its agents may
be given: what a caller may tune, each field with a safe default and a bound.

Apart from the team (:mod:`massgen_mcp.core.spec`) because the options are set from more
places than a team is (flags, a tool call, a config's ``orchestrator`` section, a preset)
and are checked alone before they meet one.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from massgen_mcp.core.edges import has_control_characters, text_problem
from massgen_mcp.core.secrets import redact

MAX_AGENTS = 8
MAX_ROLE_CHARS = 2_000

# The roles with a meaning of their own (massgen_mcp.consensus.prompts words them); any other
# role is free text, told to its agent as the user wrote it. "none": no role (a gap in a list).
STANCES = ("for", "against", "neutral")
DEVILS_ADVOCATE = "devils_advocate"
NO_ROLE = "none"
ROLE_NAMES = (*STANCES, DEVILS_ADVOCATE, NO_ROLE)


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
