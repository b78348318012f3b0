"""The MassGen config keys: those massgen-mcp implements, and those it knows but does not
implement, with what each does upstream.

:mod:`massgen_mcp.team.massgen_yaml` maps a file through these tables; keeping them here keeps
the mapping's code apart from the catalogue, which grows with every MassGen release.

A MassGen user who brings a config should get a run and a list of what was ignored, not a
refusal; a misspelling of a key we *do* implement is still an error with a suggestion, because
it would silently change the run. :func:`check_keys` applies that rule to one mapping:

* a key we implement: fine;
* a MassGen key from :data:`UPSTREAM`: a warning naming it and what it would have done upstream;
* close to a key we implement (difflib ratio >= 0.8): a problem, "did you mean ...?" (every
  problem of a file is reported at once, so the caller collects them);
* anything else: a warning (a newer MassGen key, or a key of another tool).

The catalogue was taken from MassGen's documentation and example configs (``basic/``,
``providers/``, ``tools/``) of releases 0.1.12 to 0.1.97.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

TYPO_CUTOFF = 0.8

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
CLI_IGNORED = {
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
CLI_SYSTEM_KEYS = ("system_prompt", "append_system_prompt")

# The keys we implement; MassGen's others are warned about (UPSTREAM, check_keys).
AGENT_KEYS = {"id", "backend", "system_message", "required", "role"}
BACKEND_KEYS = {
    "type", "model", "base_url", "api_key", "api_key_env",
    "temperature", "top_p", "max_tokens", "tool_calling",
    "mcp_servers", "allowed_tools", "exclude_tools", "enable_web_search",
}
ORCHESTRATOR_KEYS = {"max_new_answers_per_agent", "skip_final_presentation",
                     "final_answer_strategy", "coordination_mode", "context_paths",
                     "answer_novelty_requirement", "max_orchestration_restarts"}
# ``review``: the repository's review rules, read by massgen_mcp/review/rules.py (never
# expanded from the environment, and not part of the team).
TOP_KEYS = {"agents", "agent", "orchestrator", "timeout_settings", "options", "review"}
NOT_TEAM_KEYS = ("agents", "agent", "review")  # the keys whose values _options never reads

# MassGen keys that set one of our options directly: the key a problem with it is named by.
OPTION_KEYS = {
    "max_new_answers_per_agent": "max_answers_per_agent",
    "skip_final_presentation": "skip_final_presentation",
    "answer_novelty_requirement": "answer_novelty",
    "max_orchestration_restarts": "max_orchestration_restarts",
}

# Agent fields written under another name in a MassGen file (the others keep their names,
# under backend: except these two).
AGENT_RENAMED = {"web_search": "enable_web_search"}
AGENT_TOP = ("id", "system_message", "required")

# The MassGen keys we do not implement, by section, and what each does upstream.
UPSTREAM: dict[str, dict[str, str]] = {
    "top": {
        "ui": "terminal display settings",
        "display": "terminal display settings",
        "logging": "MassGen's log files",
        "memory": "persistent agent memory",
        "description": "a comment",
        "global_tools": "tools shared by every agent",
    },
    "agent": {
        "voting_sensitivity": "how readily this agent votes",
        "subagent_agents": "sub-agents this agent may spawn",
        "skills": "agent skills",
        "ui": "per-agent display settings",
    },
    "backend": {
        "enable_code_interpreter": "the provider's code interpreter",
        "enable_code_execution": "the provider's code execution",
        "enable_code_based_tools": "tools written as code",
        "enable_image_generation": "image generation",
        "enable_audio_generation": "audio generation",
        "enable_video_generation": "video generation",
        "enable_file_search": "the provider's file search",
        "upload_files": "files uploaded to the provider (images, audio, documents)",
        "cwd": "a writable workspace folder for the agent",
        "custom_tools": "Python tools registered for the agent",
        "reasoning": "reasoning effort settings",
        "text": "text verbosity settings",
        "instructions": "provider-side instructions",
        "enable_mcp_command_line": "a shell through MCP",
        "command_line_execution_mode": "where shell commands run",
        "command_line_docker_image": "the Docker image shell commands run in",
        "command_line_docker_enable_sudo": "sudo inside that Docker image",
        "max_retries": "the provider SDK's own retries (massgen-mcp: options.max_retries)",
        "chat_template_kwargs": "chat template switches of a vLLM/SGLang server",
        "extra_body": "extra fields sent with every request",
        "websocket_mode": "a WebSocket connection to the provider",
        "timeout": "the provider SDK's request timeout (massgen-mcp: call_timeout_s)",
        "include_reasoning": "the provider's reasoning text in the output",
        "enable_tool_search": "tool definitions deferred behind a search tool",
        "top_k": "top-k sampling",
        "min_p": "min-p sampling",
        "repetition_penalty": "a repetition penalty",
        "frequency_penalty": "a frequency penalty",
        "presence_penalty": "a presence penalty",
        "seed": "a sampling seed",
    },
    "orchestrator": {
        "snapshot_storage": "copies of agents' workspaces",
        "agent_temporary_workspace": "a shared read-only view of workspaces",
        "voting_sensitivity": "how readily agents vote",
        "voting_threshold": "the share of votes needed to win",
        "max_new_answers_global": "a cap on answers across all agents",
        "fairness_enabled": "answer-rate fairness between agents",
        "fairness_lead_cap_answers": "how far one agent may lead in answers",
        "max_midstream_injections_per_round": "updates pushed into agents mid-turn",
        "defer_peer_updates_until_restart": "holding peers' answers until a restart",
        "defer_voting_until_all_answered": "voting only once every agent answered",
        "disable_injection": "no mid-turn updates",
        "skip_voting": "no voting round",
        "skip_coordination_rounds": "answers without coordination",
        "presenter_agent": "a fixed agent that writes the final answer",
        "coordination": "planning and task-decomposition settings",
        "session_storage": "where MassGen keeps sessions",
        "timeout": "orchestrator timeouts (massgen-mcp: timeout_settings)",
        "dspy": "DSPy question paraphrasing for diversity",
        "enable_planning_mode": "agents plan before acting",
        "use_two_tier_workspaces": "separate scratch and deliverable folders",
    },
    "timeout_settings": {
        "initial_round_timeout_seconds": "a time limit on the first round",
        "subsequent_round_timeout_seconds": "a time limit on later rounds",
        "round_timeout_grace_seconds": "grace after a round's time limit",
        "agent_timeout_seconds": "a time limit per agent",
    },
}


def check_keys(mapping: Iterable[str], where: str, section: str, implemented: Iterable[str],
               warnings: list[str], problems: list[str], *,
               reasons: dict[str, str] | None = None) -> None:
    """Apply the rule above to the keys of one mapping, adding to ``warnings`` and
    ``problems``. ``where`` prefixes messages (``agents[0].backend``); ``reasons`` replaces
    the upstream note for some keys (what a CLI agent does instead)."""
    implemented = set(implemented)
    upstream = UPSTREAM[section]
    prefix = f"{where}." if where else ""
    for key in mapping:
        key = str(key)
        if key in implemented:
            continue
        if reasons and key in reasons:
            warnings.append(f"{prefix}{key}: ignored ({reasons[key]})")
        elif key in upstream:
            warnings.append(f"{prefix}{key}: ignored (MassGen: {upstream[key]}; not in "
                            "massgen-mcp)")
        elif close := difflib.get_close_matches(key, sorted(implemented), n=1,
                                                cutoff=TYPO_CUTOFF):
            problems.append(f"{prefix}{key}: unknown key; did you mean {close[0]!r}?")
        else:
            warnings.append(f"{prefix}{key}: not a key massgen-mcp knows; ignored")
