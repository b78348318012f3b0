"""Drive one consensus run: concurrent agent turns, limits, the final answer.

The protocol rules live in :mod:`.state`, usage and budget arithmetic in :mod:`.accounting`,
every message an agent is sent in :mod:`.prompts`; this module is the loop that adds time and
I/O. Each agent that needs a turn gets its own asyncio task holding a frozen
:class:`~.state.View`; whenever any task finishes, its action is applied to the shared state and
every agent that now needs a turn is started. Nothing is started on a view that is about to
change in round one, and a vote that comes back on an outdated view is discarded and re-asked
(a review turn that a late first answer overtakes is restarted at once instead).

Everything that happens is reported to a :class:`~.snapshot.Recorder` as typed records
(:mod:`massgen_mcp.core.records`, projected by :mod:`.snapshot`), through the bookkeeping of
:class:`~.bookkeeping.RunBooks` (events, status revisions, live drafts, the closing of the
record); the engine itself never touches files, so other stores can plug in. A run that
continues from its record starts from the progress :mod:`.replay` rebuilds; the tool calls an
agent makes before it decides are served by :mod:`.evidence`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from massgen_mcp.consensus import prompts
from massgen_mcp.consensus.accounting import BudgetExceeded, check_budget, sane
from massgen_mcp.consensus.actions import (
    Action,
    CastVote,
    Invalid,
    NewAnswer,
    parse_action,
)
from massgen_mcp.consensus.bookkeeping import DraftsListener
from massgen_mcp.consensus.evidence import Evidence, is_evidence
from massgen_mcp.consensus.final import FinalAnswer
from massgen_mcp.consensus.pace import FirstRound
from massgen_mcp.consensus.run import RunRequest
from massgen_mcp.consensus.snapshot import Recorder, ReviewText
from massgen_mcp.consensus.state import View
from massgen_mcp.consensus.steering import NoteGate, clean_note
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ProviderError, RecordWriteError, SteerRefusedError
from massgen_mcp.core.records import (
    PREVIEW_CHARS,
    CallPurpose,
    Decision,
    EventType,
    FinishReason,
    Phase,
    RunStatus,
)
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.core.secrets import redact
from massgen_mcp.providers.base import CallContext, Completion, Provider, complete_with_retries

log = logging.getLogger(__name__)


REJECTED_REPLY_CHARS = 2_000  # of a rejected reply, kept in its invalid_action event
PROBLEM_CHARS = 300  # of the last problem, in a dropped agent's reason


def rejected_reply(completion: Completion) -> str:
    """What a reply the turn rejected said (its text, else its tool calls), cut at
    :data:`REJECTED_REPLY_CHARS`: recorded, so that why a member was dropped can be read
    afterwards (``show``, the report), not only the kind of its mistake. What cannot be
    written as UTF-8 (a lone surrogate) becomes ``?``: the reply was refused, its record
    must not be."""
    said = completion.content or "\n".join(
        f"{call.name}({call.arguments or ''})" for call in completion.tool_calls)
    return said[:REJECTED_REPLY_CHARS].encode("utf-8", "replace").decode("utf-8")


def clip_problem(problem: str) -> str:
    """The corrective retry's problem, without its advice to the model, for a drop reason."""
    first = problem.split(" Send your whole review again")[0].strip()
    return first if len(first) <= PROBLEM_CHARS else first[:PROBLEM_CHARS - 3] + "..."


@dataclass(frozen=True)
class Dropped:
    reason: str


@dataclass(frozen=True)
class TurnOutcome:
    agent_id: str
    view: View
    result: Action | Dropped


