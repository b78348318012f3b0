"""The ``massgen-mcp`` command: a thin shell over the consensus service.

``massgen-mcp`` with no command serves MCP over stdio (what hosts spawn). Everything else
is a subcommand; see ``massgen-mcp --help``. ``run``, ``show``, ``sessions`` and ``doctor`` go
through :class:`~massgen_mcp.service.ConsensusService`, the same door as the MCP tools; this
module only turns flags into a :class:`~massgen_mcp.core.spec.RunSpec` and records into text.
Exit codes: 0 ok, 1 config or input error, 2 execution error (all agents failed), 3 timed out,
4 cancelled or interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from massgen_mcp._version import __version__
from massgen_mcp.core.edges import check_text
from massgen_mcp.core.errors import (
    ConfigError,
    ListenError,
    MassgenError,
    PoolUnavailableError,
    RecordWriteError,
)
from massgen_mcp.core.files import default_home
from massgen_mcp.core.records import Event, EventType, ResultRecord, RunStatus
from massgen_mcp.core.secrets import RedactingFormatter, redact
from massgen_mcp.core.spec import (
    RunOptions,
    RunSpec,
    TeamConfig,
    check_question,
    format_validation_error,
)
from massgen_mcp.sessions.store import SessionStore

if TYPE_CHECKING:
    from massgen_mcp.pool.live import PoolConfig
    from massgen_mcp.service import ConsensusService, SetupView
    from massgen_mcp.team.massgen_yaml import LoadedConfig

EXIT_OK, EXIT_INPUT, EXIT_EXECUTION, EXIT_TIMEOUT, EXIT_CANCELLED = 0, 1, 2, 3, 4
EXIT_USAGE = 5  # the command line itself is wrong (argparse's own 2 would read as execution)
EXIT_LISTEN = 6  # serve --http cannot listen: the port is busy or the host is not ours
EXIT_BY_STATUS = {
    RunStatus.COMPLETED: EXIT_OK,
    RunStatus.FAILED: EXIT_EXECUTION,
    RunStatus.TIMED_OUT: EXIT_TIMEOUT,
    RunStatus.CANCELLED: EXIT_CANCELLED,
    RunStatus.INTERRUPTED: EXIT_CANCELLED,
}
JSON_SUMMARY_KEYS = ("session_id", "status", "finish_reason", "winner", "final_answer", "tally",
                     "timed_out", "budget_exceeded", "usage", "errors")


def _say(text: str = "", *, err: bool = False, end: str = "\n") -> None:
    """Write one line for a person: every line the CLI writes comes through here, because
    what it shows (record fields, config fields, a server's model names) may come from
    anyone's files, and a terminal obeys control characters rather than showing them
    (:func:`~massgen_mcp.render.text.terminal_safe`). ``--json`` output goes through
    :func:`_say_json`."""
    from massgen_mcp.core.edges import terminal_safe

    print(terminal_safe(text), end=end, file=sys.stderr if err else sys.stdout, flush=err)


def _say_json(text: str) -> None:
    """Write JSON text, its control characters as ``\\uXXXX`` escapes: the same JSON for a
    program, nothing for a terminal to obey."""
    from massgen_mcp.core.edges import json_terminal_safe

    print(json_terminal_safe(text))


def _err(message: str) -> None:
    _say(f"massgen-mcp: {message}", err=True)


def _home(args: argparse.Namespace) -> Path | None:
    return Path(args.home) if args.home else None


def _store(args: argparse.Namespace) -> SessionStore:
    return SessionStore(_home(args) or default_home())


def _service(args: argparse.Namespace) -> ConsensusService:
    """The service, reading files (``--config``, ``--context-file``) relative to the working
    directory and, unlike the MCP server's, not confined to it: the caller is the user."""
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    return ConsensusService.local(_home(args), Workspace(Path.cwd(), confined=False))


def _spec(args: argparse.Namespace) -> RunSpec:
    """The run the flags describe."""
    given = args.question
    if given == "-":  # undecodable bytes are kept, so check_question can name them
        given = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    question = check_question(given)
    options: dict[str, Any] = {}
    for flag, option in (("timeout", "timeout_s"), ("max_cost", "max_cost_usd"),
                         ("max_tokens", "max_total_tokens")):
        if getattr(args, flag) is not None:
            options[option] = getattr(args, flag)
    try:
        run_options = RunOptions(**options)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "options.")) from None
    return RunSpec(question=question, models=args.models.split(",") if args.models else None,
                   config=args.config, base_url=args.base_url, context=args.context,
                   context_files=args.context_file or [], options=run_options)


