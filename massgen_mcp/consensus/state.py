"""The consensus protocol as a plain, synchronous state machine.

No I/O and no clocks: the engine feeds it accepted actions and asks it what happens next, so
every protocol rule lives (and is unit-tested) in one place:

* Round one is independent: an agent's first answer is written on a view with no peer
  answer, always. Review (votes and new answers on the current answers) starts when every live
  agent has answered or dropped out, or earlier when the engine opens it for a quorum because
  the rest are late (:mod:`.pace`); a late agent's first answer then joins when it arrives,
  like any new answer.
* Answers carry anonymous labels ``<letter><revision>`` (``B2`` = the second answer of the agent
  whose letter is B). Letters are shuffled per session, so they say nothing about model or
  config order.
* An accepted new answer bumps ``version`` and clears every vote.
* A vote counts only if it was cast on the current ``version``; otherwise it is stale, discarded,
  and the voter simply needs another turn. (When the new answer is a late agent's first one,
  the engine does not wait for such a vote: the review turn is stopped at once and started
  again, :meth:`~massgen_mcp.consensus.engine.ConsensusRun._restart_outdated`.)
* Decision (``decide``): with ``"all"`` (MassGen's rule), when every live agent holds a vote
  cast since the last new answer; with ``"majority"``, also as soon as a strict majority of
  the live agents hold votes for one and the same current answer: no vote still to come can
  outweigh it, and a turn still in flight is cancelled rather than awaited, even one that
  would have brought a new answer.
* Self-votes (``self_vote``): by default, as in MassGen, an agent may vote for its own
  answer. With ``self_vote=False`` it may not, unless its own is the only current answer
  (nothing else could be voted for); the vote tool offers only the labels it may choose.
* Required agents (``required``): with ``"majority"``, no decision is made before every
  live required agent's first answer has joined the review (a quorum may still open review
  without it; votes cast before its answer are cleared by it, like any new answer). A
  required agent that is dropped no longer holds the decision back.
* A cheap opening (``opening``, from ``depth: auto``): only the two opening agents play at
  first; the others are held in reserve (not live, never called). If the pair agrees in
  round one (each answers once, then both vote for one answer), coordination ends: 2 of 2.
  Otherwise (a split vote, a revision, or an opener dropped) the run **escalates**: the
  reserve joins, answers round one independently like any first answer, and the whole
  team reviews every answer, the pair's included; their votes are cleared.
* Winner: most votes; a tie goes to the agent listed first in the config (reproducible, and
  under the user's control); with no votes at all (timeouts), the newest answer.
* A restart (the final answer failed its check) clears every vote and bumps ``version``, like a
  new answer: every live agent takes another turn. Answers, labels and answer caps carry on.
* A note from the user (steering) is added to every view from then on; like a new answer it
  bumps ``version`` and clears every vote, because the votes judged the answers against the
  question as it stood before. A turn in flight finishes on its old view: its answer is
  accepted (it is an answer; its author sees the note in its next turn), its vote is stale.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from massgen_mcp.core.records import AgentPhase, Decision

LETTERS = "ABCDEFGH"
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Answer:
    label: str
    agent_id: str
    revision: int
    content: str
    seq: int  # global order of acceptance, 1-based


@dataclass(frozen=True)
class Vote:
    voter: str
    label: str
    reason: str


@dataclass
class AgentState:
    agent_id: str
    letter: str
    answers: list[Answer] = field(default_factory=list)
    vote: Vote | None = None
    dropped: bool = False
    drop_reason: str | None = None

    @property
    def current(self) -> Answer | None:
        return self.answers[-1] if self.answers else None


@dataclass(frozen=True)
class View:
    """What one agent is shown on one turn: a frozen snapshot of the current answers."""

    version: int
    answers: tuple[Answer, ...]  # ordered for this viewer: own answer last
    may_answer: bool
    first_round: bool
    notes: tuple[str, ...] = ()  # the user's steering notes, oldest first
    # The viewer's own answer may not get its vote (self_vote=False) while another exists.
    no_self_vote: bool = False

    @property
    def labels(self) -> list[str]:
        return [a.label for a in self.answers]

    @property
    def own(self) -> str | None:
        """The viewer's own current answer's label (shown last), if it has one."""
        return self.answers[-1].label if self.answers else None

    @property
    def vote_labels(self) -> list[str]:
        """The labels the viewer may vote for on this view."""
        if self.no_self_vote and len(self.answers) > 1:
            return self.labels[:-1]
        return self.labels


def normalise(text: str) -> str:
    """Whitespace-insensitive form used to spot duplicate answers."""
    return _WS.sub(" ", text).strip()


def assign_letters(agent_ids: Sequence[str], seed: str) -> dict[str, str]:
    """Give each agent a letter, shuffled by ``seed`` so letters do not reveal config order."""
    letters = list(LETTERS[: len(agent_ids)])
    random.Random(seed).shuffle(letters)
    return dict(zip(agent_ids, letters, strict=True))


class Coordination:
    """State of one run's answer/vote loop."""

    def __init__(self, agent_ids: Sequence[str], *, max_answers: int, seed: str,
                 decide: Literal["majority", "all"] = "all", self_vote: bool = True,
                 required: Sequence[str] = (), opening: Sequence[str] = ()) -> None:
        if not agent_ids:
            raise ValueError("a run needs at least one agent")
        letters = assign_letters(agent_ids, seed)
        self.order = list(agent_ids)
        self.agents = {aid: AgentState(aid, letters[aid]) for aid in agent_ids}
        self.max_answers = max_answers
        self.decide = decide
        self.self_vote = self_vote
        self.required = frozenset(required) & set(agent_ids)
        # depth: auto: the agents held back until the opening pair fails to agree.
        self.reserve = set(agent_ids) - set(opening) if opening else set()
        self.version = 0
        self.review_opened = False  # by a quorum, before every live agent had answered
        self.notes: list[str] = []  # the user's steering notes, oldest first
        self._seq = 0

    # -- queries -----------------------------------------------------------------------------

    def live(self) -> list[AgentState]:
        return [self.agents[a] for a in self.order
                if not self.agents[a].dropped and a not in self.reserve]

    def current_answers(self) -> list[Answer]:
        """Every agent's latest answer (dropped agents' answers stay candidates), by letter."""
        found = [s.current for s in self.agents.values() if s.current is not None]
        return sorted(found, key=lambda a: a.label)

    def first_round_done(self) -> bool:
        return all(s.current is not None for s in self.live())

    def reviewing(self) -> bool:
        """Whether agents with an answer now review the current answers (vote or revise)."""
        return self.review_opened or self.first_round_done()

    def late(self) -> list[str]:
        """The live agents a quorum stopped waiting for that have not answered yet."""
        if not self.review_opened:
            return []
        return [s.agent_id for s in self.live() if s.current is None]

    def needs_turn(self, agent_id: str) -> bool:
        """Whether the agent should be (re)started now, if it is not already in flight."""
        state = self.agents[agent_id]
        if state.dropped or state.vote is not None or agent_id in self.reserve:
            return False
        return state.current is None or self.reviewing()

    def may_answer(self, agent_id: str) -> bool:
        return len(self.agents[agent_id].answers) < self.max_answers

    def view_for(self, agent_id: str) -> View:
        """The anonymised snapshot shown to ``agent_id``: sorted by label, rotated own-last."""
        state = self.agents[agent_id]
        notes = tuple(self.notes)
        if state.current is None:
            return View(self.version, (), may_answer=True, first_round=True, notes=notes)
        answers = self.current_answers()
        own = next(i for i, a in enumerate(answers) if a.agent_id == agent_id)
        rotated = answers[own + 1 :] + answers[: own + 1]
        return View(self.version, tuple(rotated), self.may_answer(agent_id), first_round=False,
                    notes=notes, no_self_vote=not self.self_vote)

    def escalation(self) -> str | None:
        """Why the opening pair must call in the reserve now, or None (see the rules
        above): never once the reserve has joined."""
        if not self.reserve:
            return None
        live = self.live()
        if len(live) < 2:
            return "an opening member was dropped"
        if any(len(s.answers) > 1 for s in live):
            return "an opening member revised its answer"
        votes = [s.vote for s in live]
        if all(v is not None for v in votes) and len({v.label for v in votes if v}) > 1:
            return "the opening pair voted for different answers"
        return None

    def escalate(self) -> list[str]:
        """Call in the reserve (returns it, in team order): it answers round one, then the
        whole team reviews; the pair's votes are cleared."""
        joined = [a for a in self.order if a in self.reserve]
        self.reserve.clear()
        self.review_opened = False  # round one waits for the newcomers' first answers
        self._clear_votes()
        return joined

    def decision(self) -> Decision | None:
        """Why coordination ends now, or None while it goes on (see the rules above)."""
        live = self.live()
        if not live or not self.reviewing():
            return None
        if self.reserve:  # the opening pair: only both voting for one answer settles it
            votes = [s.vote for s in live]
            settled = (len(live) == 2 and all(v is not None for v in votes)
                       and len({v.label for v in votes if v}) == 1)
            return Decision.ALL_VOTED if settled else None
        if all(s.vote is not None for s in live):
            return Decision.ALL_VOTED
        if any(s.current is None for s in live if s.agent_id in self.required):
            return None  # a required agent's first answer has not joined the review yet
        if self.decide == "majority":
            counts = Counter(s.vote.label for s in live if s.vote is not None)
            if counts and 2 * max(counts.values()) > len(live):
                return Decision.MAJORITY
        return None

    def consensus(self) -> bool:
        return self.decision() is not None

    def leader(self) -> str | None:
        """The answer with strictly the most standing votes (one at least), or None."""
        counts = Counter(vote.label for vote in self.votes())
        ranked = counts.most_common(2)
        if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
            return None
        return ranked[0][0]

    def votes(self) -> list[Vote]:
        return [s.vote for s in (self.agents[a] for a in self.order) if s.vote is not None]

    def tally(self) -> dict[str, list[Vote]]:
        """Current votes grouped by the label voted for, every current answer listed."""
        result: dict[str, list[Vote]] = {a.label: [] for a in self.current_answers()}
        for vote in self.votes():
            result.setdefault(vote.label, []).append(vote)
        return result

    def winner(self) -> tuple[Answer | None, bool]:
        """The winning answer and whether a tie had to be broken.

        Most votes wins; ties go to the agent listed first in the config. With no votes,
        the newest answer wins (used when a run stops early).
        """
        answers = {a.label: a for a in self.current_answers()}
        if not answers:
            return None, False
        counts = {label: len(v) for label, v in self.tally().items() if label in answers}
        best = max(counts.values())
        if best == 0:
            return max(answers.values(), key=lambda a: a.seq), False
        tied = [label for label, n in counts.items() if n == best]
        rank = {aid: i for i, aid in enumerate(self.order)}
        chosen = min(tied, key=lambda label: rank[answers[label].agent_id])
        return answers[chosen], len(tied) > 1

    def phase_of(self, agent_id: str, in_flight: bool) -> AgentPhase:
        state = self.agents[agent_id]
        if state.dropped:
            return AgentPhase.DROPPED
        if agent_id in self.reserve:
            return AgentPhase.RESERVE
        if in_flight:
            return AgentPhase.WORKING
        if state.vote is not None:
            return AgentPhase.VOTED
        if state.current is not None and not self.reviewing():
            return AgentPhase.WAITING
        return AgentPhase.ANSWERED if state.current is not None else AgentPhase.WAITING

    # -- transitions -------------------------------------------------------------------------

    def add_answer(self, agent_id: str, content: str) -> tuple[Answer, int]:
        """Accept a new answer; returns it and how many votes it invalidated."""
        state = self.agents[agent_id]
        self._seq += 1
        answer = Answer(
            label=f"{state.letter}{len(state.answers) + 1}",
            agent_id=agent_id,
            revision=len(state.answers) + 1,
            content=content,
            seq=self._seq,
        )
        state.answers.append(answer)
        return answer, self._clear_votes()

    def add_vote(self, agent_id: str, label: str, reason: str, view_version: int) -> bool:
        """Record a vote; returns False (vote discarded) if it was cast on a stale view."""
        if view_version != self.version:
            return False
        current = {a.label: a for a in self.current_answers()}
        if label not in current:
            raise ValueError(f"no current answer is labelled {label!r}")
        if (not self.self_vote and current[label].agent_id == agent_id
                and len(current) > 1):
            raise ValueError(f"{agent_id} may not vote for its own answer (self_vote off)")
        self.agents[agent_id].vote = Vote(agent_id, label, reason)
        return True

    def open_review(self) -> None:
        """Start review before every live agent has answered (a quorum; see :mod:`.pace`)."""
        self.review_opened = True

    def restart(self) -> None:
        """Start a new coordination round on the same answers (see the rules above)."""
        self._clear_votes()

    def steer(self, note: str) -> int:
        """Add the user's note to every view from now on; returns how many votes it cleared
        (see the rules above)."""
        self.notes.append(note)
        return self._clear_votes()

    def _clear_votes(self) -> int:
        self.version += 1
        cleared = 0
        for state in self.agents.values():
            if state.vote is not None:
                cleared += 1
                state.vote = None
        return cleared

    def drop(self, agent_id: str, reason: str) -> None:
        state = self.agents[agent_id]
        state.dropped = True
        state.drop_reason = reason
        state.vote = None
