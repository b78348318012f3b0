"""``massgen-mcp serve``, ``worker``, ``doctor`` and ``install``: the long-running processes,
the survey of this machine, and adding massgen to an MCP host.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from massgen_mcp.cli import flags
from massgen_mcp.cli.output import EXIT_CANCELLED, EXIT_INPUT, EXIT_OK, err, say, say_json
from massgen_mcp.core.errors import ConfigError, PoolUnavailableError

if TYPE_CHECKING:
    from massgen_mcp.service.setup import SetupView


def cmd_doctor(args: argparse.Namespace) -> int:
    from massgen_mcp.service import ConsensusService

    async def survey() -> SetupView:
        pool = flags.pool(args)
        if pool is None:  # no pool: redis may not even be installed
            service = flags.service(args)
            try:
                return await service.check_setup()
            finally:
                await service.aclose()
        from redis.exceptions import RedisError

        from massgen_mcp.pool.live import redact_url, within

        service = await within(pool, "doctor", ConsensusService.pool(pool, flags.home(args)))
        try:
            return await service.check_setup()
        except RedisError as exc:  # a wrong password or address: say so, not a traceback
            raise PoolUnavailableError(
                f"the pool's Redis ({redact_url(pool.url)}) refused: {str(exc).rstrip('.')}; "
                "check the address and password in --redis (or MASSGEN_REDIS_URL)") from None
        finally:
            await service.aclose()

    setup = asyncio.run(survey())
    # A pool that could not be read (closed port, silent or frozen Redis) is a failed check:
    # the survey is still printed, and the exit code says it is incomplete.
    code = EXIT_INPUT if setup.mode == "pool" and setup.pool_problem else EXIT_OK
    if args.json:
        say_json(setup.model_dump_json(indent=2))
        return code
    say("API keys:      " + (", ".join(setup.providers_with_keys) or "none found"))
    clis = [f"{c.model} {c.version or '(version unknown)'} "
            f"({'logged in' if c.logged_in else 'not logged in'}, {c.path})"
            + (f" REFUSED: {c.refused}" if c.refused else "")
            for c in setup.coding_clis]
    say("coding CLIs:   " + ("; ".join(clis) or "none on PATH (claude, codex, gemini)"))
    servers = [f"{s.url} ({', '.join(s.models[:3])})" for s in setup.local_servers]
    say("local servers: " + ("; ".join(servers) or "none on the probed ports"))
    say("embedded:      " + (setup.embedded_model or "not installed"))
    say("default team:  " + (", ".join(setup.default_team) or "none"))
    say("  why:         " + setup.default_team_reason)
    say("records:       " + setup.storage)
    if setup.mode == "pool" and setup.pool_problem:
        say(f"runs:          on the worker pool at {setup.redis_url}; could not tell how many "
            f"workers are live: {setup.pool_problem}")
    elif setup.mode == "pool":
        say(f"runs:          on the worker pool at {setup.redis_url}; "
              f"{len(setup.workers)} worker(s) live"
              + (f" ({', '.join(setup.workers)})" if setup.workers else
                 ": start one with massgen-mcp worker --redis URL"))
    else:
        say("runs:          in this process (embedded; --redis URL for a worker pool)")
    say("HTTP token:    " + setup.http_token)
    say("versions:      " + ", ".join(f"{k} {v}" for k, v in setup.versions.items()))
    say("add more:      " + setup.how_to_add_more)
    return code


def cmd_install(args: argparse.Namespace) -> int:
    from massgen_mcp.cli.install import UVX_NOTE, install

    result = install(args.host, scope=args.scope, use_uvx=args.uvx, uvx_from=args.uvx_from,
                     dry_run=args.print, approve_tools=args.approve_tools)
    if args.print:
        if args.uvx and args.uvx_from is None:
            err(UVX_NOTE)  # stdout stays the entry alone
        say(f"# {result.path}")
        say(result.snippet, end="" if result.snippet.endswith("\n") else "\n")
        return EXIT_OK
    if not result.changed:
        say(f"{result.path}: already up to date")
    else:
        say(f"{result.path}: massgen {result.change}")  # added, or updated: it was there
        if result.backup:
            say(f"  previous version kept as {result.backup}")
    say(f"  {result.note}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from massgen_mcp.server.transports import serve_http, serve_stdio

    home = Path(args.home) if args.home else None
    pool = flags.pool(args)
    if args.http:
        try:
            serve_http(host=args.host, port=args.port, path=args.path, home=home,
                       api=args.api, pool=pool, tasks=args.tasks)
        except KeyboardInterrupt:
            # uvicorn stops on Ctrl-C, then raises it again for whoever called it: here, a
            # person at a terminal, who wants the prompt back, not the stack it unwound.
            err("serve stopped (Ctrl-C)")
            return EXIT_CANCELLED
    elif pool is not None:
        raise ConfigError("--redis: a pool front end serves over HTTP; add --http (hosts "
                          "that spawn a stdio server run it embedded)")
    else:
        from massgen_mcp._version import __version__
        from massgen_mcp.core.files import default_home

        records = (home or default_home()).resolve() / "sessions"
        # stderr: on stdio, stdout is the protocol. Hosts show this line in their MCP logs.
        say(f"massgen-mcp {__version__}: serving MCP on stdio; records and each run's "
            f"report.html in {records}; live session pages: massgen-mcp serve --http, then "
            "http://127.0.0.1:8765/sessions", err=True)
        serve_stdio(home, tasks=args.tasks)
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    pool = flags.pool(args)  # first: without the pool extra, the imports below would fail
    if pool is None:
        raise ConfigError("worker: give the pool's Redis with --redis redis://host:6379/0 "
                          "(or set MASSGEN_REDIS_URL)")
    if not 1 <= args.concurrency <= 1000:
        raise ConfigError("--concurrency: between 1 and 1000 runs at once")
    from massgen_mcp.core.loading import loading

    with loading():  # what is loaded lives as long as we do: no collection walks it again
        from massgen_mcp.pool.worker import PoolWorker
        from massgen_mcp.providers.registry import shared_router
        from massgen_mcp.records.store import SessionStore
        from massgen_mcp.server.transports import configure_logging

        home = Path(args.home) if args.home else None
        configure_logging(home, log_file=None)
        worker = PoolWorker(pool, SessionStore(home), shared_router(),
                            concurrency=args.concurrency)
    asyncio.run(worker.serve())
    return EXIT_OK