def _progress(_session_id: str, event: Event) -> None:
    from massgen_mcp.render.text import describe_event

    line = describe_event(event)  # events reach listeners masked; redact again, cheaply
    if line:
        _say(redact(line), err=True)


async def _run(args: argparse.Namespace, spec: RunSpec) -> tuple[ResultRecord, Path]:
    service = _service(args)
    if not args.quiet:
        service.add_event_listener(_progress)
    try:
        started = await service.start(spec)
        for note in started.notes:
            _err(note)
        if not args.quiet:
            _say(f"session {started.session_id} · record in {started.record_dir}", err=True)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(
            service.cancel(started.session_id)))
        await service.wait(started.session_id, None, until_done=True)
        return await service.result(started.session_id), started.record_dir
    finally:
        await service.aclose()  # Ctrl-C: the run is cancelled and its record closed


def cmd_run(args: argparse.Namespace) -> int:
    spec = _spec(args)
    try:
        result, folder = asyncio.run(_run(args, spec))
    except KeyboardInterrupt:
        return EXIT_CANCELLED
    if args.json:
        data = result.model_dump(mode="json")
        summary = {key: data[key] for key in JSON_SUMMARY_KEYS}
        summary["cost"] = result.usage.cost_usd
        summary["session_dir"] = str(folder)
        _say_json(redact(json.dumps(summary, ensure_ascii=False, indent=2)))
    elif result.final_answer is not None:
        _say(redact(result.final_answer))
    if result.status is not RunStatus.COMPLETED or result.budget_exceeded:
        _err(f"run ended {result.status} ({result.finish_reason}); record: {folder}")
        for problem in result.errors:
            _err(f"  {problem}")
    return EXIT_BY_STATUS[result.status]


