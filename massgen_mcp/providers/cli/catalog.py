"""The supported CLIs (:data:`CLIS`) and which of them this machine has: where each is
installed, its version (and why it is refused, if it is: :mod:`.versions`) and whether it
looks logged in (never a token read, never a network call)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.cli import claude, codex, gemini, versions
from massgen_mcp.providers.cli.base import Cli

CLIS: dict[str, Cli] = {cli.name: cli for cli in (claude.CLI, codex.CLI, gemini.CLI)}


def find_executable(cli: Cli) -> str | None:
    """The CLI's path: ``MASSGEN_<NAME>_PATH`` if set (e.g. a pinned install), else PATH;
    None unless it is an executable file."""
    path = os.environ.get(f"MASSGEN_{cli.name.upper()}_PATH") or shutil.which(cli.executable)
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


@dataclass(frozen=True)
class FoundCli:
    name: str
    vendor: str
    path: str
    logged_in: bool
    version: str | None  # None: it did not say
    refused: str | None  # why it cannot sit on a team (one line), else None


def find_clis() -> list[FoundCli]:
    """The supported CLIs on this machine, in :data:`CLIS` order (``MASSGEN_CLIS``, e.g.
    ``claude,codex`` or ``none``, limits which are looked for). A login held in the environment
    (Claude Code's ``CLAUDE_CODE_OAUTH_TOKEN``, a vendor's own API key) counts; its value is
    not read. Blocking: may start each CLI once to learn its version."""
    wanted = SETTINGS.clis.read() or tuple(CLIS)
    return [found for name in CLIS if name in wanted and (found := look_for(name))]


def look_for(name: str) -> FoundCli | None:
    """The CLI ``name`` if it is installed, with its version (asked once per binary) and
    whether it looks logged in. Blocking: may start the CLI."""
    cli = CLIS[name]
    path = find_executable(cli)
    if path is None:
        return None
    logged_in = cli.login_state() or any(os.environ.get(n) for n in cli.own_login_vars)
    found, refused = versions.check_now(cli, path)
    return FoundCli(cli.name, cli.vendor, path, logged_in,
                    found.version if found else None, refused)


def unusable(team: TeamConfig) -> list[str] | None:
    """When every agent of ``team`` is a coding-agent CLI this machine cannot start (not
    installed) or that is not logged in (no login, no key of its own or from the config, no
    ``base_url`` of a server that needs none),
    one line per agent naming what is missing and how to get it; else None. Such a run
    could only drop every agent at its first turn; a team with one usable member runs, and
    drops the others with the same words. Never a token read, never a network call."""
    lines = []
    for agent in team.agents:
        cli = CLIS.get(agent.cli or "")
        if cli is None:  # not a CLI agent, or a name none runs (preflight names it)
            return None
        if find_executable(cli) is None:
            lines.append(f"agent {agent.id!r} ({agent.model}): the {cli.executable!r} command "
                         f"is not installed (on PATH or MASSGEN_{cli.name.upper()}_PATH); "
                         f"install {cli.title} with: npm install -g {cli.package}, then run "
                         f"{cli.executable!r} once to log in")
        elif not (cli.login_state() or any(os.environ.get(n) for n in cli.own_login_vars)
                  or agent.api_key is not None or agent.api_key_env or agent.base_url):
            lines.append(f"agent {agent.id!r} ({agent.model}): {cli.title} is installed but "
                         f"not logged in; run {cli.executable!r} once to log in, or set "
                         f"{' or '.join(cli.own_login_vars)}")
        else:
            return None
    return lines or None


def not_ready(team: TeamConfig) -> list[str]:
    """One line per CLI agent whose CLI is not installed, or is installed in a version that
    runs but does not look logged in while no key is given: what ``validate`` warns of each
    agent (a run is refused only when no agent can run at all, :func:`unusable`)."""
    problems = []
    for agent in team.agents:
        if not agent.cli:
            continue
        cli = look_for(agent.cli)
        if cli is None:
            problems.append(f"agent {agent.id!r} ({agent.model}): the {agent.cli!r} command is "
                            f"not on PATH; install it and log in, or set "
                            f"MASSGEN_{agent.cli.upper()}_PATH")
        elif (not cli.refused and not cli.logged_in
              and not (agent.api_key or agent.api_key_env or agent.base_url)):
            problems.append(f"agent {agent.id!r} ({agent.model}): {CLIS[agent.cli].executable} "
                            "does not look logged in; run it once and log in")
    return problems


async def refused(team: TeamConfig) -> list[tuple[AgentSpec, str]]:
    """Each CLI agent of ``team`` whose installed CLI cannot run read-only, with why (a CLI
    that is not installed is the run's to report, as a dropped agent)."""
    found = []
    for agent in team.agents:
        cli = CLIS.get(agent.cli or "")  # a name none runs: preflight names it
        path = find_executable(cli) if cli else None
        if cli and path:
            _, why = await versions.check(cli, path)
            if why:
                found.append((agent, why))
    return found


async def refusals(team: TeamConfig) -> list[str]:
    """One line per CLI agent of ``team`` whose installed CLI cannot run read-only, so a run
    is refused before it starts rather than losing the agent in it."""
    return [f"agent {agent.id!r} ({agent.model}): {why}" for agent, why in await refused(team)]
