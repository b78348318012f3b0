"""The final answer of a run: who writes it and when (``final: present | answer |
speculative``), the presentation call and its fallbacks, and the winner's check that may send
the team back to work (``max_orchestration_restarts``).

A part of :class:`~massgen_mcp.consensus.engine.ConsensusRun`, kept apart because it is one
idea with rules of its own: the loop that runs the turns decides *who* won; this says what
the user is given. The run's state it reads (the coordination, the agents, the turns in
flight, the model call) belongs to the engine and is declared here for the type checker.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from massgen_mcp.consensus import prompts
from massgen_mcp.consensus.accounting import check_budget
from massgen_mcp.consensus.actions import MAX_ANSWER_CHARS, parse_check, presented_action
from massgen_mcp.consensus.bookkeeping import DraftsListener, RunBooks
from massgen_mcp.consensus.run import RunRequest
from massgen_mcp.consensus.snapshot import Recorder, ReviewText
from massgen_mcp.consensus.state import Answer
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.records import CallPurpose, EventType, Phase

if TYPE_CHECKING:
    from massgen_mcp.consensus.state import Coordination
    from massgen_mcp.core.agent import AgentSpec
    from massgen_mcp.providers.base import Completion


class FinalAnswer(RunBooks):
    """The final answer's rules, on the run's books."""

    if TYPE_CHECKING:  # the engine's own state and call, which these rules use
        coord: Coordination
        agents: dict[str, AgentSpec]
        in_flight: dict[str, asyncio.Task[Any]]
        _calling: dict[str, CallPurpose]

        async def _call(self, agent: AgentSpec, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]] | None, purpose: CallPurpose
                        ) -> Completion: ...

    def __init__(self, request: RunRequest, recorder: Recorder, *,
                 on_drafts: DraftsListener | None, review_text: ReviewText | None) -> None:
        super().__init__(request, recorder, on_drafts=on_drafts, review_text=review_text)
        # final: speculative: (label, the presentation of that answer, in flight).
        self._speculation: tuple[str, asyncio.Task[tuple[str | None, str | None]]] | None = None

    def _writes_final(self) -> bool:
        """Whether a presenter writes the final answer at all: not with ``final: answer``
        (or MassGen's skip_final_presentation), nor for a review, whose final text is
        written from the members' recorded findings (snapshot.result_record)."""
        return (self.options.final != "answer" and not self.options.skip_final_presentation
                and self.request.review is None)

    async def _speculate(self) -> None:
        """final: speculative: keep one presentation in flight for the leading answer, from
        the moment an answer leads the standing votes and its author has voted (so that no
        turn of its own runs beside it); stop it when the lead changes (a vote, a new answer
        or a note that clears the votes)."""
        if self.options.final != "speculative" or not self._writes_final():
            return
        leader = self.coord.leader()
        if self._speculation is not None and self._speculation[0] != leader:
            await self._discard_speculation("the lead changed")
        if leader is None or self._speculation is not None:
            return
        answer = next(a for a in self.coord.current_answers() if a.label == leader)
        author = self.coord.agents[answer.agent_id]
        if author.dropped or author.vote is None or answer.agent_id in self.in_flight:
            return
        self._speculation = (leader, asyncio.create_task(
            self._presentation(answer), name=f"{self.request.session_id}:final"))
        self._emit(EventType.FINAL_SPECULATED, agent_id=answer.agent_id, label=leader,
                   reason="started")

    async def _discard_speculation(self, why: str) -> None:
        if self._speculation is None:
            return
        label, task = self._speculation
        self._speculation = None
        answer = next((a for a in self.coord.current_answers() if a.label == label), None)
        aid = answer.agent_id if answer is not None else None
        cut = not task.done() and aid is not None and self._calling.get(aid) is CallPurpose.FINAL
        task.cancel()
        await asyncio.wait([task])
        if cut:
            self.progress.count_cancelled(aid)
        self._emit(EventType.FINAL_SPECULATED, agent_id=aid, label=label, reason="discarded",
                   detail=why, count=int(cut))

    async def _present(self, *, allow_call: bool) -> tuple[str | None, str | None]:
        """The final answer text and who wrote it (None: the winning answer verbatim)."""
        winner, _ = self.coord.winner()
        if winner is None:
            await self._discard_speculation("no winner")
            return None, None
        if (not allow_call or not self._writes_final()
                or self.coord.agents[winner.agent_id].dropped):
            await self._discard_speculation("the run ended without a presentation")
            return winner.content, None
        self.phase = Phase.PRESENTING
        self._publish_status()
        if self._speculation is not None and self._speculation[0] == winner.label:
            task = self._speculation[1]
            self._speculation = None
            self._emit(EventType.FINAL_SPECULATED, agent_id=winner.agent_id,
                       label=winner.label, reason="used")
            return await task
        await self._discard_speculation(f"{winner.label} won")
        return await self._presentation(winner)

    async def _presentation(self, winner: Answer) -> tuple[str | None, str | None]:
        """The winner's author writes the final answer on the current view and votes; a
        failed or unusable reply falls back to the answer itself."""
        presenter = self.agents[winner.agent_id]
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
        action = presented_action(text)
        if action is not None:  # the protocol, not an answer: whatever the provider kind
            name, content = action
            if content is None:
                self._emit(EventType.FINAL_FALLBACK, agent_id=presenter.id, reason=(
                    f"the presentation was a {name!r} action, not an answer; the selected "
                    f"answer {winner.label} stands"))
                return winner.content, None
            self._emit(EventType.FINAL_UNWRAPPED, agent_id=presenter.id, reason=(
                "the presentation was a 'new_answer' action; its content is the final answer"))
            text = content
        return text, presenter.id

    async def _restart_after_check(self, final: str | None, presenter: str | None) -> bool:
        """With restarts left, the presenter checks the final answer against the question;
        True if it sent the answer back (a new coordination round has begun, its feedback
        shown to every agent). An unreadable reply or a failed call accepts the answer."""
        if (final is None or presenter is None
                or self.progress.restarts >= self.options.max_orchestration_restarts):
            return False
        self.phase = Phase.CHECKING
        self._publish_status()
        agent = self.agents[presenter]
        messages = prompts.check_messages(question=self.request.question,
                                          context=self.request.context,
                                          persona=agent.system_message, final=final,
                                          notes=tuple(self.coord.notes))
        try:
            completion = await self._call(agent, messages, None, CallPurpose.CHECK)
        except ProviderError as exc:
            self._emit(EventType.CHECK, agent_id=presenter, reason="accept",
                       detail=f"the check failed ({exc}); the answer stands")
            return False
        check_budget(self.progress.total, self.options)
        verdict, feedback = parse_check(completion.content or "")
        self._emit(EventType.CHECK, agent_id=presenter, reason=verdict, detail=feedback)
        if verdict != "restart":
            return False
        self.progress.restarts += 1
        self.progress.feedback = feedback
        self.coord.restart()
        self.phase = Phase.VOTING
        self._emit(EventType.RESTART, count=self.progress.restarts, detail=feedback)
        return True

    # -- the whole run -----------------------------------------------------------------------
