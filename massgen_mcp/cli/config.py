"""``massgen-mcp validate`` and ``massgen-mcp trust``: look at a config file before it runs.

``validate`` prints the team a file describes, what would need consent, missing keys and
coding-agent CLIs, and (``--servers``, for a trusted file) what its MCP servers offer;
``trust`` records consent for a project's config (:mod:`massgen_mcp.team.consent`).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from massgen_mcp.cli.output import EXIT_INPUT, EXIT_OK, err, say
from massgen_mcp.core.spec import TeamConfig

if TYPE_CHECKING:
    from massgen_mcp.team.massgen_yaml import LoadedConfig


def cmd_validate(args: argparse.Namespace) -> int:
    from massgen_mcp.core.options import ROLE_NAMES
    from massgen_mcp.providers.preflight import of_file
    from massgen_mcp.team.consent import risks
    from massgen_mcp.team.massgen_yaml import read_config_file
    from massgen_mcp.team.presets import resolve_config_path

    loaded = read_config_file(resolve_config_path(args.file))
    team, warnings = loaded.team, loaded.warnings
    say(f"{args.file}: {len(team.agents)} agent(s)")
    for agent in team.agents:
        extras = [f"base_url={agent.base_url}"] if agent.base_url else []
        if agent.tool_calling is False:
            extras.append("json-fallback")
        if agent.cli:
            extras.append(f"coding-agent CLI{cli_version(agent.cli)} (read-only, JSON "
                          "decisions)")
        if agent.temperature is not None:
            extras.append(f"temperature={agent.temperature}")
        if agent.system_message:
            extras.append("persona")
        role = team.role_of(agent.id)
        if role:  # a name as it is, free text quoted on one short line
            shown = " ".join(role.split())
            shown = shown if len(shown) <= 40 else shown[:39] + "…"
            extras.append(f"role={role if role in ROLE_NAMES else repr(shown)}")
        if team.options.workspace_tools and agent.uses_native_tools():
            extras.append("tools=list_files,read_file,search_text")
        if agent.web_search:
            extras.append("web-search")
        if agent.mcp_servers:
            extras.append("mcp=" + ",".join(s.name for s in agent.mcp_servers)
                          + ("" if agent.uses_native_tools() else " (unused: no tool calling)"))
        say(f"  {agent.id}: {agent.model} {' '.join(extras)}".rstrip())
    say("  options: " + ", ".join(f"{k}={v}" for k, v in team.options.model_dump().items()))
    for warning in warnings:
        say(f"  warning: {warning}")
    for line in risks(team, loaded.expanded):
        say(f"  needs consent: {line} (as a project config, or named in a model's call, "
              "it runs only after 'massgen-mcp trust')")
    found = asyncio.run(of_file(team))  # every provider row's checks, as a run asks them
    for problem in found.warnings:  # what a run would refuse before it starts
        say(f"  warning: {problem}")
    for problem in found.errors:  # what no environment fixes: the run would not start
        err(f"{args.file}: {problem}")
    if found.errors:
        return EXIT_INPUT
    if team.mcp_servers() and args.servers:
        if not trusted(loaded):
            err(f"{args.file}: validate --servers starts the commands it names; run "
                 f"'massgen-mcp trust {args.file}' first")
            return EXIT_INPUT
        for line in asyncio.run(servers_cut(team)):
            say(f"  warning: {line}")
    elif team.mcp_servers():
        say("  (validate --servers starts its MCP servers and checks what they offer)")
    return EXIT_OK


def trusted(loaded: LoadedConfig) -> bool:
    """Whether the file needs no consent or has it: what it starts must wait for consent
    under validate as under a run."""
    from massgen_mcp.core.errors import UntrustedConfigError
    from massgen_mcp.team import consent

    try:
        consent.check(loaded.team, loaded.path, loaded.text, loaded.expanded)
    except UntrustedConfigError:
        return False
    return True


async def servers_cut(team: TeamConfig) -> list[str]:
    """Start the team's MCP servers, offer each agent its tools as a run would, stop them:
    one line per server that did not start and per thing the size caps cut."""
    from massgen_mcp.tools.mcp_servers import McpToolbox

    box = McpToolbox(team.mcp_servers())
    try:
        await box.start()
        for agent in team.agents:
            if agent.mcp_servers:
                box.specs_for([s.name for s in agent.mcp_servers], agent.allowed_tools,
                              agent.exclude_tools)
        return [f"MCP server {name} did not start: {why}"
                for name, why in box.failed().items()] + box.take_cut()
    finally:
        await box.aclose()


def cli_version(name: str) -> str:
    """`` 2.1.330``, the version of the installed CLI ``name``, else ``""``: validate shows
    the version a team's CLI agent would run."""
    from massgen_mcp.providers.cli.catalog import look_for

    cli = look_for(name)
    return f" {cli.version}" if cli and cli.version else ""


def cmd_trust(args: argparse.Namespace) -> int:
    from massgen_mcp.team import consent
    from massgen_mcp.team.discover import project_config_path
    from massgen_mcp.team.massgen_yaml import read_config_file

    path = Path(args.file) if args.file else project_config_path()
    if args.revoke:
        say(f"{path}: consent withdrawn" if consent.revoke(path)
              else f"{path}: was not trusted")
        return EXIT_OK
    loaded = read_config_file(path)
    where = consent.trust(path, loaded.text, loaded.expanded)
    say(f"{path}: trusted as it is now (any change to it or to the variables it reads asks "
          f"again); recorded in {where}")
    for line in consent.risks(loaded.team, loaded.expanded) or [
            "it needs no consent: no key, file or command of yours goes anywhere foreign"]:
        say(f"  {line}")
    return EXIT_OK