def cmd_eval(args: argparse.Namespace) -> int:
    from massgen_mcp.cli.evaluate import evaluate, format_table, load_questions

    if args.questions == "@sample":
        path = Path(__file__).parent.parent / "data" / "eval_sample.jsonl"
    else:
        path = Path(args.questions)
        if not path.is_file():
            raise ConfigError(f"questions: {args.questions!r} is not a file (a JSONL file of "
                              "{\"question\", \"answer\"} lines, or @sample)")
    items = load_questions(path)
    options = RunOptions(timeout_s=args.timeout) if args.timeout else None
    team = {"models": args.models.split(",") if args.models else None, "config": args.config}
    service = _service(args)
    name = args.name or f"{path.stem}-{(args.config or args.models or 'default').strip('@')}"
    folder = service.store.sessions_dir.parent / "evals" / re.sub(r"[^\w.\-]+", "_", name)

    def progress(index: int, row: dict[str, Any]) -> None:
        mark = "right" if row["consensus"]["correct"] else "wrong"
        _err(f"[{index + 1}/{len(items)}] consensus {mark}: {row['question'][:60]}")

    async def go() -> Any:
        try:
            return await evaluate(service, items, folder,
                                  lambda q: RunSpec(question=q, options=options, **team),
                                  progress)
        finally:
            await service.aclose()

    try:
        evaluation = asyncio.run(go())
    except KeyboardInterrupt:
        _err(f"interrupted; run the same command again to resume ({folder})")
        return EXIT_CANCELLED
    _say(format_table(evaluation.summary()))
    _err(f"results: {folder / 'results.json'}; summary: {folder / 'summary.html'}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from massgen_mcp.core.spec import missing_credentials
    from massgen_mcp.team.consent import risks
    from massgen_mcp.team.massgen_yaml import read_config_file, resolve_config_path

    loaded = read_config_file(resolve_config_path(args.file))
    team, warnings = loaded.team, loaded.warnings
    _say(f"{args.file}: {len(team.agents)} agent(s)")
    for agent in team.agents:
        extras = [f"base_url={agent.base_url}"] if agent.base_url else []
        if agent.tool_calling is False:
            extras.append("json-fallback")
        if agent.cli:
            extras.append("coding-agent CLI (read-only, JSON decisions)")
        if agent.temperature is not None:
            extras.append(f"temperature={agent.temperature}")
        if agent.system_message:
            extras.append("persona")
        if team.options.workspace_tools and agent.uses_native_tools():
            extras.append("tools=list_files,read_file,search_text")
        if agent.web_search:
            extras.append("web-search")
        if agent.mcp_servers:
            extras.append("mcp=" + ",".join(s.name for s in agent.mcp_servers)
                          + ("" if agent.uses_native_tools() else " (unused: no tool calling)"))
        _say(f"  {agent.id}: {agent.model} {' '.join(extras)}".rstrip())
    _say("  options: " + ", ".join(f"{k}={v}" for k, v in team.options.model_dump().items()))
    for warning in warnings:
        _say(f"  warning: {warning}")
    for line in risks(team, loaded.expanded):
        _say(f"  needs consent: {line} (as a project config, or named in a model's call, "
              "it runs only after 'massgen-mcp trust')")
    for problem in missing_credentials(team) + cli_problems(team):
        _say(f"  warning: {problem}")
    if team.mcp_servers() and args.servers:
        if not trusted(loaded):
            _err(f"{args.file}: validate --servers starts the commands it names; run "
                 f"'massgen-mcp trust {args.file}' first")
            return EXIT_INPUT
        for line in asyncio.run(servers_cut(team)):
            _say(f"  warning: {line}")
    elif team.mcp_servers():
        _say("  (validate --servers starts its MCP servers and checks what they offer)")
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


def cli_problems(team: TeamConfig) -> list[str]:
    """One line per CLI agent whose CLI is missing, or not logged in while no key is given."""
    from massgen_mcp.providers.cli.catalog import CLIS, look_for

    problems = []
    for agent in team.agents:
        if not agent.cli:
            continue
        cli = look_for(agent.cli)
        if cli is None:
            problems.append(f"agent {agent.id!r} ({agent.model}): the {agent.cli!r} command is "
                            f"not on PATH; install it and log in, or set "
                            f"MASSGEN_{agent.cli.upper()}_PATH")
        elif not cli.logged_in and not (agent.api_key or agent.api_key_env or agent.base_url):
            problems.append(f"agent {agent.id!r} ({agent.model}): {CLIS[agent.cli].executable} "
                            "does not look logged in; run it once and log in")
    return problems


def cmd_trust(args: argparse.Namespace) -> int:
    from massgen_mcp.team import consent
    from massgen_mcp.team.discover import project_config_path
    from massgen_mcp.team.massgen_yaml import read_config_file

    path = Path(args.file) if args.file else project_config_path()
    if args.revoke:
        _say(f"{path}: consent withdrawn" if consent.revoke(path)
              else f"{path}: was not trusted")
        return EXIT_OK
    loaded = read_config_file(path)
    where = consent.trust(path, loaded.text, loaded.expanded)
    _say(f"{path}: trusted as it is now (any change to it or to the variables it reads asks "
          f"again); recorded in {where}")
    for line in consent.risks(loaded.team, loaded.expanded) or [
            "it needs no consent: no key, file or command of yours goes anywhere foreign"]:
        _say(f"  {line}")
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    service = _service(args)
    sessions, _ = service.list_sessions(
        RunStatus(args.status) if args.status else None, args.limit)
    if args.json:
        _say_json(json.dumps([{**s.__dict__, "status": str(s.status)} for s in sessions],
                             indent=2))
        return EXIT_OK
    if not sessions:
        _say(f"no sessions in {service.store.sessions_dir}")
    for s in sessions:
        question = " ".join(s.question.split())[:60]
        _say(f"{s.session_id}  {s.status:<11} {s.winner or '-':<4} {question}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from massgen_mcp.render.text import coordination_table, describe_event

    service = _service(args)
    if args.html:
        path = service.write_report(args.session_id)
        _say(str(path))
        if args.open:
            import webbrowser

            webbrowser.open(path.as_uri())
        return EXIT_OK
    record = service.record(args.session_id)
    status, result = record.status, record.result
    if args.json:
        _say_json((result or status).model_dump_json(indent=2))
        return EXIT_OK
    _say(f"session  {args.session_id}  ({status.status}, {status.finish_reason})")
    _say(f"question {status.question}")
    _say(f"record   {service.store.folder(args.session_id)}")
    if result and result.winner:
        w = result.winner
        _say(f"winner   {w.label} by {w.agent_id} ({w.model}), tally {result.tally}")
    usage = (result or status).usage
    _say(f"usage    {usage.calls} calls, {usage.prompt_tokens} prompt + "
          f"{usage.completion_tokens} completion tokens, cost {usage.cost_usd}")
    _say()
    _say(coordination_table(record.events, list(status.agents)))
    tool_lines = [describe_event(e) for e in record.events if e.type is EventType.TOOL_CALL]
    if tool_lines:
        _say("\ntool calls")
        for line in tool_lines:
            _say(f"  {line or ''}")
    if result and result.final_answer is not None:
        _say("\n" + result.final_answer)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from massgen_mcp.service import ConsensusService

    async def survey() -> SetupView:
        from redis.exceptions import RedisError

        from massgen_mcp.pool.live import redact_url

        pool = _pool(args)
        service = (await ConsensusService.pool(pool, _home(args)) if pool
                   else _service(args))
        try:
            return await service.check_setup()
        except RedisError as exc:  # a wrong password or address: say so, not a traceback
            assert pool is not None
            raise PoolUnavailableError(
                f"the pool's Redis ({redact_url(pool.url)}) refused: {str(exc).rstrip('.')}; "
                "check the address and password in --redis (or MASSGEN_REDIS_URL)") from None
        finally:
            await service.aclose()

    setup = asyncio.run(survey())
    if args.json:
        _say_json(setup.model_dump_json(indent=2))
        return EXIT_OK
    _say("API keys:      " + (", ".join(setup.providers_with_keys) or "none found"))
    clis = [f"{c.model} ({'logged in' if c.logged_in else 'not logged in'}, {c.path})"
            for c in setup.coding_clis]
    _say("coding CLIs:   " + ("; ".join(clis) or "none on PATH (claude, codex, gemini)"))
    servers = [f"{s.url} ({', '.join(s.models[:3])})" for s in setup.local_servers]
    _say("local servers: " + ("; ".join(servers) or "none on the probed ports"))
    _say("embedded:      " + (setup.embedded_model or "not installed"))
    _say("default team:  " + (", ".join(setup.default_team) or "none"))
    _say("  why:         " + setup.default_team_reason)
    _say("records:       " + setup.storage)
    if setup.mode == "pool":
        _say(f"runs:          on the worker pool at {setup.redis_url}; "
              f"{len(setup.workers)} worker(s) live"
              + (f" ({', '.join(setup.workers)})" if setup.workers else
                 ": start one with massgen-mcp worker --redis URL"))
    else:
        _say("runs:          in this process (embedded; --redis URL for a worker pool)")
    _say("versions:      " + ", ".join(f"{k} {v}" for k, v in setup.versions.items()))
    _say("add more:      " + setup.how_to_add_more)
    return EXIT_OK


def parse_age(text: str) -> float:
    """'30d', '12h', '90m', '45s' -> seconds."""
    units = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
    number, unit = text[:-1], text[-1:].lower()
    if unit not in units or not number.replace(".", "", 1).isdigit():
        raise ConfigError(f"--older-than {text!r}: use a number and a unit, e.g. 30d, 12h, 90m")
    return float(number) * units[unit]


def cmd_prune(args: argparse.Namespace) -> int:
    store = _store(args)
    candidates = store.prune_candidates(parse_age(args.older_than))
    if not candidates:
        _say(f"no finished sessions older than {args.older_than} in {store.sessions_dir}")
        return EXIT_OK
    verb = "deleting" if args.yes else "would delete"
    for s in candidates:
        _say(f"{verb} {s.session_id}  {s.status:<11} {' '.join(s.question.split())[:50]}")
        if args.yes:
            store.delete(s.session_id)
    if not args.yes:
        _say(f"{len(candidates)} session(s); nothing deleted. Run again with --yes to delete.")
    return EXIT_OK


def cmd_install(args: argparse.Namespace) -> int:
    from massgen_mcp.cli.install import install

    result = install(args.host, scope=args.scope, use_uvx=args.uvx, dry_run=args.print)
    if args.print:
        _say(f"# {result.path}")
        _say(result.snippet, end="" if result.snippet.endswith("\n") else "\n")
        return EXIT_OK
    if not result.changed:
        _say(f"{result.path}: already up to date")
    else:
        _say(f"{result.path}: massgen added")
        if result.backup:
            _say(f"  previous version kept as {result.backup}")
    _say(f"  {result.note}")
    return EXIT_OK


def _pool(args: argparse.Namespace) -> PoolConfig | None:
    """The worker pool named by --redis (or $MASSGEN_REDIS_URL), if any."""
    from massgen_mcp.pool.live import URL_ENV, PoolConfig

    url = getattr(args, "redis", None) or os.environ.get(URL_ENV)
    if not url:
        return None
    return PoolConfig(url, name=args.pool_name,
                      redelivery_timeout_s=getattr(args, "redelivery_timeout", 30.0),
                      insecure=args.insecure_redis)


def cmd_serve(args: argparse.Namespace) -> int:
    from massgen_mcp.server.transports import serve_http, serve_stdio

    home = Path(args.home) if args.home else None
    pool = _pool(args)
    if args.http:
        serve_http(host=args.host, port=args.port, path=args.path, home=home,
                   api=args.api, pool=pool, tasks=args.tasks)
    elif pool is not None:
        raise ConfigError("--redis: a pool front end serves over HTTP; add --http (hosts "
                          "that spawn a stdio server run it embedded)")
    else:
        serve_stdio(home, tasks=args.tasks)
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    from massgen_mcp.pool.worker import PoolWorker
    from massgen_mcp.providers.registry import ProviderRouter
    from massgen_mcp.server.transports import configure_logging

    pool = _pool(args)
    if pool is None:
        raise ConfigError("worker: give the pool's Redis with --redis redis://host:6379/0 "
                          "(or set MASSGEN_REDIS_URL)")
    if not 1 <= args.concurrency <= 1000:
        raise ConfigError("--concurrency: between 1 and 1000 runs at once")
    home = Path(args.home) if args.home else None
    configure_logging(home, log_file=None)
    worker = PoolWorker(pool, SessionStore(home), ProviderRouter(),
                        concurrency=args.concurrency)
    asyncio.run(worker.serve())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="massgen-mcp",
        description="A team of models answers, votes and agrees on one answer. "
                    "With no command: serve MCP over stdio.")
    parser.add_argument("--version", action="version", version=f"massgen-mcp {__version__}")
    parser.add_argument("--home", help="record folder (default: $MASSGEN_HOME or ./.massgen)")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run one consensus headless and print the final answer")
    run.add_argument("question", help="the question ('-' reads it from stdin)")
    team = run.add_mutually_exclusive_group()
    team.add_argument("--models", help="comma-separated litellm models, e.g. "
                                       "openai/gpt-4o-mini,anthropic/claude-haiku-4-5")
    team.add_argument("--config", help="MassGen-format YAML file, or @preset")
    run.add_argument("--base-url", help="OpenAI-compatible endpoint for agents without one")
    run.add_argument("--context", help="background text for every agent")
    run.add_argument("--context-file", action="append", metavar="PATH",
                     help="a text file shared with every agent (repeat for more)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--timeout", type=float, help="session timeout in seconds (default 600)")
    run.add_argument("--max-cost", type=float, help="stop at this cost in USD")
    run.add_argument("--max-tokens", type=int, help="stop at this many tokens in total")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.set_defaults(func=cmd_run)

    evals = sub.add_parser("eval", help="score each member alone, majority vote over first "
                                        "drafts and the consensus on questions with answers")
    evals.add_argument("questions", help="JSONL file of {question, answer} lines, or @sample")
    team = evals.add_mutually_exclusive_group()
    team.add_argument("--models", help="comma-separated litellm models")
    team.add_argument("--config", help="MassGen-format YAML file, or @preset")
    evals.add_argument("--name", help="results folder name under <home>/evals (default: "
                                      "file and team)")
    evals.add_argument("--timeout", type=float, help="per-question run timeout in seconds")
    evals.set_defaults(func=cmd_eval)

    validate = sub.add_parser("validate", help="check a config file and print the team")
    validate.add_argument("file", help="YAML file or @preset")
    validate.add_argument("--servers", action="store_true",
                          help="start the config's MCP servers (commands it names: only for "
                               "a file you trust) and warn about tools the size caps cut")
    validate.set_defaults(func=cmd_validate)

    trust = sub.add_parser("trust", help="allow a project's config to do what needs your "
                                         "consent (send keys or files to the servers it "
                                         "names, start MCP servers, open secret files); "
                                         "recorded with the file's hash and place")
    trust.add_argument("file", nargs="?",
                       help="config file (default: the project's .massgen/config.yaml)")
    trust.add_argument("--revoke", action="store_true", help="withdraw consent")
    trust.set_defaults(func=cmd_trust)

    sessions = sub.add_parser("sessions", help="list past runs, newest first")
    sessions.add_argument("--status", choices=[str(s) for s in RunStatus])
    sessions.add_argument("--limit", type=int, default=20)
    sessions.add_argument("--json", action="store_true")
    sessions.set_defaults(func=cmd_sessions)

    show = sub.add_parser("show", help="print a run's result and coordination table")
    show.add_argument("session_id")
    show.add_argument("--json", action="store_true", help="print result.json")
    show.add_argument("--html", action="store_true",
                      help="(re)write the session's report.html and print its path")
    show.add_argument("--open", action="store_true", help="with --html: open it in a browser")
    show.set_defaults(func=cmd_show)

    prune = sub.add_parser("prune", help="delete old finished session records (dry run "
                                         "unless --yes)")
    prune.add_argument("--older-than", required=True, help="age such as 30d, 12h or 90m")
    prune.add_argument("--yes", action="store_true", help="really delete")
    prune.set_defaults(func=cmd_prune)

    doctor = sub.add_parser("doctor", help="show keys, local servers, the default team and why")
    doctor.add_argument("--json", action="store_true")
    _pool_arguments(doctor)
    doctor.set_defaults(func=cmd_doctor)

    from massgen_mcp.cli.install import HOSTS

    install = sub.add_parser("install", help="add massgen to an MCP host's config")
    install.add_argument("host", choices=list(HOSTS))
    install.add_argument("--scope", choices=["project", "user"], default="project",
                         help="project folder config (default) or your user config")
    install.add_argument("--print", action="store_true",
                         help="print the entry and the file it belongs in; change nothing")
    install.add_argument("--uvx", action="store_true",
                         help="start the server with 'uvx massgen-mcp' instead of this install")
    install.set_defaults(func=cmd_install)

    serve = sub.add_parser("serve", help="serve MCP (stdio by default; --http for HTTP)")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--path", default="/mcp")
    serve.add_argument("--api", choices=["both", "mcp", "openai"], default="both",
                       help="with --http: MCP at --path, the OpenAI-compatible "
                            "/v1/chat/completions and /v1/models, or both (default)")
    serve.add_argument("--tasks", action="store_true",
                       help="make run_consensus an MCP task for clients that ask (always on "
                            "with --redis)")
    _pool_arguments(serve)
    serve.set_defaults(func=cmd_serve, http=False)

    worker = sub.add_parser("worker", help="run sessions from a pool's Redis queue (start "
                                           "front ends with serve --http --redis)")
    _pool_arguments(worker)
    worker.add_argument("--concurrency", type=int, default=32,
                        help="runs at once in this process (default 32)")
    worker.add_argument("--redelivery-timeout", type=float, default=30.0, metavar="S",
                        help="a run whose worker is silent this long goes to another worker "
                             "(default 30)")
    worker.set_defaults(func=cmd_worker)
    return parser


def _pool_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL",
                        help="a worker pool's Redis, e.g. redis://localhost:6379/0 (default: "
                             "$MASSGEN_REDIS_URL; none: runs in this process)")
    parser.add_argument("--pool-name", default="massgen",
                        help="the pool's name in Redis (default massgen)")
    parser.add_argument("--insecure-redis", action="store_true",
                        help="accept a Redis on another host that has no password (anyone "
                             "who reaches it can start, cancel and read runs)")


def main(argv: list[str] | None = None) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:  # what MCP hosts spawn: serve over stdio
            args = parser.parse_args([*(argv or sys.argv[1:]), "serve"])
    except SystemExit as exc:  # argparse has printed the usage and the problem
        return EXIT_USAGE if exc.code == 2 else int(exc.code or 0)
    try:
        for name, value in vars(args).items():  # undecodable bytes in an argument
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str):
                    check_text(text, name)
        code: int = args.func(args)
        return code
    except RecordWriteError as exc:  # the input was fine; the disk was not
        _err(redact(str(exc)))
        return EXIT_EXECUTION
    except ListenError as exc:
        _err(str(exc))
        return EXIT_LISTEN
    except MassgenError as exc:
        _err(redact(str(exc)))
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
