"""``massgen-mcp steer ID "note"``: send a running team the user's note.

The run may be in this machine's other processes (a host's MCP server, a ``run`` in another
terminal: the note goes through the run's folder) or on a worker pool (``--redis``: through
Redis). Either way it goes through :meth:`ConsensusService.steer`, as the MCP tool does.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from massgen_mcp.cli import flags
from massgen_mcp.cli.output import EXIT_OK, say


def add_parser(sub: Any) -> None:
    steer = sub.add_parser(
        "steer", help="send a running team a note: every agent sees it next turn, and votes "
                      "cast before it no longer count")
    steer.add_argument("session_id", metavar="ID",
                       help="a running session's id, its first characters, or 'latest'")
    steer.add_argument("message", help="the note, e.g. 'use Python 3.12, not 3.8' (at most "
                                       "2,000 characters; 3 a minute)")
    flags.pool_arguments(steer)
    steer.set_defaults(func=cmd_steer)


def cmd_steer(args: argparse.Namespace) -> int:
    return asyncio.run(_steer(args))


async def _steer(args: argparse.Namespace) -> int:
    from massgen_mcp.service import ConsensusService

    pool = flags.pool(args)
    service = (await ConsensusService.pool(pool, flags.home(args)) if pool is not None
               else flags.service(args))
    try:
        session_id = service.find_session(args.session_id)
        cleared = await service.steer(session_id, args.message)
    finally:
        await service.aclose()
    say(f"delivered to {session_id}: every agent sees the note from its next turn"
        + (f"; {cleared} vote(s) cast before it no longer count" if cleared else ""))
    return EXIT_OK
