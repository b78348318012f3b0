"""The environment a coding CLI child gets (:func:`child_env`): the same for every call and
for the version probe (:mod:`.versions`), so a probe sees no key the CLI itself would not."""

from __future__ import annotations

import os
import re

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.env import POOL_URL_ENV
from massgen_mcp.core.secrets import carries_credential, has_key_shape, looks_secret
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

# Names that hold a credential beyond looks_secret's (*KEY*, *TOKEN*, *SECRET*, *PASSWORD*,
# *CRED*): REDISCLI_AUTH, DB_PASS, SMTP_PASSWD, GPG_PASSPHRASE, SENTRY_DSN, *_COOKIE,
# *_SESSION, *_CONNECTION_STRING (Azure's holds AccountKey=...), *_PRIVATE.
_CREDENTIAL_NAME = re.compile(
    r"(?:^|_)(?:PASS|PASSWD|PASSPHRASE|PASSCODE|PW|AUTH|AUTHORIZATION|DSN|COOKIE|SESSION|"
    r"CONNECTION_STRING|CONN_STR|PRIVATE|SIGNATURE|OTP)(?:_|$)", re.IGNORECASE)
# ... kept all the same: a path to the SSH agent's socket (git over SSH), not a credential.
_NOT_CREDENTIALS = frozenset({"SSH_AUTH_SOCK"})
# Values shaped like a credential, whatever their name, beyond the token shapes redaction
# knows (core.secrets.has_key_shape): a JWT, a PEM private key, a basic/bearer header, a URL
# carrying a bare token as its user (https://TOKEN@host). A URL with a password is
# carries_credential's.
_CREDENTIAL_VALUE = re.compile(
    r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|^(?:Basic|Bearer)\s+\S{12,}"
    r"|://[^\s/?#@:]{16,}@")


def is_credential(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` must not reach a child: by its name (as
    :func:`looks_secret` and more) or by its value (a registered key, a URL with a password,
    a known token shape), so a credential under an unexpected name stays behind too."""
    if name in _NOT_CREDENTIALS:
        return False
    return (looks_secret(name) or _CREDENTIAL_NAME.search(name) is not None
            or carries_credential(value) or has_key_shape(value)
            or _CREDENTIAL_VALUE.search(value) is not None)


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
