"""The environment a coding CLI child gets (:func:`child_env`): the same for every call and
for the version probe (:mod:`.versions`), so a probe sees no key the CLI itself would not."""

from __future__ import annotations

import os

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.env import POOL_URL_ENV
from massgen_mcp.core.secrets import is_credential
from massgen_mcp.providers.cli.base import Cli

# The way to the network the user set for every program, password or not: the CLI needs it
# to reach its provider.
PROXY_VARS = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                        "https_proxy", "all_proxy"})
# Variables a CLI reads as "you are running inside another agent's session" (found in the
# binaries; Claude Code itself checks the same list to detect a parent agent). A child that sees
# them changes its behaviour or refuses to start.
NESTING_VARS = frozenset({
    "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_CHILD_SESSION",
    "CLAUDE_CODE_SESSION_ID", "CLAUDE_CODE_SSE_PORT", "CLAUDE_CODE_EXECPATH",
    "CLAUDE_CODE_TASK_LIST_ID", "CLAUDE_CODE_CHILD_NOTES_DIR", "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDE_AGENT_SDK_CLIENT_APP", "REPL_ID",
    "CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED", "CODEX_THREAD_ID", "CODEX_CI",
    "GEMINI_CLI", "GEMINI_CLI_IDE_SERVER_PORT", "GEMINI_CLI_IDE_WORKSPACE_PATH",
    "GEMINI_CLI_IDE_SERVER_STDIO_ARGS", "COPILOT_CLI", "CURSOR_AGENT", "JUNIE_DATA",
    "JUNIE_SHIM_PATH",
})

PLACEHOLDER_KEY = "no-key-needed"

def child_env(cli: Cli, agent: AgentSpec) -> dict[str, str]:
    """The environment a CLI child gets: ours without nesting markers and credentials, but
    the CLI's own login (its login token, its own vendor's API key, as in the user's shell);
    when the agent's config names a key or an endpoint, that key and endpoint instead."""
    key = agent.own_api_key()  # a CLI's own login is its provider's variable, kept below
    own_login = () if key or agent.base_url else cli.own_login_vars
    # By name and by value (:func:`is_credential`): another agent's api_key_env may be called
    # anything, and a URL with a password (the pool's Redis among them) is a credential
    # whatever it is called. The CLI's own variables are kept by name: their value may be
    # registered as a secret because an API agent of the same vendor resolved the same key.
    # The proxy variables are kept, password or not: the CLI needs them to reach anything.
    env = {name: value for name, value in os.environ.items()
           if name not in NESTING_VARS and name != POOL_URL_ENV
           and (name in own_login or name in PROXY_VARS or not is_credential(name, value))}
    env.update(cli.run_env)
    if not key and not agent.base_url:
        return env  # the CLI's own login
    # A self-hosted endpoint that needs no key still gets one, as with litellm: the CLIs
    # refuse to start without (and must not fall back to a key of the user's).
    key = key or PLACEHOLDER_KEY
    return env | cli.api_env(key, agent.base_url)
