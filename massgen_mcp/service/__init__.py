"""The one way in: start, follow, read, cancel, continue and resume runs.

The CLI, the MCP tools and resources, and scripts all call :class:`ConsensusService`. It is
protocol-neutral: it takes a :class:`~massgen_mcp.core.spec.RunSpec`, returns the typed records of
:mod:`massgen_mcp.core.records`, and raises :class:`~massgen_mcp.core.errors.MassgenError`
subclasses.
What a calling model is told (next steps, summaries, resource URIs) is written in
:mod:`massgen_mcp.server`; what a person at a terminal sees, in :mod:`massgen_mcp.cli`.

This module holds the runs: start, continue, sample, resume, follow, steer and cancel,
through the executor. Reading and tidying the records is :mod:`massgen_mcp.service.records`
(the base of :class:`ConsensusService`); the setup survey is :mod:`massgen_mcp.service.setup`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from massgen_mcp.consensus.prompts import escape_earlier
from massgen_mcp.consensus.steering import MAX_NOTE_CHARS as MAX_NOTE_CHARS  # for faces
from massgen_mcp.consensus.steering import clean_note
from massgen_mcp.core.edges import check_text
from massgen_mcp.core.errors import (
    ConfigError,
    RunNotFinishedError,
    SessionStateError,
    refusal_error,
    resume_hint,
)
from massgen_mcp.core.options import MAX_AGENTS, RunOptions
from massgen_mcp.core.records import (
    ConfigFile,
    EventType,
    Phase,
    RequestRecord,
    RunKind,
    RunStatus,
)
from massgen_mcp.core.run_state import ResultRecord, StatusRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import MAX_CONTEXT_CHARS, RunSpec, TeamConfig, check_question
from massgen_mcp.executors.local import local_executor
from massgen_mcp.executors.seam import (
    EventListener,
    Executor,
    ExecutorInfo,
    Unsubscribe,
    has_inline_keys,
    recorded_config,
    recorded_team,
)
from massgen_mcp.executors.seam import StartedRun as StartedRun  # start()'s reply, for faces
from massgen_mcp.executors.waiting import StatusCallback as StatusCallback  # for faces
from massgen_mcp.records.ids import check_session_id
from massgen_mcp.records.store import SessionStore
from massgen_mcp.service.records import RecordReads
from massgen_mcp.service.setup import SetupView, survey
from massgen_mcp.team import consent
from massgen_mcp.team.choose import choose_team, reread_config, with_overrides
from massgen_mcp.team.context_files import Workspace

if TYPE_CHECKING:
    from massgen_mcp.pool.live import PoolConfig


def not_resumable_hint(session_id: str, status: RunStatus) -> str:
    """The way on from a run ``resume`` refuses: a running one is followed, a finished
    one read, and one cancelled on purpose asked again (its recorded answers stay)."""
    if status is RunStatus.RUNNING:
        return "it is still running: wait for it (get_status, or massgen-mcp show " \
               f"{session_id})"
    if status is RunStatus.CANCELLED:
        return ("it was cancelled on purpose (cancel_session, or Ctrl-C on a run): start it "
                "again (a review: the same massgen-mcp review command), or ask its team a "
                f"follow-up (massgen-mcp continue {session_id} ...)")
    return f"it has ended and has its result: massgen-mcp show {session_id}"


class ConsensusService(RecordReads):
    """Runs and their records, for every front end (the record reads: :class:`RecordReads`)."""

    def __init__(self, store: SessionStore, executor: Executor, workspace: Workspace) -> None:
        self.store = store
        self.executor = executor
        self.workspace = workspace
        # Set by a face that can show it (the CLI on a terminal): the bundled model's first
        # fetch then happens before the run, with this progress, not inside the run.
        self.fetch_progress: Callable[[int, int], None] | None = None

    @classmethod
    def local(cls, home: Path | None = None, workspace: Workspace | None = None, *,
              drafts: bool = True) -> ConsensusService:
        """Records under ``home`` (default ./.massgen or $MASSGEN_HOME), runs in this
        process, file inputs from ``workspace`` (default: the working directory, confined).
        ``drafts``: keep live drafts (models stream); off for a face nobody watches live,
        since streaming costs CPU on every call."""
        store = SessionStore(home)
        return cls(store, local_executor(store, drafts=drafts),
                   workspace or Workspace(Path.cwd()))

    @classmethod
    async def pool(cls, config: PoolConfig, home: Path | None = None,
                   workspace: Workspace | None = None) -> ConsensusService:
        """A front end of a worker pool: records under ``home`` (shared with the workers),
        runs on ``massgen-mcp worker`` processes through Redis."""
        from massgen_mcp.pool.executor import PoolExecutor

        store = SessionStore(home)
        return cls(store, await PoolExecutor(store, config).open(),
                   workspace or Workspace(Path.cwd()))

    def add_event_listener(self, listener: EventListener) -> Unsubscribe:
        """Follow every event of every run this service's executor has (the CLI's progress
        lines); returns the unsubscribe."""
        return self.executor.add_event_listener(listener)

    async def aclose(self, *, interrupt: bool = False) -> None:
        """Stop what still runs: ``interrupt`` when the server stops (resumable), else the
        runs are cancelled (the CLI's Ctrl-C)."""
        await self.executor.aclose(interrupt=interrupt)

    # -- starting runs ------------------------------------------------------------------------

    async def start(self, spec: RunSpec, workspace: Workspace | None = None, *,
                    kind: RunKind = RunKind.RUN) -> StartedRun:
        """Check ``spec``, choose its team and start the run in the background. File inputs
        and the agents' tools use ``workspace`` (e.g. the MCP client's root) if given, else
        the service's own. ``kind``: ``eval`` marks a run eval made (see :class:`RunKind`)."""
        workspace = workspace or self.workspace
        question = check_question(spec.question)
        given = check_text(spec.context or "", "context").strip()
        parts = [given] if given else []
        if spec.context_files:
            parts.append(workspace.read_context_files(spec.context_files))
        # Known keys and token shapes (a .git/config's remote URL, a pasted token) are masked
        # before any prompt is built: the team may sit at an endpoint the user does not run.
        context = redact("\n\n".join(parts)) or None
        question = redact(question)
        if context and len(context) > MAX_CONTEXT_CHARS:
            raise ConfigError(f"context: {len(context)} characters; the limit is "
                              f"{MAX_CONTEXT_CHARS}")
        choice = await choose_team(spec, workspace)
        # A model's call (a confined workspace) chose any base_url it names, or its config
        # file's; the default team's are the user's own.
        chosen = workspace.confined and bool(spec.models or spec.config or spec.base_url)
        request = RequestRecord(question=question, context=context,
                                parent_session_id=spec.parent_session_id, notes=choice.notes,
                                kind=kind, config_file=choice.config_file, review=spec.review)
        return await self._launch(request, choice.team, workspace, urls_from_call=chosen)

    async def _launch(self, request: RequestRecord, team: TeamConfig,
                      workspace: Workspace | None = None, *,
                      urls_from_call: bool | None = None) -> StartedRun:
        """Ask the executor whether ``team`` may start (every reason it may not, in one
        error, before a record exists), then start it on ``request``, the one value every
        executor records. The workspace is recorded only when the team's tools read it. Base
        URLs a model's call chose (``urls_from_call``; a recorded team's, when a model
        continues it) are not probed."""
        workspace = workspace or self.workspace
        root = workspace.root.resolve()
        chosen = workspace.confined if urls_from_call is None else urls_from_call
        refusals = await self.executor.preflight(team, workspace=root,
                                               probe_base_urls=not chosen)
        if refusals:
            raise refusal_error(refusals)
        if self.fetch_progress is not None:
            await self.executor.prepare(team, self.fetch_progress)
        if team.options.workspace_tools:
            request = request.model_copy(update={"workspace": str(root)})
        run = await self.executor.start(request, team)
        if self._records_in_project():
            consent.remember_run(self.store, run.session_id, team)
        return run

    def _records_in_project(self) -> bool:
        """Whether the records sit inside the project (the default ./.massgen), where a
        cloned repository could have put records of its own (:func:`consent.check_recorded`)."""
        return self.store.sessions_dir.resolve().is_relative_to(self.workspace.root.resolve())

    async def continue_session(self, session_id: str, follow_up: str, *,
                               options: RunOptions | None = None,
                               config: str | None = None) -> StartedRun:
        """A new run on ``follow_up`` by the same team, with the earlier question, the user's
        notes to it (steering) and its final answer as context; linked to its parent in both
        records. ``config``: the config file the session ran with, for its inline api_keys
        when the recorded one has changed (:meth:`_recorded_team`)."""
        follow_up = check_question(follow_up, "follow_up")
        try:
            parent = await self.result(session_id)
        except RunNotFinishedError as exc:
            if not exc.interrupted:
                raise
            raise SessionStateError(f"session {session_id} is interrupted and has no final "
                                    f"answer to follow up on; {resume_hint(session_id)}, "
                                    "then ask the follow-up") from None
        request = self.store.read_request(session_id)
        earlier = (f"<earlier_question>\n{escape_earlier(parent.question)}\n"
                   "</earlier_question>\n<earlier_final_answer>\n"
                   f"{escape_earlier(parent.final_answer or '(none)')}\n"
                   "</earlier_final_answer>")
        notes = [escape_earlier(e.detail) for e in self.store.read_events(session_id)
                 if e.type is EventType.STEERED and e.detail]
        if notes:  # the user's notes steered the earlier answer: they still stand
            earlier += ("\n<earlier_user_notes>\n" + "\n".join(f"- {n}" for n in notes)
                        + "\n</earlier_user_notes>")
        if request.context:
            earlier = request.context + "\n\n" + earlier
        team, source = await self._recorded_team(session_id, config)
        if options:
            team = with_overrides(team, options.model_dump(exclude_unset=True),
                                  source=f"session {session_id} options")
        started = await self._launch(
            RequestRecord(question=follow_up, context=earlier, parent_session_id=session_id,
                          config_file=source), team)
        self.store.append_event(session_id, EventType.CONTINUED,
                                child_session_id=started.session_id)
        return started

    async def sample_member(self, session_id: str, agent_id: str, copies: int,
                            question: str, *, spec: RunSpec | None = None) -> StartedRun:
        """A run of ``copies`` identical copies of one agent of a recorded session's team (its
        model, endpoint, persona and sampling settings), on ``question``: their first drafts
        are independent samples of that agent alone, which is what ``eval``'s
        self-consistency baseline needs. Same checks and consent as the session's own run.

        ``spec``: the team as the caller gave it (``eval`` passes its own), chosen again in
        memory. The recorded team never holds inline ``api_key`` values, so a config that
        names its keys inline could not be sampled from its record."""
        team = ((await choose_team(spec, self.workspace)).team if spec is not None
                else (await self._recorded_team(session_id))[0])
        agent = next((a for a in team.agents if a.id == agent_id), None)
        if agent is None:
            raise ConfigError(f"agent_id: session {session_id} has no agent {agent_id!r} "
                              f"(it has {', '.join(a.id for a in team.agents)})")
        if not 1 <= copies <= MAX_AGENTS:
            raise ConfigError(f"copies: {copies}; a run has 1 to {MAX_AGENTS} agents")
        copied = [agent.model_copy(update={"id": f"{agent_id}-{n}"})
                  for n in range(1, copies + 1)]
        # Every copy drafts (no quorum leaves a late one out), and no final answer is asked
        # for: the caller reads the drafts and cancels the run once they are in.
        options = team.options.model_copy(update={"decide": "all",
                                                  "skip_final_presentation": True})
        sampled = TeamConfig.model_validate({**team.model_dump(), "agents": copied,
                                             "options": options})  # ids checked again
        return await self._launch(
            RequestRecord(question=check_question(question), kind=RunKind.EVAL), sampled)

    async def resume_session(self, session_id: str, *, config: str | None = None
                             ) -> StartedRun:
        """Continue an interrupted run from its recorded answers and votes, in the same
        record (``config`` as for :meth:`continue_session`)."""
        status = await self.status(session_id)
        # A queued run whose place in a pool's queue was lost (Redis without persistence)
        # can be queued again: a duplicate delivery finds it claimed or finished.
        lost = status.status is RunStatus.RUNNING and status.phase is Phase.QUEUED
        if status.status is not RunStatus.INTERRUPTED and not lost:
            raise SessionStateError(f"session {session_id} is {status.status}; only "
                                    "interrupted runs can be resumed; "
                                    + not_resumable_hint(session_id, status.status))
        team, _ = await self._recorded_team(session_id, config)
        return await self.executor.resume(session_id, team)

    async def _recorded_team(self, session_id: str, config: str | None = None
                             ) -> tuple[TeamConfig, ConfigFile | None]:
        """The team a session ran with, to run it again, and the config file its inline
        api_keys come from (None without any); a record in the project folder must be one
        this machine started, when its team needs consent.

        Keys are never recorded: a team that had them inline gets them from ``config`` (a
        file or @preset, as ``run --config`` takes it), else from the config file the
        record names while its text is the one it ran with (:func:`reread_config`).

        A record may have come with the repository, and the file it names is whatever it
        says: so that file is read only for a team that had inline keys, and only once the
        recorded team has passed the consent check."""
        recorded = recorded_config(self.store, session_id)
        if self._records_in_project():
            consent.check_recorded(self.store, session_id, recorded)
        if not has_inline_keys(recorded):
            return recorded, None
        keys_from: TeamConfig | None = None
        source = self.store.read_request(session_id).config_file
        if config is not None:
            choice = await choose_team(RunSpec(question="-", config=config), self.workspace)
            keys_from, source = choice.team, choice.config_file
        elif source is not None:
            keys_from = await reread_config(source, check_trust=self.workspace.confined)
        return recorded_team(self.store, session_id, keys_from), source

    # -- reading ------------------------------------------------------------------------------

    async def status(self, session_id: str) -> StatusRecord:
        """The live status, from whichever process runs it, else from its record."""
        return await self.executor.status(check_session_id(session_id))

    async def wait(self, session_id: str, wait_s: float | None, *, until_done: bool = True,
                   after_revision: int | None = None, on_change: StatusCallback | None = None
                   ) -> StatusRecord:
        """The status once the run has finished, or (``until_done=False``, for live views)
        once it changes (since ``after_revision`` if given), or after ``wait_s`` seconds
        (None: no limit). Ending is the default: a caller that wants the answer should not
        wake, and pay a round trip, at every step of the run."""
        await self.status(session_id)  # an unknown id fails now, not after the wait
        return await self.executor.wait(session_id, wait_s, until_done=until_done,
                                      after_revision=after_revision, on_change=on_change)

    def watch(self, session_id: str) -> AsyncIterator[StatusRecord]:
        """The run's status now and on every change after, its agents' live drafts
        included, until it ends: what the live views redraw from. Drafts change at most
        every 0.2 s (DRAFT_INTERVAL_S, consensus/bookkeeping.py)."""
        return self.executor.watch(check_session_id(session_id))

    async def steer(self, session_id: str, message: str) -> int:
        """Send the running team the user's note (every agent sees it from its next turn;
        votes cast before it no longer count); returns how many votes it cleared. ConfigError
        for an empty or over-long note, SteerRefusedError when the run cannot take one."""
        note = clean_note(message)
        await self.status(session_id)  # an unknown id fails as such, not as a refusal
        return await self.executor.steer(session_id, note)

    async def result(self, session_id: str) -> ResultRecord:
        """The outcome of a finished run; RunNotFinishedError while it goes on."""
        result = await self.executor.result(check_session_id(session_id))
        if result is None:
            state = (await self.status(session_id)).status
            raise RunNotFinishedError(session_id, state,
                                      interrupted=state is RunStatus.INTERRUPTED)
        return result

    async def cancel(self, session_id: str) -> tuple[RunStatus, bool]:
        """Stop a run; returns its status afterwards and whether this call stopped it."""
        check_session_id(session_id)
        if await self.executor.cancel(session_id):
            return RunStatus.CANCELLED, True
        status = await self.executor.status(session_id)
        if status.status is RunStatus.RUNNING:
            raise SessionStateError(
                f"session {session_id} is running in another massgen-mcp process "
                f"(pid {status.pid}); cancel it there")
        return status.status, False

    async def check_setup(self) -> SetupView:
        """What this machine can run with, and where runs go (:func:`survey`)."""
        return await survey(self.executor, self.store.sessions_dir)

    # Doors for the server face: what server/ needs of the store and the executor, so it never
    # reaches past the service.

    async def remember_task(self, task_id: str, session_id: str) -> None:
        """Note that MCP task ``task_id`` runs ``session_id`` (a redelivered task follows it)."""
        await self.executor.remember(task_id, session_id)

    async def recall_task(self, task_id: str) -> str | None:
        """The session MCP task ``task_id`` started, if it started one."""
        return await self.executor.recall(task_id)

    async def describe_executor(self) -> ExecutorInfo:
        """Where runs go (this process or a pool) and whether they can go there now."""
        return await self.executor.describe()
