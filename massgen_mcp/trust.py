"""Consent before a project's config may send your keys to a server it names.

A repository you clone can carry ``.massgen/config.yaml``. Its team runs with *your* keys, so a
config that points ``base_url`` at its own server and reads ``api_key_env: OPENAI_API_KEY``
would hand that server your key. The rule, like direnv's:

* a config that comes with the project (the discovered ``.massgen/config.yaml``, or a file an
  MCP caller names) is checked before it runs;
* it needs consent when an agent would send a key from your environment (``api_key_env`` or
  ``${VAR}``) to a ``base_url`` that is neither on loopback nor the provider's own API host, or
  another provider's key to any host, or when the file copies any other environment variable
  (``${VAR}``) into a field such as ``base_url`` or a prompt, or when it starts MCP servers
  (a command of the file's choosing);
* ``massgen-mcp trust PATH`` records consent for the file's exact contents and the values it
  reads from the environment (one SHA-256) in the user config folder; any change asks again;
* a ``base_url`` passed with an MCP call may not redirect an agent that sends a key from your
  environment (:func:`check_override`).

Keys written inline in the file belong to its author, and agents without a ``base_url`` talk to
their provider's own API, so neither needs consent. Your own user config and the CLI's
``--config`` (you named it at your shell) are trusted.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path
from urllib.parse import urlparse

from massgen_mcp.config import CLI_PROVIDERS, PROVIDER_KEY_ENV, TeamConfig
from massgen_mcp.env import getenv, user_config_dir
from massgen_mcp.errors import ConfigError
from massgen_mcp.sessions.store import atomic_write

# The API host of each provider whose key variable we know (litellm's defaults).
PROVIDER_HOSTS: dict[str, tuple[str, ...]] = {
    "openai": ("api.openai.com",),
    "anthropic": ("api.anthropic.com",),
    "gemini": ("generativelanguage.googleapis.com",),
    "xai": ("api.x.ai",),
    "openrouter": ("openrouter.ai",),
    "groq": ("api.groq.com",),
    "deepseek": ("api.deepseek.com",),
    "mistral": ("api.mistral.ai",),
    "together_ai": ("api.together.xyz",),
    "fireworks_ai": ("api.fireworks.ai",),
    "cerebras": ("api.cerebras.ai",),
    "zai": ("api.z.ai",),
    "moonshot": ("api.moonshot.ai", "api.moonshot.cn"),
    "nebius": ("api.studio.nebius.ai", "api.studio.nebius.com"),
}


class UntrustedConfigError(ConfigError):
    """A project config would send a key from the user's environment to a foreign host."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host(url: str) -> str:
    try:
        return (urlparse(url).hostname or "").lower()
    except ValueError:  # not a URL any resolver agrees on: treat it as foreign
        return ""


def key_destinations(team: TeamConfig) -> list[str]:
    """One line per agent that would send a key from the environment somewhere other than
    loopback or its own provider's API (another provider's key counts as foreign too)."""
    found = []
    for agent in team.agents:
        if not agent.api_key_env:
            continue
        # A CLI agent's key goes to its CLI's vendor (Claude Code: Anthropic's API).
        own = CLI_PROVIDERS[agent.cli] if agent.cli else agent.provider
        own_hosts = PROVIDER_HOSTS.get(own, ())
        host = _host(agent.base_url) if agent.base_url else (own_hosts[0] if own_hosts else "")
        if agent.base_url and is_loopback(host):
            continue
        others_key = any(agent.api_key_env in names for provider, names
                         in PROVIDER_KEY_ENV.items() if provider != own)
        if host in own_hosts and not others_key:
            continue
        where = agent.base_url or f"the {own or 'default'} API"
        found.append(f"agent {agent.id!r} would send ${agent.api_key_env} to {where}")
    return found


def risks(team: TeamConfig, expanded: list[tuple[str, str]]) -> list[str]:
    """What in a config needs consent: keys sent abroad, and environment values the file
    copies into its fields (a URL or a prompt could carry them anywhere)."""
    servers = [f"it starts the MCP server {s.name!r}: {s.describe()}"
               for s in team.mcp_servers()]
    return key_destinations(team) + servers + [
        f"{where} reads ${name} from your environment" for name, where in expanded]


def _trust_file() -> Path:
    return user_config_dir() / "trusted.json"


def _trusted() -> dict[str, str]:
    try:
        data = json.loads(_trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def digest(text: str, expanded: list[tuple[str, str]]) -> str:
    """The file's contents and the values it reads from the environment: consent covers
    both, so a changed variable (a new ``.env``) asks again."""
    values = {name: getenv(name) or "" for name, _ in expanded}
    return hashlib.sha256((text + "\0" + json.dumps(values, sort_keys=True)).encode()
                          ).hexdigest()


def check(team: TeamConfig, path: Path, text: str, expanded: list[tuple[str, str]]) -> None:
    """Raise UntrustedConfigError unless ``team`` (read from ``path``, whose contents are
    ``text``, expanding ``expanded``) needs no consent, or the user trusted exactly this."""
    found = risks(team, expanded)
    if not found or _trusted().get(str(path.resolve())) == digest(text, expanded):
        return
    raise UntrustedConfigError(
        f"{path} needs your consent before it runs: " + "; ".join(found)
        + f". If you trust this file, run: massgen-mcp trust {path}")


def trust(path: Path, text: str, expanded: list[tuple[str, str]]) -> Path:
    """Record consent for ``path`` as it is now; returns the trust file."""
    file = _trust_file()
    entries = _trusted()
    entries[str(path.resolve())] = digest(text, expanded)
    file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(file, json.dumps(entries, indent=2) + "\n")
    return file


def revoke(path: Path) -> bool:
    """Forget consent for ``path``; False if there was none."""
    entries = _trusted()
    if entries.pop(str(path.resolve()), None) is None:
        return False
    atomic_write(_trust_file(), json.dumps(entries, indent=2) + "\n")
    return True


def check_override(before: TeamConfig, after: TeamConfig, base_url: str) -> None:
    """Refuse a caller's ``base_url`` that would receive a key from the user's environment
    (the calling model may have been steered by the repository it reads)."""
    moved = [b for a, b in zip(before.agents, after.agents, strict=True)
             if a.base_url != b.base_url]
    found = key_destinations(TeamConfig(agents=moved)) if moved else []
    if found:
        raise UntrustedConfigError(
            f"base_url {base_url}: " + "; ".join(found) + ". A base_url given in the call "
            "cannot receive a key from your environment; set it in the config file and trust "
            "the file (massgen-mcp trust FILE) instead")
