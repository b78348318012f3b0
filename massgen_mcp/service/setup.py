"""What this machine can run with, and where runs go: the ``check_setup`` survey.

Apart from the door's runs (:mod:`massgen_mcp.service`) because it asks other things than a
run does: which keys, coding CLIs, local servers and embedded model are found
(:func:`massgen_mcp.team.discover.discover`), the executor's mode and workers, and the
installed versions. The views are what the MCP tool returns and the CLI prints; provider
names only, never a key's value.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from massgen_mcp._version import __version__
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.executors.seam import Executor


class LocalServerView(BaseModel):
    url: str
    models: list[str]


class CliView(BaseModel):
    model: str = Field(description="the model string that puts it on a team, e.g. cli/claude")
    path: str
    logged_in: bool = Field(description="judged from where its login lives; no network call")
    version: str | None = Field(description="as the binary printed it; None if it did not")
    refused: str | None = Field(
        description="why this version cannot sit on a team (too old to run read-only), and "
                    "the command that updates it; None when it can")


class SetupView(BaseModel):
    providers_with_keys: list[str] = Field(description="provider names only, never key values")
    providers_without_keys: list[str]
    coding_clis: list[CliView]
    local_servers: list[LocalServerView]
    embedded_model: str | None
    default_team: list[str] = Field(description="models used when a run names none")
    default_team_reason: str
    storage: str
    mode: str = Field(description="embedded (runs in this process) or pool (Redis workers)")
    redis_url: str | None = Field(description="the pool's Redis, password masked")
    workers: list[str] = Field(description="pool workers seen recently")
    sessions_running: int
    pool_problem: str | None = Field(None, description=(
        "why the pool could not be surveyed (then workers and sessions_running are unknown, "
        "not zero)"))
    versions: dict[str, str]
    how_to_add_more: str
    http_token: str = Field(description=(
        "whether serve --http has a token (MASSGEN_MCP_TOKEN), and why one set is refused "
        "(never its value)"))


def http_token() -> str:
    """What ``serve --http`` will make of the token and the pool's tasks key: a weak one is
    refused at start (:func:`massgen_mcp.core.settings.secret_weakness`), and doctor says so
    before that start."""
    problems = []
    for setting in (SETTINGS.mcp_token, SETTINGS.tasks_key):
        try:
            setting.read()
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        return "REFUSED: " + "; ".join(problems)
    if SETTINGS.mcp_token.read():
        return "set (serve --http requires it of every client)"
    return "not set (serve --http serves loopback only, without a token)"


async def survey(executor: Executor, storage: Path) -> SetupView:
    """The setup as ``executor`` and this machine see it; ``storage``: the records folder."""
    from massgen_mcp.team.discover import discover, how_to_add_more, providers_without_keys

    found = await discover(survey=True)
    info = await executor.describe()
    versions = {"massgen-mcp": __version__, "python": sys.version.split()[0]}
    for dist in ("fastmcp", "mcp", "litellm", "xllamacpp", "pydocket"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return SetupView(
        providers_with_keys=found.providers_with_keys,
        providers_without_keys=providers_without_keys(found.providers_with_keys),
        coding_clis=[CliView(model=f"cli/{c.name}", path=c.path, logged_in=c.logged_in,
                             version=c.version, refused=c.refused)
                     for c in found.clis],
        local_servers=[LocalServerView(url=s.url, models=list(s.models))
                       for s in found.local_servers],
        embedded_model=f"local/{found.embedded_model}" if found.embedded_model else None,
        default_team=[a.model for a in found.team.agents] if found.team else [],
        default_team_reason=found.reason,
        storage=str(storage),
        mode=info.mode, redis_url=info.redis_url, workers=list(info.workers),
        sessions_running=await executor.count_running() if info.surveyed else 0,
        pool_problem=None if info.surveyed else info.problem,
        versions=versions,
        how_to_add_more=how_to_add_more(found.clis, found.local_servers,
                                        found.embedded_model),
        http_token=http_token(),
    )