class ConsensusRun(FinalAnswer):
    """One run of the protocol; create it, then ``await run()`` once.

    ``on_drafts`` hears (at most every :data:`~.bookkeeping.DRAFT_INTERVAL_S`) that the live
    drafts changed; without it providers are not asked to stream. ``review_text`` writes a
    review's final answer from its outcome (the run's owner hands it the faces' words)."""

    def __init__(self, request: RunRequest, provider: Provider, recorder: Recorder, *,
                 on_drafts: DraftsListener | None = None,
                 review_text: ReviewText | None = None) -> None:
        super().__init__(request, recorder, on_drafts=on_drafts, review_text=review_text)
        self.agents: dict[str, AgentSpec] = request.agents
        self.provider = provider
        self.coord = self.progress.coord
        self.in_flight: dict[str, asyncio.Task[TurnOutcome]] = {}
        self._views: dict[str, View] = {}  # the view each turn in flight was started on
        self.evidence = Evidence(request, self.progress, self._emit, self._publish_status)
        self._calling: dict[str, CallPurpose] = {}  # agents with a model call in flight
        self.first_round = FirstRound(self.options.late_factor)  # the quorum's stopwatch
        self._coordinating = False  # between the first turn and the decision: notes land
        self._wake: asyncio.Future[None] | None = None  # a note woke the coordination loop
        self._notes = NoteGate(already=len(self.coord.notes))
        # A review's read-only snapshot, the coding CLIs' working folder: made by the run's
        # owner (``prepare``, awaited before the first turn, so that a cancel, a failure or
        # the time limit ends the run as anywhere else), which also removes it.
        self.prepare: Callable[[], Awaitable[Path | None]] | None = None
        self.work_folder: Path | None = None

    # -- model calls -------------------------------------------------------------------------

    async def _call(
        self, agent: AgentSpec, messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None, purpose: CallPurpose,
    ) -> Completion:
        async def on_retry(attempt: int, error: ProviderError, delay: float) -> None:
            self._emit(EventType.RETRY, agent_id=agent.id, purpose=purpose, attempt=attempt,
                       delay_s=round(delay, 3), error=str(error), kind=error.kind,
                       status_code=error.status_code)
            self.drafts.begin(agent.id, purpose)  # the retry writes its draft afresh

        self._calling[agent.id] = purpose
        self.drafts.begin(agent.id, purpose)
        on_text = (None if self._on_drafts is None
                   else partial(self._text_streamed, agent.id))
        try:
            completion = await complete_with_retries(
                self.provider, agent, messages, tools=tools,
                timeout_s=(self.options.cli_call_timeout_s if agent.cli
                           else self.options.call_timeout_s),
                max_retries=self.options.max_retries,
                backoff_s=self.options.retry_backoff_s, on_retry=on_retry,
                context=CallContext(self.request.session_id, self.request.log_path,
                                    on_text=on_text,
                                    work_folder=self.work_folder if agent.cli else None),
            )
        finally:
            self._calling.pop(agent.id, None)
            pace = self.drafts.end(agent.id)
            if pace.first_token_s is not None:
                self._drafts_changed()  # the draft is gone: say so now, not in 0.2 s
        completion = sane(completion.redacted())  # usage a server may lie about
        if completion.tool_calls and all(is_evidence(c.name) for c in completion.tool_calls):
            purpose = CallPurpose.EVIDENCE  # usage tells tool rounds from decisions
        self.progress.count(agent.id, completion, evidence=purpose is CallPurpose.EVIDENCE)
        self._emit(EventType.CALL, agent_id=agent.id, purpose=purpose,
                   prompt_tokens=completion.prompt_tokens,
                   completion_tokens=completion.completion_tokens,
                   cost_usd=completion.cost_usd, latency_s=round(completion.latency_s, 3),
                   **({} if pace.first_token_s is None else
                      {"first_token_s": pace.first_token_s, "tokens_per_s": pace.tokens_per_s}))
        return completion

    # -- one turn ----------------------------------------------------------------------------

    async def _turn(self, agent: AgentSpec, view: View) -> TurnOutcome:
        native = agent.uses_native_tools()
        messages = prompts.turn_messages(
            question=self.request.question, context=self.request.context,
            persona=agent.system_message, view=view, native_tools=native,
            feedback=self.progress.feedback, role=self.request.team.role_of(agent.id),
        )
        decide = prompts.workflow_tools(view) if native else None
        evidence = self.evidence.specs(agent) if native else []
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
            check_budget(self.progress.total, self.options)  # not in the final presentation
            looked = [c for c in completion.tool_calls if is_evidence(c.name)]
            # Evidence calls are served only while the tools are offered; after the cap they
            # are invalid actions like any unknown tool (retried, then the agent is dropped).
            if offered and looked and len(looked) == len(completion.tool_calls):
                messages, used = await self.evidence.use(agent, messages, completion, used,
                                                         offered)
                if not self.evidence.left(used):
                    tools, offered = decide, set()  # told so in the results: now decide
                continue
            if looked and len(looked) < len(completion.tool_calls):
                # A decision next to evidence calls: the decision stands.
                completion = replace(completion, tool_calls=[
                    c for c in completion.tool_calls if not is_evidence(c.name)])
            action = parse_action(completion, view, native_tools=native,
                                  novelty=self.options.answer_novelty, retried=attempt > 1,
                                  reviews=self.request.review is not None)
            if not isinstance(action, Invalid):
                return TurnOutcome(agent.id, view, action)
            self._emit(EventType.INVALID_ACTION, agent_id=agent.id, attempt=attempt,
                       reason=action.kind, problem=action.problem,
                       detail=rejected_reply(completion))
            if attempt == prompts.MAX_ATTEMPTS_PER_TURN:
                return TurnOutcome(agent.id, view, Dropped(
                    f"{attempt} invalid actions in one turn (last: {action.kind}: "
                    f"{clip_problem(action.problem)})"))
            messages = prompts.retry_messages(messages, completion, action.problem, view,
                                              native_tools=native)
            attempt += 1

    def _start_turns(self) -> None:
        for aid, agent in self.agents.items():
            if aid not in self.in_flight and self.coord.needs_turn(aid):
                view = self._views[aid] = self.coord.view_for(aid)
                self.in_flight[aid] = asyncio.create_task(
                    self._turn(agent, view), name=f"{self.request.session_id}:{aid}")

    def _apply(self, outcome: TurnOutcome) -> None:
        aid, result = outcome.agent_id, outcome.result
        if isinstance(result, Dropped):
            self.coord.drop(aid, result.reason)
            self.errors.append(f"{aid} ({self.agents[aid].model}): {result.reason}")
            self._emit(EventType.AGENT_DROPPED, agent_id=aid, reason=result.reason)
        elif isinstance(result, NewAnswer):
            if outcome.view.first_round:
                self.first_round.answered()
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

    async def _coordinate(self) -> Decision | None:
        """Run turns until a decision (returned) or until no agent is left (None). A
        steering note (:meth:`steer`) wakes the loop, to start the turns it asks for."""
        self._coordinating = True
        try:
            while True:
                if (why := self.coord.escalation()) is not None:
                    self._escalate(why)
                decision = self.coord.decision()
                if decision is not None or not self.coord.live():
                    break
                await self._speculate()
                if self.coord.reviewing():
                    self.phase = Phase.VOTING
                await self._restart_outdated()
                self._start_turns()
                self._publish_status()
                if not self.in_flight:  # cannot happen while the protocol invariants hold
                    raise RuntimeError("no agent can move but there is no consensus")
                self._wake = asyncio.get_running_loop().create_future()
                waiting: set[asyncio.Future[Any]] = {*self.in_flight.values(), self._wake}
                done, _ = await asyncio.wait(waiting, timeout=self._until_late(),
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    self._open_review_for_quorum()
                for aid in [a for a, t in self.in_flight.items() if t in done]:
                    task = self.in_flight.pop(aid)
                    self._apply(task.result())  # a BudgetExceeded propagates from here
        finally:
            self._coordinating = False  # no await since the decision: no note slipped in
            self._wake = None
        if decision is not None:
            self._emit(EventType.CONSENSUS, reason=decision,
                       tally={k: len(v) for k, v in self.coord.tally().items()})
            await self._cancel_turns(decision)
        return decision

    def _escalate(self, why: str) -> None:
        """depth: auto's pair did not settle it: call in the rest of the team, whose first
        answers get round one's own stopwatch (:mod:`.pace`), not the pair's."""
        joined = self.coord.escalate()
        self.first_round = FirstRound(self.options.late_factor)
        self._emit(EventType.ESCALATED, late=joined, detail=why)

    def steer(self, message: str) -> int:
        """Deliver the user's note to the team; returns how many votes it cleared.

        Taken only while the agents coordinate (not once the team has decided, not while it
        writes or checks the final answer). Every agent sees the note from its next turn on;
        turns in flight finish on their old view (see :mod:`.state`). Raises ConfigError for
        a note that is empty or too long, SteerRefusedError when the run cannot take it."""
        note = redact(clean_note(message))
        if self.status is not RunStatus.RUNNING or not self._coordinating:
            where = ("the team has decided and is writing the final answer"
                     if self.status is RunStatus.RUNNING
                     else f"the run is {str(self.status).replace('_', ' ')}")
            raise SteerRefusedError(
                f"session {self.request.session_id} cannot take a note now: {where}. Send "
                "it as a follow-up once the run has finished (continue_session, or massgen-mcp "
                "continue ID \"...\" at a terminal, or a new run)")
        self._notes.admit()
        cleared = self.coord.steer(note)
        self._emit(EventType.STEERED, detail=note, chars=len(note), count=cleared)
        self._publish_status()
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        return cleared

    def _until_late(self) -> float | None:
        """Seconds until round one's stragglers count as late (:mod:`.pace`), or None."""
        if self.coord.reviewing() or self.options.decide == "all":
            return None  # MassGen's rule waits for every first answer, as MassGen does
        return self.first_round.until_late(len(self.coord.live()))

    def _open_review_for_quorum(self) -> None:
        self.coord.open_review()
        answered, live = len(self.first_round.answered_s), len(self.coord.live())
        self._emit(EventType.QUORUM, late=self.coord.late(),
                   after_s=round(self.first_round.elapsed(), 3),
                   detail=f"{answered} of {live} answered; the rest took over "
                          f"{self.options.late_factor:g}× the median time of their peers")

    async def _restart_outdated(self) -> None:
        """When a late first answer joins (review opened without it, :mod:`.pace`), every
        review turn still deciding on a view without it is stopped and started again on the
        current answers, instead of being awaited: its vote would come back stale and be
        discarded, and waiting for it only delays the decision. The straggler rule opened
        those reviews early; this is its other half. Each stopped call is hung up, counted as
        cancelled and recorded (``turn_restarted``). A revision does not do this: a turn in
        flight then usually brings a revision of its own, accepted whatever its view, so it
        is awaited as under MassGen's rules (the disagreement table in docs/performance.md
        measures both). A first answer in flight is never stopped."""
        if not self.coord.review_opened:
            return
        joined = {a.label for a in self.coord.current_answers() if a.revision == 1}
        outdated = {aid: missing for aid, task in self.in_flight.items()
                    if not task.done() and not self._views[aid].first_round
                    and (missing := joined - set(self._views[aid].labels))}
        for aid, missing in outdated.items():
            self._cut(aid, EventType.TURN_RESTARTED, by=", ".join(sorted(missing)),
                      reason="a late first answer joined while it was deciding")
        if outdated:
            # asyncio.wait, not gather: a run cancelled (or timed out) meanwhile must not
            # cancel these turns a second time, mid-cleanup (a CLI not yet killed); and they
            # stay in in_flight until they are over, so _stop_turns still awaits them.
            await asyncio.wait([self.in_flight[aid] for aid in outdated])
            for aid in outdated:
                self.in_flight.pop(aid)

    async def _cancel_turns(self, decision: Decision) -> None:
        """The decision came first: stop every turn still in flight, counting and recording
        each (a model call cut off mid-flight counts as cancelled, not as a call)."""
        for aid in self.in_flight:
            self._cut(aid, EventType.TURN_CANCELLED, reason=f"decided: {decision}")
        await self._stop_turns()

    def _cut(self, aid: str, event_type: EventType, **data: Any) -> None:
        """Cancel ``aid``'s turn in flight, recording why and counting a model call cut off
        mid-flight as cancelled (none when the turn was between calls: a tool, a retry)."""
        purpose = self._calling.get(aid)
        self._emit(event_type, agent_id=aid, purpose=purpose, count=int(purpose is not None),
                   **data)
        if purpose is not None:
            self.progress.count_cancelled(aid)
        self.in_flight[aid].cancel()

    async def _stop_turns(self) -> None:
        tasks = list(self.in_flight.values())
        for task in tasks:
            if not task.cancelling():  # once: a second cancel cuts its cleanup short
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # a cancel of this wait is not passed on to them
        self.in_flight.clear()

    async def run(self) -> ResultRecord:
        """Run to the end and return the result (also handed to ``recorder.finish``).

        Cancelling the task that awaits this records ``cancelled`` and re-raises.
        """
        try:
            return await self._run()
        finally:
            if self._speculation is not None:  # a cancel or a crash mid-coordination
                self._speculation[1].cancel()
                await asyncio.wait([self._speculation[1]])
            if self._drafts_due is not None:
                self._drafts_due.cancel()
            if self.evidence.mcp is not None:  # every server stops with the run, however
                await self.evidence.mcp.aclose()  # it ends

    async def _run(self) -> ResultRecord:
        final: str | None = None
        presenter: str | None = None
        try:
            try:
                if self.request.prior is not None:
                    self._emit(EventType.RESUMED,
                               labels=[a.label for a in self.coord.current_answers()])
                else:
                    roles = {aid: role for aid in self.agents
                             if (role := self.request.team.role_of(aid)) is not None}
                    self._emit(EventType.STARTED, question=self.request.question,
                               agents={a.id: a.model for a in self.agents.values()},
                               **({"roles": roles} if roles else {}),
                               parent_session_id=self.request.parent_session_id)
                async with asyncio.timeout(self.options.timeout_s):
                    if self.evidence.mcp is not None:  # servers start within the time limit
                        await self.evidence.mcp.start()
                        self.evidence.report_cut()
                    if self.prepare is not None:
                        self.work_folder = await self.prepare()
                    self.first_round.start()
                    while True:
                        try:
                            decision = await self._coordinate()
                        finally:
                            await self._stop_turns()
                        if decision is None:
                            self._no_consensus()
                            final, presenter = await self._present(allow_call=False)
                            break
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
