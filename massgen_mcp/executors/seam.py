"""The executor seam: where runs execute, as the service sees it.

:class:`Executor` is the one interface the service (:mod:`massgen_mcp.service`) uses for runs:
start, resume, follow, steer, cancel, and whether a run may start at all (``preflight``). Two
executors implement it: :class:`~massgen_mcp.executors.local.LocalExecutor` runs in this
process, and :class:`~massgen_mcp.pool.executor.PoolExecutor` queues runs for ``massgen-mcp
worker`` processes on Redis. A new run's request crosses the seam as one value: the door
(:class:`~massgen_mcp.service.ConsensusService`) builds its
:class:`~massgen_mcp.core.records.RequestRecord` and an executor records it as it is, so a new
field of a run touches the typed forms, not every executor. What both need of a recorded run
(the team and request it is run again with) is built here, once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict

from massgen_mcp.consensus.run import Prior, RunRequest
from massgen_mcp.core.errors import Refusal, SessionStateError
from massgen_mcp.core.records import Event, RequestRecord
from massgen_mcp.core.run_state import Draft, ResultRecord, StatusRecord
from massgen_mcp.core.spec import TeamConfig, build_team
from massgen_mcp.executors.waiting import StatusCallback
from massgen_mcp.records.recorder import EventHook, StatusHook
from massgen_mcp.records.store import SessionStore

EventListener = Callable[[str, Event], None]  # (session id, event)
StatusListener = Callable[[StatusRecord], None]
# (session id, the drafts now, their revision): a pool worker's publisher.
DraftsListener = Callable[[str, Mapping[str, Draft], int], None]
Unsubscribe = Callable[[], None]
Progress = Callable[[int, int], None]  # (bytes so far, bytes in all) of a fetch before a run


class RecorderHooks(TypedDict):
    on_event: EventHook
    on_status: StatusHook


@dataclass
class StartedRun:
    """A run an executor has taken (started here, or queued for a pool worker): its session,
    where its record is, and notes for the user (config warnings, or why this team)."""

    session_id: str
    record_dir: Path
    notes: list[str] = field(default_factory=list, kw_only=True)


class Listeners:
    """The callbacks that follow every run of one executor: each event (the CLI's progress
    lines, a pool worker's publisher) and each status. Added through the executor's methods,
    each with its own unsubscribe, so nobody mutates an executor's lists from outside."""

    def __init__(self) -> None:
        self._events: list[EventListener] = []
        self._statuses: list[StatusListener] = []
        self._drafts: list[DraftsListener] = []

    def __bool__(self) -> bool:
        return bool(self._events or self._statuses or self._drafts)

    def add_event(self, listener: EventListener) -> Unsubscribe:
        self._events.append(listener)
        return lambda: self._events.remove(listener)

    def add_status(self, listener: StatusListener) -> Unsubscribe:
        self._statuses.append(listener)
        return lambda: self._statuses.remove(listener)

    def add_drafts(self, listener: DraftsListener) -> Unsubscribe:
        self._drafts.append(listener)
        return lambda: self._drafts.remove(listener)

    def drafts(self, session_id: str, drafts: Mapping[str, Draft], revision: int) -> None:
        for listener in tuple(self._drafts):
            listener(session_id, drafts, revision)

    def event(self, session_id: str, event: Event) -> None:
        for listener in tuple(self._events):
            listener(session_id, event)

    def status(self, status: StatusRecord) -> None:
        for listener in tuple(self._statuses):
            listener(status)


@dataclass(frozen=True)
class ExecutorInfo:
    """Where runs execute, for doctor, check_setup and /healthz."""

    mode: str  # "embedded" (this process) or "pool" (Docket workers over Redis)
    redis_url: str | None = None  # password masked
    workers: tuple[str, ...] = ()  # pool workers seen within Docket's heartbeat window
    problem: str | None = None  # why this front end cannot take runs now
    surveyed: bool = True  # False: Redis could not be read, so ``workers`` is unknown, not ()


class Executor(Protocol):
    """Where runs execute: this process (:class:`~massgen_mcp.executors.local.LocalExecutor`)
    or a worker pool (:class:`~massgen_mcp.pool.executor.PoolExecutor`)."""

    store: SessionStore

    async def preflight(self, team: TeamConfig, *, workspace: Path, probe_base_urls: bool
                        ) -> list[Refusal]:
        """May ``team`` start? Every reason it may not, before a record exists: what the
        run's machine lacks (keys, CLIs, servers, offline models) and context_paths outside
        ``workspace``. Base URLs a model's call chose are probed only if
        ``probe_base_urls``: the probe would tell the caller which hosts and ports answer
        (:mod:`massgen_mcp.providers.endpoints`)."""
    async def prepare(self, team: TeamConfig, progress: Progress) -> None:
        """Fetch what ``team`` needs before it starts, with ``progress`` (a face that shows
        a bar asks; a failed fetch refuses the run before its record exists)."""
    def add_event_listener(self, listener: EventListener) -> Unsubscribe:
        """Follow every event of every run this executor has; returns the unsubscribe."""
    def add_status_listener(self, listener: StatusListener) -> Unsubscribe:
        """Follow every status of every run this executor has; returns the unsubscribe."""
    async def start(self, request: RequestRecord, team: TeamConfig) -> StartedRun:
        """Record ``request`` (what the door asked, as request.json keeps it) with ``team``'s
        config in a new session, and start or queue the run."""
    async def resume(self, session_id: str, team: TeamConfig) -> StartedRun: ...
    async def status(self, session_id: str) -> StatusRecord: ...
    async def result(self, session_id: str) -> ResultRecord | None: ...
    async def wait(self, session_id: str, timeout_s: float | None, *, until_done: bool = False,
                   after_revision: int | None = None, on_change: StatusCallback | None = None
                   ) -> StatusRecord: ...
    def watch(self, session_id: str) -> AsyncIterator[StatusRecord]: ...
    async def steer(self, session_id: str, note: str) -> int: ...
    async def cancel(self, session_id: str) -> bool: ...
    async def count_running(self) -> int: ...
    async def describe(self) -> ExecutorInfo: ...
    async def recall(self, key: str) -> str | None: ...
    async def remember(self, key: str, session_id: str) -> None: ...
    async def aclose(self, deadline_s: float = ..., *, interrupt: bool = False) -> None: ...


def recorded_config(store: SessionStore, session_id: str) -> TeamConfig:
    """The team as its config.json records it: inline ``api_key`` values read "***"."""
    return build_team(store.read_config(session_id), source=f"session {session_id} config.json")


def has_inline_keys(team: TeamConfig) -> bool:
    return any(agent.api_key is not None for agent in team.agents)


def recorded_team(store: SessionStore, session_id: str,
                  keys_from: TeamConfig | None = None) -> TeamConfig:
    """The team a session ran with, from its config.json (keys are not stored there: each
    process resolves them from its own environment). Inline ``api_key`` values (recorded as
    "***") come from ``keys_from``, the team of the config file it ran with, read again by
    the caller: only when its agents are the recorded ones, so no key goes anywhere the
    recorded run did not send it."""
    team = recorded_config(store, session_id)
    if not has_inline_keys(team):
        return team
    if keys_from is None:
        raise SessionStateError(
            f"session {session_id} used inline api_keys, which are not stored, and the config "
            "file it ran with has changed or is gone; give that file again (massgen-mcp "
            f"continue/resume {session_id} ... --config FILE), or start a new run with it")
    if keys_from.redacted()["agents"] != team.redacted()["agents"]:
        raise SessionStateError(
            f"session {session_id} used inline api_keys, and the config file does not "
            "describe the agents it ran with; give the file it ran with (--config FILE), or "
            "start a new run")
    return TeamConfig(agents=keys_from.agents, options=team.options)


def recorded_request(store: SessionStore, session_id: str, team: TeamConfig) -> RunRequest:
    """What a recorded session asks, with the progress its events hold: from the start if
    it has none yet (a queued run), else from its recorded answers and votes (see
    :class:`~massgen_mcp.consensus.run.Prior`)."""
    recorded = store.read_request(session_id)
    events = store.read_events(session_id)
    prior = (Prior.from_events(events, lambda label: store.read_answer(session_id, label))
             if events else None)
    return RunRequest.from_record(session_id, recorded, team, prior)
