"""What the shared flags name: the record folder (``--home``), the service that every command
goes through, and the worker pool (``--redis``).

Kept apart from the commands so that each command module builds its service the same way:
files (``--config``, ``--context-file``) are read relative to the working directory and,
unlike the MCP server's, not confined to it, because the caller is the user.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.settings import SETTINGS

if TYPE_CHECKING:
    from massgen_mcp.pool.live import PoolConfig
    from massgen_mcp.service import ConsensusService

# What the ``pool`` extra installs that the pool imports (fastmcp-tasks brings the others).
POOL_MODULES = ("docket", "redis", "fastmcp_tasks")


def home(args: argparse.Namespace) -> Path | None:
    """The record folder ``--home`` names (None: ``$MASSGEN_HOME`` or ./.massgen)."""
    return Path(args.home) if args.home else None


def service(args: argparse.Namespace, *, drafts: bool = False,
            root: Path | None = None) -> ConsensusService:
    """The service, running in this process, reading the user's files unconfined;
    ``drafts`` for a command that shows the agents' live drafts (models then stream);
    ``root``: the project's folder when it is not the working directory (a review's
    repository, whose records are in it)."""
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    return ConsensusService.local(home(args), Workspace(root or Path.cwd(), confined=False),
                                  drafts=drafts)


def pool(args: argparse.Namespace) -> PoolConfig | None:
    """The worker pool named by --redis (or $MASSGEN_REDIS_URL), if any."""
    from massgen_mcp.pool.live import PoolConfig

    url = getattr(args, "redis", None) or SETTINGS.redis_url.read()
    if not url:
        return None
    require_pool_extra()
    return PoolConfig(url, name=args.pool_name,
                      redelivery_timeout_s=getattr(args, "redelivery_timeout", 30.0),
                      insecure=args.insecure_redis)


def require_pool_extra() -> None:
    """A pool needs the ``pool`` extra (Docket, Redis, the MCP tasks extension); without it,
    one line that says how to install it, not an ImportError's traceback from deep inside."""
    import importlib.util

    missing = []
    for module in POOL_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or half-removed install
            found = False
        if not found:
            missing.append(module)
    if missing:
        raise ConfigError(f"--redis (or MASSGEN_REDIS_URL): a worker pool needs "
                          f"{', '.join(missing)}, which this install lacks; install them "
                          "with: pip install 'massgen-mcp[pool]'")


def team_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that choose a run's team (``run``, ``review``): --models or --config, and
    --base-url."""
    team = parser.add_mutually_exclusive_group()
    team.add_argument("--models", help="comma-separated litellm models, e.g. "
                                       "openai/gpt-4o-mini,anthropic/claude-haiku-4-5")
    team.add_argument("--config", help="MassGen-format YAML file, or @preset")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint for agents without one")


def protocol_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that change the protocol's rules for one run (``run``, ``review``;
    docs/protocol.md)."""
    parser.add_argument("--no-self-vote", dest="self_vote", action="store_false",
                        default=None,
                        help="an agent may not vote for its own answer (unless it is the only "
                             "one)")
    parser.add_argument("--depth", choices=("full", "auto"),
                        help="auto: the two cheapest members first; the rest are called only "
                             "if they do not agree in round one (default: full)")
    parser.add_argument("--require", metavar="AGENT", action="append",
                        help="the majority may not decide before this agent's first answer "
                             "has joined the review (repeat, or comma-separate, for several); "
                             "e.g. --require agent_b")


def role_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that give the agents roles (options.roles, in the team's order): --roles
    for a comma-separated list of short ones, or --role once per agent for text that holds
    commas."""
    roles = parser.add_mutually_exclusive_group()
    roles.add_argument("--roles", metavar="ROLE,...",
                       help="one role per agent, in the team's order: for, against, neutral, "
                            "devils_advocate, none, or a few words of your own (fewer "
                            "roles than agents: the rest have none)")
    roles.add_argument("--role", action="append", metavar="TEXT",
                       help="one agent's role, any text (commas too); repeat it, once per "
                            "agent in order")


def pool_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that name a worker pool (doctor, serve, worker)."""
    parser.add_argument("--redis", metavar="URL",
                        help="a worker pool's Redis, e.g. redis://localhost:6379/0 (default: "
                             "$MASSGEN_REDIS_URL; none: runs in this process)")
    parser.add_argument("--pool-name", default="massgen",
                        help="the pool's name in Redis (default massgen)")
    parser.add_argument("--insecure-redis", action="store_true",
                        help="accept a Redis on another host that has no password (anyone "
                             "who reaches it can start, cancel and read runs)")
