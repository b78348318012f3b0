"""Drive one consensus run: concurrent agent turns, limits, the final answer.

The protocol rules live in :mod:`.state`, usage and budget arithmetic in :mod:`.accounting`,
every message an agent is sent in :mod:`.prompts`; this module is the loop that adds time and
I/O. Each agent that needs a turn gets its own asyncio task holding a frozen
:class:`~.state.View`; whenever any task finishes, its action is applied to the shared state and
every agent that now needs a turn is started. Nothing is started on a view that is about to
change in round one, and a vote that comes back on an outdated view is discarded and re-asked.

Everything that happens is reported to a :class:`Recorder` as typed records
(:mod:`massgen_mcp.core.records`); the engine itself never touches files, so other stores can
plug in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from massgen_mcp.consensus import prompts
from massgen_mcp.consensus.accounting import BudgetExceeded, UsageMeter, check_budget
from massgen_mcp.consensus.actions import (
    MAX_ANSWER_CHARS,
    Action,
    CastVote,
    Invalid,
    NewAnswer,
    parse_action,
)
from massgen_mcp.consensus.state import Answer, Coordination, View
from massgen_mcp.core.edges import UnsafeJson, decode_json, load_json
from massgen_mcp.core.errors import ProviderError, RecordWriteError
from massgen_mcp.core.records import (
    PREVIEW_CHARS,
    AgentResult,
    AgentStatus,
    AnswerRecord,
    AnswerRef,
    CallPurpose,
    Event,
    EventType,
    FinishReason,
    Phase,
    ResultRecord,
    RunStatus,
    StatusRecord,
    VoteRecord,
    VoteRef,
    Winner,
    clip,
)
from massgen_mcp.core.secrets import redact
from massgen_mcp.core.spec import AgentSpec, TeamConfig
from massgen_mcp.providers.base import (
    CallContext,
    Completion,
    Provider,
    ToolCall,
    complete_with_retries,
)
from massgen_mcp.tools.mcp_servers import PREFIX as MCP_PREFIX
from massgen_mcp.tools.mcp_servers import McpToolbox
from massgen_mcp.tools.workspace import WorkspaceTools

log = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 10.0  # one workspace tool call (they only read capped local files)


def parse_check(text: str) -> tuple[str, str | None]:
    """(verdict, feedback) from a check reply; anything but a well-formed restart accepts."""
    start = text.find("{")
    try:
        value = decode_json(text, start)[0] if start >= 0 else None
    except UnsafeJson:
        value = None
    if isinstance(value, dict) and value.get("verdict") == "restart":
        feedback = str(value.get("feedback") or "").strip()[:2_000]
        if feedback:
            return "restart", feedback
    if isinstance(value, dict) and value.get("verdict") == "accept":
        return "accept", None
    return "accept", "the check's reply was not a verdict; the answer stands"


def is_evidence(name: str) -> bool:
    """Whether a tool gathers evidence (workspace or MCP) rather than deciding."""
    return name in WorkspaceTools.NAMES or name.startswith(MCP_PREFIX)


@dataclass(frozen=True)
class PriorAnswer:
    agent_id: str
    content: str


@dataclass(frozen=True)
class PriorVote:
    agent_id: str
    label: str
    reason: str


@dataclass(frozen=True)
class PriorRestart:
    feedback: str | None


PriorStep = PriorAnswer | PriorVote | PriorRestart


@dataclass(frozen=True)
class Prior:
    """A recorded run's progress, replayed into the state machine when the run continues
    (``resume_session``, or a worker taking over from one that died), so that no call whose
    outcome is recorded is made again: answers, the votes still standing, restarts, and the
    calls already paid for (usage and budget carry on)."""

    steps: tuple[PriorStep, ...]
    calls: tuple[Event, ...]
    event_count: int  # event numbering continues after the recorded events

    @classmethod
    def from_events(cls, events: list[Event], answer: Callable[[str], str]) -> Prior:
        """Read the progress out of a record's events; ``answer`` gives an answer's text by
        label. Accepted answers and votes replay in recorded order, so labels, versions and
        the votes a later answer invalidated come out as they were."""
        steps: list[PriorStep] = []
        for e in events:
            if e.type is EventType.ANSWER and e.agent_id and e.label:
                steps.append(PriorAnswer(e.agent_id, answer(e.label).rstrip("\n")))
            elif e.type is EventType.VOTE and e.agent_id and e.label:
                steps.append(PriorVote(e.agent_id, e.label, e.reason or ""))
            elif e.type is EventType.RESTART:
                steps.append(PriorRestart(e.detail))
        return cls(tuple(steps), tuple(e for e in events if e.type is EventType.CALL),
                   len(events))


@dataclass(frozen=True)
class RunRequest:
    """Everything needed to run (or re-run) a session."""

    session_id: str
    question: str
    team: TeamConfig
    context: str | None = None
    parent_session_id: str | None = None
    # Resuming a run that stopped part-way: what its record had settled (see :class:`Prior`).
    prior: Prior | None = None
    workspace: Path | None = None  # the root the evidence tools read (when they are on)
    log_path: Path | None = None  # where coding-agent CLIs' stderr goes (the session's cli.log)


class Recorder(Protocol):
    """Where a run reports what happens; the session store's
    :class:`~massgen_mcp.sessions.store.FileRecorder` writes it to disk.

    A method may raise :class:`~massgen_mcp.core.errors.RecordWriteError` once, when the store
    refuses a write; the run then ends ``failed`` (``record_write_failed``) and every later
    call must keep working in memory without raising again.
    """

    def event(self, event: Event) -> None: ...
    def status(self, status: StatusRecord) -> None: ...
    def answer(self, label: str, content: str) -> None: ...
    def finish(self, result: ResultRecord) -> None: ...


@dataclass(frozen=True)
class Dropped:
    reason: str


@dataclass(frozen=True)
class TurnOutcome:
    agent_id: str
    view: View
    result: Action | Dropped


class ConsensusRun:
    """One run of the protocol; create it, then ``await run()`` once."""

    def __init__(self, request: RunRequest, provider: Provider, recorder: Recorder) -> None:
        self.request = request
        self.options = request.team.options
        self.agents: dict[str, AgentSpec] = {a.id: a for a in request.team.agents}
        self.provider = provider
        self.recorder = recorder
        self.coord = Coordination(
            list(self.agents), max_answers=self.options.max_answers_per_agent,
            seed=request.session_id,
        )
        self.usage = {aid: UsageMeter() for aid in self.agents}
        self.total = UsageMeter()
        self.in_flight: dict[str, asyncio.Task[TurnOutcome]] = {}
        self.tools = (WorkspaceTools(request.workspace, tuple(self.options.context_paths),
                                     tuple(self.options.allow_secret_files))
                      if self.options.workspace_tools and request.workspace else None)
        servers = request.team.mcp_servers()
        self.mcp = McpToolbox(servers) if servers else None
        self._tool_calls = 0  # evidence tool calls in the whole run
        self._activity: dict[str, str] = {}  # agent -> the tool it is using now
        self.phase = Phase.ANSWERING
        self.status = RunStatus.RUNNING
        self._outcome = RunStatus.FAILED  # what status becomes when the run ends
        self.finish_reason: FinishReason | None = None
        self.errors: list[str] = []
        self._stopping: str | None = None  # "interrupt" or "hand_back": why a cancel came
        self._restarts = 0  # coordination rounds started again by the final answer's check
        self._feedback: str | None = None  # the check's feedback, shown to every agent
        self._seq = request.prior.event_count if request.prior else 0
        self._revision = 0  # bumped on every published status, so pollers can tell news
        self._t0 = time.monotonic()
        self._started_at = time.time()
        if request.prior is not None:
            self._replay(request.prior)

    def _replay(self, prior: Prior) -> None:
        for step in prior.steps:
            if isinstance(step, PriorAnswer) and step.agent_id in self.agents:
                self.coord.add_answer(step.agent_id, step.content)
            elif isinstance(step, PriorVote) and step.agent_id in self.agents:
                with contextlib.suppress(ValueError):  # a record edited by hand
                    self.coord.add_vote(step.agent_id, step.label, step.reason,
                                        self.coord.version)
            elif isinstance(step, PriorRestart):
                self.coord.restart()
                self._restarts += 1
                self._feedback = step.feedback
        for call in prior.calls:
            self._count(call.agent_id, Completion(
                None, prompt_tokens=call.prompt_tokens or 0,
                completion_tokens=call.completion_tokens or 0, cost_usd=call.cost_usd,
                latency_s=call.latency_s or 0.0), evidence=call.purpose is CallPurpose.EVIDENCE)

    # -- recording ---------------------------------------------------------------------------

    def _elapsed(self) -> float:
        return round(time.monotonic() - self._t0, 3)

    def _emit(self, event_type: EventType, /, **data: Any) -> None:
        self._seq += 1
        self.recorder.event(Event(seq=self._seq, t=self._elapsed(), ts=time.time(),
                                  type=event_type, **data))

    def _publish_status(self) -> None:
        self._revision += 1
        self.recorder.status(self.snapshot())

    def snapshot(self) -> StatusRecord:
        """The live state, as written to status.json and returned by get_status."""
        agents = {}
        for aid, spec in self.agents.items():
            state = self.coord.agents[aid]
            agents[aid] = AgentStatus(
                model=spec.model, label_letter=state.letter,
                phase=self.coord.phase_of(aid, aid in self.in_flight),
                answers=len(state.answers),
                current_answer=state.current.label if state.current else None,
                vote=None if state.vote is None else
                VoteRef(answer=state.vote.label, reason=state.vote.reason),
                dropped_reason=state.drop_reason, usage=self.usage[aid].record(),
                activity=self._activity.get(aid),
            )
        return StatusRecord(
            session_id=self.request.session_id, status=self.status, phase=self.phase,
            finish_reason=self.finish_reason, question=self.request.question,
            parent_session_id=self.request.parent_session_id, started_at=self._started_at,
            updated_at=time.time(), elapsed_s=self._elapsed(),
            answers_version=self.coord.version, revision=self._revision, agents=agents,
            answers=[AnswerRef(label=a.label, agent_id=a.agent_id, chars=len(a.content),
                               preview=a.content[:PREVIEW_CHARS])
                     for a in self.coord.current_answers()],
            tally={label: [v.voter for v in votes]
                   for label, votes in self.coord.tally().items()},
            usage=self.total.record(),
        )

    # -- model calls -------------------------------------------------------------------------

    def _count(self, agent_id: str | None, completion: Completion, *,
               evidence: bool = False) -> None:
        if agent_id in self.usage:
            self.usage[agent_id].add(completion, evidence=evidence)
        self.total.add(completion, evidence=evidence)

    async def _call(
        self, agent: AgentSpec, messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None, purpose: CallPurpose,
    ) -> Completion:
        async def on_retry(attempt: int, error: ProviderError, delay: float) -> None:
            self._emit(EventType.RETRY, agent_id=agent.id, purpose=purpose, attempt=attempt,
                       delay_s=round(delay, 3), error=str(error), kind=error.kind,
                       status_code=error.status_code)

        completion = await complete_with_retries(
            self.provider, agent, messages, tools=tools,
            timeout_s=(self.options.cli_call_timeout_s if agent.cli
                       else self.options.call_timeout_s),
            max_retries=self.options.max_retries,
            backoff_s=self.options.retry_backoff_s, on_retry=on_retry,
            context=CallContext(self.request.session_id, self.request.log_path),
        )
        completion = completion.redacted()
        if completion.tool_calls and all(is_evidence(c.name) for c in completion.tool_calls):
            purpose = CallPurpose.EVIDENCE  # usage tells tool rounds from decisions
        self._count(agent.id, completion, evidence=purpose is CallPurpose.EVIDENCE)
        self._emit(EventType.CALL, agent_id=agent.id, purpose=purpose,
                   prompt_tokens=completion.prompt_tokens,
                   completion_tokens=completion.completion_tokens,
                   cost_usd=completion.cost_usd, latency_s=round(completion.latency_s, 3))
        return completion

    # -- one turn ----------------------------------------------------------------------------

    async def _turn(self, agent: AgentSpec, view: View) -> TurnOutcome:
        native = agent.uses_native_tools()
        messages = prompts.turn_messages(
            question=self.request.question, context=self.request.context,
            persona=agent.system_message, view=view, native_tools=native,
            feedback=self._feedback,
        )
        decide = prompts.workflow_tools(view) if native else None
        evidence = self._evidence_specs(agent) if native else []
        tools = decide + evidence if decide is not None and evidence else decide
        # Only what this agent is offered runs: a name it invents (another agent's server, a
        # write tool its allowed_tools leave out) gets an error result, not just no listing.
        offered = {spec["function"]["name"] for spec in evidence}
        purpose = CallPurpose.ANSWER if view.first_round else CallPurpose.EVALUATE
        attempt = 1
        used = 0
        while True:
            try:
                completion = await self._call(agent, messages, tools, purpose)
            except ProviderError as exc:
                return TurnOutcome(agent.id, view, Dropped(f"provider failed: {exc}"))
            check_budget(self.total, self.options)  # never reached by the final presentation
            looked = [c for c in completion.tool_calls if is_evidence(c.name)]
            # Evidence calls are served only while the tools are offered; after the cap they
            # are invalid actions like any unknown tool (retried, then the agent is dropped).
            if offered and looked and len(looked) == len(completion.tool_calls):
                messages, used = await self._use_tools(agent, messages, completion, used,
                                                       offered)
                if not self._tools_left(used):
                    tools, offered = decide, set()  # told so in the results: now decide
                continue
            if looked and len(looked) < len(completion.tool_calls):
                # A decision next to evidence calls: the decision stands.
                completion = replace(completion, tool_calls=[
                    c for c in completion.tool_calls if not is_evidence(c.name)])
            action = parse_action(completion, view, native_tools=native,
                                  novelty=self.options.answer_novelty)
            if not isinstance(action, Invalid):
                return TurnOutcome(agent.id, view, action)
            self._emit(EventType.INVALID_ACTION, agent_id=agent.id, attempt=attempt,
                       reason=action.kind, problem=action.problem)
            if attempt == prompts.MAX_ATTEMPTS_PER_TURN:
                return TurnOutcome(agent.id, view, Dropped(
                    f"{attempt} invalid actions in one turn (last: {action.kind})"))
            messages = prompts.retry_messages(messages, completion, action.problem, view,
                                              native_tools=native)
            attempt += 1

    def _evidence_specs(self, agent: AgentSpec) -> list[dict[str, Any]]:
        """The evidence tools ``agent`` is offered: the workspace's and its MCP servers'."""
        specs = self.tools.specs() if self.tools else []
        if self.mcp is not None:
            specs += self.mcp.specs_for([s.name for s in agent.mcp_servers],
                                        agent.allowed_tools, agent.exclude_tools)
            self._report_cut(agent.id)
        return specs

    def _report_cut(self, agent_id: str | None = None) -> None:
        """A ``tools_cut`` event for each thing the MCP caps left out, once each."""
        assert self.mcp is not None
        for line in self.mcp.take_cut():
            self._emit(EventType.TOOLS_CUT, agent_id=agent_id, detail=line)

    def _tools_left(self, used_this_turn: int) -> bool:
        return (used_this_turn < self.options.max_tool_calls_per_turn
                and self._tool_calls < self.options.max_tool_calls_per_run)

    async def _use_tools(self, agent: AgentSpec, messages: list[dict[str, Any]],
                         completion: Completion, used: int, offered: set[str]
                         ) -> tuple[list[dict[str, Any]], int]:
        """Run the evidence calls of one reply (within the caps) and return the conversation
        with their results appended, and the calls used this turn."""
        limit = (f"tool limit reached (max_tool_calls_per_turn "
                 f"{self.options.max_tool_calls_per_turn}, max_tool_calls_per_run "
                 f"{self.options.max_tool_calls_per_run}); decide now with what you have: "
                 "call new_answer or vote")
        results = []
        for call in completion.tool_calls:
            if not self._tools_left(used):
                text = f"error: {limit}"
            else:
                used += 1
                self._tool_calls += 1
                self.usage[agent.id].tool_calls += 1
                self.total.tool_calls += 1
                text = await self._run_tool(agent, call, offered)
            results.append({"role": "tool", "tool_call_id": call.id, "content": text})
        if not self._tools_left(used) and not results[-1]["content"].startswith("error: tool"):
            results[-1]["content"] += f"\n[{limit}]"
        return [*messages, completion.assistant_message(), *results], used

    async def _run_tool(self, agent: AgentSpec, call: ToolCall, offered: set[str]) -> str:
        """One evidence call's result (redacted: a file may hold a key the run knows), recorded
        as a ``tool_call`` event."""
        t0 = time.monotonic()
        text = redact(await self._tool_result(agent, call, offered))
        self._emit(EventType.TOOL_CALL, agent_id=agent.id, tool=call.name,
                   arguments=clip(call.arguments, 300)[0], chars=len(text),
                   latency_s=round(time.monotonic() - t0, 3),
                   error=text[7:] if text.startswith("error: ") else None)
        return text

    async def _tool_result(self, agent: AgentSpec, call: ToolCall, offered: set[str]) -> str:
        if call.name not in offered:
            return f"error: there is no tool named {call.name!r} for you"
        try:
            arguments = load_json(call.arguments or "{}")
        except UnsafeJson:
            arguments = None
        if not isinstance(arguments, dict):
            return f"error: the arguments of {call.name} are not a JSON object"
        target = arguments.get("path") or arguments.get("pattern") or ""
        self._activity[agent.id] = clip(f"{call.name} {target}".strip(), 120)[0]
        self._publish_status()
        try:
            if call.name.startswith(MCP_PREFIX):
                assert self.mcp is not None
                return await self.mcp.call(call.name, arguments)  # the client's timeout
            assert self.tools is not None
            return await asyncio.wait_for(
                asyncio.to_thread(self.tools.run, call.name, arguments), TOOL_TIMEOUT_S)
        except TimeoutError:
            return f"error: {call.name} took longer than {TOOL_TIMEOUT_S:g} s"
        finally:
            self._activity.pop(agent.id, None)

    def _start_turns(self) -> None:
        for aid, agent in self.agents.items():
            if aid not in self.in_flight and self.coord.needs_turn(aid):
                view = self.coord.view_for(aid)
                self.in_flight[aid] = asyncio.create_task(
                    self._turn(agent, view), name=f"{self.request.session_id}:{aid}")

    def _apply(self, outcome: TurnOutcome) -> None:
        aid, result = outcome.agent_id, outcome.result
        if isinstance(result, Dropped):
            self.coord.drop(aid, result.reason)
            self.errors.append(f"{aid} ({self.agents[aid].model}): {result.reason}")
            self._emit(EventType.AGENT_DROPPED, agent_id=aid, reason=result.reason)
        elif isinstance(result, NewAnswer):
            # Duplicates of answers the agent was shown were rejected in its turn. An answer
            # that matches one it could not see is independent agreement: keep it, and let
            # the vote settle it (discarding it would make the agent repeat itself forever).
            answer, invalidated = self.coord.add_answer(aid, result.content)
            self.recorder.answer(answer.label, answer.content)
            self._emit(EventType.ANSWER, agent_id=aid, label=answer.label,
                       revision=answer.revision, chars=len(answer.content),
                       preview=answer.content[:PREVIEW_CHARS])
            if invalidated:
                self._emit(EventType.VOTES_INVALIDATED, count=invalidated, by=answer.label)
        elif isinstance(result, CastVote):
            if self.coord.add_vote(aid, result.label, result.reason, outcome.view.version):
                self._emit(EventType.VOTE, agent_id=aid, label=result.label,
                           reason=result.reason)
            else:
                self._emit(EventType.VOTE_DISCARDED, agent_id=aid, label=result.label,
                           reason="stale view: new answers arrived while it was deciding")

    async def _coordinate(self) -> None:
        while not self.coord.consensus() and self.coord.live():
            if self.coord.first_round_done():
                self.phase = Phase.VOTING
            self._start_turns()
            self._publish_status()
            if not self.in_flight:  # cannot happen while the protocol invariants hold
                raise RuntimeError("no agent can move but there is no consensus")
            done, _ = await asyncio.wait(
                self.in_flight.values(), return_when=asyncio.FIRST_COMPLETED)
            for aid in [a for a, t in self.in_flight.items() if t in done]:
                task = self.in_flight.pop(aid)
                self._apply(task.result())  # a BudgetExceeded propagates from here

    async def _stop_turns(self) -> None:
        tasks = list(self.in_flight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.in_flight.clear()

    # -- the final answer --------------------------------------------------------------------

    async def _present(self, *, allow_call: bool) -> tuple[str | None, str | None]:
        """The final answer text and who wrote it (None: the winning answer verbatim)."""
        winner, _ = self.coord.winner()
        if winner is None:
            return None, None
        presenter = self.agents[winner.agent_id]
        if (not allow_call or self.options.skip_final_presentation
                or self.coord.agents[winner.agent_id].dropped):
            return winner.content, None
        self.phase = Phase.PRESENTING
        self._publish_status()
        view = self.coord.view_for(winner.agent_id)
        reasons = [v.reason for v in self.coord.votes() if v.label == winner.label]
        messages = prompts.final_messages(
            question=self.request.question, context=self.request.context,
            persona=presenter.system_message, winner_label=winner.label, view=view,
            reasons=reasons,
        )
        try:
            completion = await self._call(presenter, messages, None, CallPurpose.FINAL)
        except ProviderError as exc:
            self._emit(EventType.FINAL_FALLBACK, agent_id=presenter.id, reason=str(exc))
            return winner.content, None
        text = (completion.content or "").strip()
        problem = ("empty reply" if not text else f"{len(text)} characters; the limit is "
                   f"{MAX_ANSWER_CHARS}" if len(text) > MAX_ANSWER_CHARS else None)
        if problem:
            self._emit(EventType.FINAL_FALLBACK, agent_id=presenter.id, reason=problem)
            return winner.content, None
        return text, presenter.id

    async def _restart_after_check(self, final: str | None, presenter: str | None) -> bool:
        """With restarts left, the presenter checks the final answer against the question;
        True if it sent the answer back (a new coordination round has begun, its feedback
        shown to every agent). An unreadable reply or a failed call accepts the answer."""
        if (final is None or presenter is None
                or self._restarts >= self.options.max_orchestration_restarts):
            return False
        self.phase = Phase.CHECKING
        self._publish_status()
        agent = self.agents[presenter]
        messages = prompts.check_messages(question=self.request.question,
                                          context=self.request.context,
                                          persona=agent.system_message, final=final)
        try:
            completion = await self._call(agent, messages, None, CallPurpose.CHECK)
        except ProviderError as exc:
            self._emit(EventType.CHECK, agent_id=presenter, reason="accept",
                       detail=f"the check failed ({exc}); the answer stands")
            return False
        check_budget(self.total, self.options)
        verdict, feedback = parse_check(completion.content or "")
        self._emit(EventType.CHECK, agent_id=presenter, reason=verdict, detail=feedback)
        if verdict != "restart":
            return False
        self._restarts += 1
        self._feedback = feedback
        self.coord.restart()
        self.phase = Phase.VOTING
        self._emit(EventType.RESTART, count=self._restarts, detail=feedback)
        return True

    # -- the whole run -----------------------------------------------------------------------

    def _end(self, status: RunStatus, reason: FinishReason) -> None:
        self._outcome, self.finish_reason = status, reason

    def interrupt(self) -> None:
        """Mark the coming cancellation as a stop of the whole server (not the user's
        cancel): the run is then recorded ``interrupted`` and can be resumed."""
        self._stopping = "interrupt"

    def hand_back(self) -> None:
        """Mark the coming cancellation as a pool worker stopping: the run is recorded
        ``running``/``queued`` (not finished, so pollers keep waiting) for another worker to
        continue from its record."""
        self._stopping = "hand_back"

    def end_unstarted(self, status: RunStatus, reason: FinishReason, error: str | None = None
                      ) -> ResultRecord:
        """End a run that never started (cancelled while queued, or a worker that cannot
        run it): a complete record with its result, and no model call."""
        self._end(status, reason)
        if error:
            self.errors.append(error)
        if status is RunStatus.CANCELLED:
            self._emit(EventType.CANCELLED)
        return self._finish(None, None)

    def _no_consensus(self) -> None:
        """Every agent is gone. If answers exist, the best one is still worth returning,
        flagged as not agreed (``agents_dropped``); with none the run failed."""
        if self.coord.current_answers():
            self._end(RunStatus.COMPLETED, FinishReason.AGENTS_DROPPED)
            self.errors.append("no consensus: every agent was dropped; the final answer is "
                               "the best recorded answer, not an agreed one")
        else:
            self._end(RunStatus.FAILED, FinishReason.ALL_AGENTS_FAILED)

    async def run(self) -> ResultRecord:
        """Run to the end and return the result (also handed to ``recorder.finish``).

        Cancelling the task that awaits this records ``cancelled`` and re-raises.
        """
        try:
            return await self._run()
        finally:
            if self.mcp is not None:  # every server stops with the run, however it ends
                await self.mcp.aclose()

    async def _run(self) -> ResultRecord:
        final: str | None = None
        presenter: str | None = None
        try:
            try:
                if self.request.prior is not None:
                    self._emit(EventType.RESUMED,
                               labels=[a.label for a in self.coord.current_answers()])
                else:
                    self._emit(EventType.STARTED, question=self.request.question,
                               agents={a.id: a.model for a in self.agents.values()},
                               parent_session_id=self.request.parent_session_id)
                async with asyncio.timeout(self.options.timeout_s):
                    if self.mcp is not None:  # servers start within the run's time limit
                        await self.mcp.start()
                        self._report_cut()
                    while True:
                        try:
                            await self._coordinate()
                        finally:
                            await self._stop_turns()
                        if not self.coord.consensus():
                            self._no_consensus()
                            final, presenter = await self._present(allow_call=False)
                            break
                        self._emit(EventType.CONSENSUS, tally={
                            k: len(v) for k, v in self.coord.tally().items()})
                        self._end(RunStatus.COMPLETED, FinishReason.CONSENSUS)
                        final, presenter = await self._present(allow_call=True)
                        if not await self._restart_after_check(final, presenter):
                            break
            except TimeoutError:
                self._emit(EventType.TIMEOUT, after_s=self.options.timeout_s)
                self._end(RunStatus.TIMED_OUT, FinishReason.TIMEOUT)
                final, presenter = await self._present(allow_call=False)
            except BudgetExceeded as exc:
                await self._stop_turns()
                self._emit(EventType.BUDGET_EXCEEDED, detail=exc.what)
                final, presenter = await self._present(allow_call=False)
                # With no answer at all there is nothing to return: that run failed.
                self._end(RunStatus.COMPLETED if final is not None else RunStatus.FAILED,
                          FinishReason.BUDGET_EXCEEDED)
        except asyncio.CancelledError:
            await self._stop_turns()
            if self._stopping is not None:
                self._record_stop(self._stopping)
            else:
                self._end(RunStatus.CANCELLED, FinishReason.CANCELLED)
                self._emit(EventType.CANCELLED)
                self._finish(None, None)
            raise
        except RecordWriteError as exc:
            await self._stop_turns()
            return self._finish_unrecorded(exc)
        except Exception as exc:  # a bug: still leave a complete, readable record
            log.exception("run %s crashed", self.request.session_id)
            await self._stop_turns()
            self._end(RunStatus.FAILED, FinishReason.INTERNAL_ERROR)
            self.errors.append(f"internal error: {redact(repr(exc))}")
            return self._finish(None, None)
        return self._finish(final, presenter)

    def _record_stop(self, why: str) -> None:
        """The process is stopping: leave the record as a crash would (no result). Marked
        ``interrupted`` at once, so ``resume_session`` continues from the recorded answers;
        or, handed back to a pool, still running and queued for the next worker."""
        with contextlib.suppress(RecordWriteError):
            if why == "hand_back":
                self.phase = Phase.QUEUED
                self._emit(EventType.REQUEUED, reason="the worker running it stopped; the "
                                                      "next worker continues from the record")
            else:
                self.status, self.phase = RunStatus.INTERRUPTED, Phase.DONE
                self.finish_reason = FinishReason.INTERRUPTED
                self._emit(EventType.INTERRUPTED, reason="the server stopped while the run "
                                                         "was in progress")
            self._publish_status()

    def _finish_unrecorded(self, exc: RecordWriteError) -> ResultRecord:
        """The disk refused part of the record: the run ends failed. The recorder keeps
        memory current from now on and writes what still fits (see :class:`Recorder`)."""
        self._end(RunStatus.FAILED, FinishReason.RECORD_WRITE_FAILED)
        self.errors.append(str(exc))
        return self._finish(None, None)

    def _finish(self, final: str | None, presenter: str | None) -> ResultRecord:
        try:
            return self._close_record(final, presenter)
        except RecordWriteError as exc:
            if self.finish_reason is FinishReason.RECORD_WRITE_FAILED:
                raise  # a recorder that raises twice breaks its contract
            return self._finish_unrecorded(exc)

    def _close_record(self, final: str | None, presenter: str | None) -> ResultRecord:
        # The status turns terminal only here, after the final answer exists, so a reader
        # that sees a terminal status in status.json always finds result.json too.
        self.status = self._outcome
        self.phase = Phase.DONE
        if final is not None:
            self._emit(EventType.FINAL, presenter=presenter, chars=len(final))
        winner: Answer | None = None
        tie = False
        if final is not None:
            winner, tie = self.coord.winner()
        result = self._result(final, presenter, winner, tie)
        self._emit(EventType.FINISHED, status=self.status, finish_reason=self.finish_reason)
        self.recorder.finish(result)
        # The result is recorded: the run's outcome stands even if this last status write is
        # refused (the recorder still holds it in memory; the next server reads result.json).
        with contextlib.suppress(RecordWriteError):
            self._publish_status()
        return result

    def _result(self, final: str | None, presenter: str | None, winner: Answer | None,
                tie: bool) -> ResultRecord:
        return ResultRecord(
            session_id=self.request.session_id, status=self.status,
            finish_reason=self.finish_reason, question=self.request.question,
            parent_session_id=self.request.parent_session_id, final_answer=final,
            winner=None if winner is None else Winner(
                label=winner.label, agent_id=winner.agent_id,
                model=self.agents[winner.agent_id].model),
            presented_by=presenter, tie_broken=tie,
            votes=[VoteRecord(voter=v.voter, answer=v.label, reason=v.reason)
                   for v in self.coord.votes()],
            tally={label: len(v) for label, v in self.coord.tally().items()},
            answers=[AnswerRecord(label=a.label, agent_id=a.agent_id,
                                  model=self.agents[a.agent_id].model, revision=a.revision,
                                  content=a.content)
                     for a in self.coord.current_answers()],
            agents={aid: AgentResult(model=spec.model,
                                     status=self.coord.phase_of(aid, False),
                                     answers=len(self.coord.agents[aid].answers),
                                     dropped_reason=self.coord.agents[aid].drop_reason,
                                     usage=self.usage[aid].record())
                    for aid, spec in self.agents.items()},
            usage=self.total.record(), errors=self.errors, started_at=self._started_at,
            finished_at=time.time(), elapsed_s=self._elapsed(),
        )
