"""Consent before a project's config may send your keys to a server it names.

A repository you clone can carry ``.massgen/config.yaml``. Its team runs with *your* keys, so a
config that points ``base_url`` at its own server and reads ``api_key_env: OPENAI_API_KEY``
would hand that server your key. The rule, like direnv's:

* a config that comes with the project (the discovered ``.massgen/config.yaml``, or a file an
  MCP caller names) is checked before it runs;
* it needs consent when an agent would send a key from your environment (``api_key_env`` or
  ``${VAR}``) to a ``base_url`` that is neither on loopback nor the provider's own API host;
* ``massgen-mcp trust PATH`` records consent for the file's exact contents (its SHA-256) in the
  user config folder; any change to the file asks again.

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

from massgen_mcp.config import TeamConfig
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


def key_destinations(team: TeamConfig) -> list[str]:
    """One line per agent that would send a key from the environment to a foreign host."""
    found = []
    for agent in team.agents:
        if not agent.api_key_env or not agent.base_url:
            continue
        host = (urlparse(agent.base_url).hostname or "").lower()
        if is_loopback(host) or host in PROVIDER_HOSTS.get(agent.provider, ()):
            continue
        found.append(f"agent {agent.id!r} would send ${agent.api_key_env} to {agent.base_url}")
    return found


def _trust_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir("massgen-mcp")) / "trusted.json"


def _trusted() -> dict[str, str]:
    try:
        data = json.loads(_trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check(team: TeamConfig, path: Path, text: str) -> None:
    """Raise UntrustedConfigError unless ``team`` (read from ``path``, whose contents are
    ``text``) sends no environment key abroad, or the user trusted these exact contents."""
    risks = key_destinations(team)
    if not risks or _trusted().get(str(path.resolve())) == digest(text):
        return
    raise UntrustedConfigError(
        f"{path} needs your consent before it runs: "
        + "; ".join(risks)
        + f". If you trust this file, run: massgen-mcp trust {path}")


def trust(path: Path, text: str) -> Path:
    """Record consent for ``path`` with exactly ``text``; returns the trust file."""
    file = _trust_file()
    entries = _trusted()
    entries[str(path.resolve())] = digest(text)
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
