"""Plain-text views of a run for people: progress lines, the one line on how a run ended
(shared by the CLI, ``show`` and the HTML report), and the coordination table."""

from __future__ import annotations

from massgen_mcp.core.outcomes import Agreement
from massgen_mcp.core.records import Decision, Event, EventType, FinishReason, RunStatus, clip
from massgen_mcp.core.run_state import ResultRecord, StatusRecord, Usage

PROGRESS_CHARS = 80  # one progress line per event fits a terminal
TABLE_STEPS = 200  # the coordination table's last columns: a run has tens; a planted log more
# How coordination ended (records.Decision), in words.
DECIDED: dict[str, str] = {Decision.ALL_VOTED: "every agent voted",
                           Decision.MAJORITY: "a majority decided"}


def _short(text: str | None, limit: int = PROGRESS_CHARS) -> str:
    return clip(" ".join((text or "").split()), limit)[0]


# Finish reasons the status already says ("cancelled (cancelled)" says nothing more).
_SAID_BY_STATUS = (None, FinishReason.CONSENSUS, FinishReason.CANCELLED, FinishReason.TIMEOUT,
                   FinishReason.INTERRUPTED)


def status_words(status: StatusRecord | RunStatus, phase: str = "") -> str:
    """A run without a result, in words: where a running one is ("running, voting"); one
    that ended is its status alone ("interrupted": its phase reads "done", which it is not).
    Takes a status record, or a status and phase from a view of one (the MCP status text)."""
    if isinstance(status, StatusRecord):
        return status_words(status.status, status.phase)
    if status is RunStatus.RUNNING:
        return f"{status}, {phase}"
    return str(status)


def _votes(n: int) -> str:
    return f"{n} vote{'' if n == 1 else 's'}"


def tie_among(tally: dict[str, int]) -> str | None:
    """"A1, B1, C1 (1 vote each)" when several answers share the most votes, else None."""
    best = max(tally.values(), default=0)
    tied = sorted(label for label, n in tally.items() if n == best)
    if best == 0 or len(tied) < 2:
        return None
    return f"{', '.join(tied)} ({_votes(best)} each)"


def winner_phrase(result: ResultRecord) -> str | None:
    """Who won and how: "A1 by agent_a (openai/a) with 2 of 3 votes", or "... by tie-break
    among A1, B1, C1 (1 vote each)" when the votes did not decide; None without a winner."""
    if result.review is not None:
        return _review_winner(result)
    w = result.winner
    if w is None:
        return None
    who = f"{w.label} by {w.agent_id} ({w.model})"
    if result.tied:
        votes = _votes(result.tally.get(w.label, 0))
        return (f"{who} by tie-break among {', '.join(result.tied)} ({votes} each; the "
                "agent listed first in the team wins a tie)")
    total = sum(result.tally.values())
    return f"{who} with {result.tally.get(w.label, 0)} of {_votes(total)}" if total else who


def _review_winner(result: ResultRecord) -> str | None:
    """A review's winner as its outcome settled it: the winning position, equal reviews
    counted together (the label tally alone does not see them), so this line and the
    review's own say the same; None when the review is inconclusive."""
    review = result.review
    assert review is not None
    if review.winner is None:
        return None
    author = review.winner_by or "?"
    model = result.agents[author].model if author in result.agents else ""
    line = (f"{review.winner} by {author}{f' ({model})' if model else ''} with "
            f"{review.agreement} of {review.members} members")
    if review.equal:
        line += f" (with {', '.join(review.equal)}, the same findings)"
    if review.tied:
        line += f"; a tie among {', '.join(review.tied)}, broken by {review.tie_break}"
    return line


def dropped_phrase(result: ResultRecord) -> str | None:
    """"1 of 3 agents dropped: agent_c (openai/c): why", or None when every agent lasted."""
    if not result.dropped:
        return None
    why = "; ".join(f"{aid} ({result.agents[aid].model}): {_short(reason, 160)}"
                    for aid, reason in result.dropped.items())
    return f"{len(result.dropped)} of {len(result.agents)} agents dropped: {why}"


def outcome_line(result: ResultRecord) -> str:
    """How a run ended, in one line: its status, why when it was not plain agreement, the
    agents it lost and why, and the winner with how it won (a tie-break is named)."""
    line = str(result.status).replace("_", " ")
    if result.finish_reason not in _SAID_BY_STATUS:
        line += f" ({result.finish_reason})"
    dropped = dropped_phrase(result)
    if dropped:
        line += f" with {dropped}"
    winner = winner_phrase(result)
    if winner:
        line += f"; {'winner' if result.status is RunStatus.COMPLETED else 'best answer'} "
        line += winner
    return line


def agreement_lines(agreement: Agreement | None, winner: str | None) -> list[str]:
    """The agreement and the dissent in a few lines, the same on every face that shows a
    result (the CLI, the report, the MCP text): "agreement: 2 of 3 live members back A1",
    the strongest losing answer with its votes, each dissenter's reason, and who was late.
    ``winner``: the winning label. Empty without a winner."""
    if agreement is None or winner is None:
        return []
    lines = [f"agreement: {agreement.backing} of {agreement.members} live members back "
             f"{winner}"]
    up = agreement.runner_up
    if up is not None:
        lines.append(f"strongest losing answer: {up.label} by {up.agent_id} ({up.model}), "
                     f"{_votes(up.votes)}: {_short(up.excerpt, 160)}")
    for d in agreement.dissent:
        voted = f"voted for {d.voted_for}" if d.voted_for else "no vote"
        lines.append(f"dissent: {d.agent_id} ({d.model}), {voted}: {_short(d.reason, 160)}")
    if agreement.late:
        lines.append(f"late (never answered): {', '.join(agreement.late)}")
    return lines


def cost_phrase(usage: Usage, *, running: bool) -> str:
    """A run's cost in words, the same rule while it runs and once it is done: unknown while
    it is unknown, the sum when every finished call had a price. A running run's record
    holds only the calls that have finished, so before the first one the $0 there is no
    price, and after it the sum is "so far"."""
    if usage.cost_usd is None:
        return "unknown (a model's price is not known)"
    if running and usage.calls == usage.cancelled_calls:
        return "not known yet (no model call has finished)"
    return f"${usage.cost_usd:.4f}" + (" so far" if running else "")


def other_errors(result: ResultRecord) -> list[str]:
    """The result's errors that :func:`outcome_line` does not already say (each dropped
    agent is there with its reason)."""
    said = {f"{aid} ({result.agents[aid].model}): {reason}"
            for aid, reason in result.dropped.items()}
    return [e for e in result.errors if e not in said]


def describe_event(event: Event) -> str | None:
    """One progress line for an event, or None for events not worth a line."""
    kind, who = event.type, event.agent_id or ""
    t = f"[{event.t or 0:6.2f}s]"
    if kind is EventType.STARTED:
        roles = event.roles or {}
        agents = ", ".join(f"{a}={m}" + (f" ({_short(roles[a], 60)})" if a in roles else "")
                           for a, m in (event.agents or {}).items())
        return f"{t} started with {agents}"
    if kind is EventType.ANSWER:
        return f"{t} {who} answered {event.label}: {_short(event.preview)}"
    if kind is EventType.VOTE:
        # Quoted: the reason is the model's words, and may read like ours ("consensus ...").
        reason = f': "{_short(event.reason)}"' if event.reason else ""
        return f"{t} {who} voted for {event.label}{reason}"
    if kind is EventType.VOTE_DISCARDED:
        return f"{t} {who}'s vote for {event.label} discarded (stale view); asking again"
    if kind is EventType.VOTES_INVALIDATED:
        return f"{t} {event.count} vote(s) invalidated by new answer {event.by}"
    if kind is EventType.INVALID_ACTION:
        return f"{t} {who} invalid action ({event.reason}), retry {event.attempt}"
    if kind is EventType.RETRY:
        return (f"{t} {who} provider {event.kind}, retry {event.attempt} "
                f"in {event.delay_s or 0:.1f}s")
    if kind is EventType.TOOL_CALL:
        outcome = f"error: {_short(event.error)}" if event.error else f"{event.chars} chars"
        return f"{t} {who} {event.tool} {_short(event.arguments, 60)} → {outcome}"
    if kind is EventType.AGENT_DROPPED:
        return f"{t} {who} dropped: {_short(event.reason, 160)}"
    if kind is EventType.CHECK:
        detail = f": {_short(event.detail, 160)}" if event.detail else ""
        return f"{t} {who} checked the final answer: {event.reason}{detail}"
    if kind is EventType.TOOLS_CUT:
        return f"{t} {who + ': ' if who else ''}{_short(event.detail, 200)}"
    if kind is EventType.RESTART:
        return f"{t} restart {event.count}: the team goes again with the check's feedback"
    if kind is EventType.QUORUM:
        late = ", ".join(event.late or [])
        return (f"{t} quorum: review starts without {late or 'nobody'} (late: "
                f"{_short(event.detail, 120)}); a late answer still joins")
    if kind is EventType.ESCALATED:
        return (f"{t} depth auto: {_short(event.detail, 80)}; the whole team joins "
                f"({', '.join(event.late or [])})")
    if kind is EventType.TURN_CANCELLED:
        cut = f", its {event.purpose} call cut off" if event.count else ""
        return f"{t} {who}'s turn cancelled{cut}: {event.reason}"
    if kind is EventType.TURN_RESTARTED:
        cut = f", its {event.purpose} call cut off" if event.count else ""
        return (f"{t} {who}'s turn restarted{cut}: new answer {event.by} arrived while it "
                "decided (a late first answer)")
    if kind is EventType.STEERED:
        cleared = f"; {event.count} earlier vote(s) no longer count" if event.count else ""
        return f"{t} your note to the team{cleared}: {_short(event.detail, 160)}"
    if kind is EventType.CONSENSUS:
        how = DECIDED.get(event.reason or "", "")
        tie = tie_among(event.tally or {})
        tied = f"; a tie among {tie}: the agent listed first wins it" if tie else ""
        return f"{t} consensus{': ' + how if how else ''}{tied}"
    if kind in (EventType.TIMEOUT, EventType.BUDGET_EXCEEDED,
                EventType.CANCELLED, EventType.FINAL_FALLBACK, EventType.FINAL_UNWRAPPED):
        detail = event.detail or event.reason or ""
        return f"{t} {kind.replace('_', ' ')} {detail}".rstrip()
    if kind is EventType.FINISHED:
        said = event.finish_reason in _SAID_BY_STATUS and (
            event.finish_reason is not FinishReason.CONSENSUS)  # "completed" says not how
        why = "" if said else f" ({event.finish_reason})"
        return f"{t} finished: {event.status}{why}"
    return None


def coordination_table(events: list[Event], agent_ids: list[str]) -> str:
    """Agent x step grid: answered (A1), voted (→B1), stale vote (~B1), invalidated (✗),
    dropped (DROP), turn cancelled by the decision (CUT), turn restarted on a late first
    answer (REDO), the user's note reached every agent
    (NOTE: the votes before it no longer count), presented the final answer (FINAL)."""
    steps: list[dict[str, str]] = []
    voted: set[str] = set()
    for event in events:
        who = event.owner or ""
        cells: dict[str, str] = {}
        if event.type is EventType.ANSWER:
            cells[who] = event.label or ""
        elif event.type is EventType.VOTE:
            cells[who] = "→" + (event.label or "")
            voted.add(who)
        elif event.type is EventType.VOTE_DISCARDED:
            cells[who] = "~" + (event.label or "")
        elif event.type is EventType.VOTES_INVALIDATED:
            cells = dict.fromkeys(voted, "✗")
            voted.clear()
        elif event.type is EventType.AGENT_DROPPED:
            cells[who] = "DROP"
        elif event.type is EventType.TURN_CANCELLED:
            cells[who] = "CUT"
        elif event.type is EventType.TURN_RESTARTED:
            cells[who] = "REDO"
        elif event.type is EventType.STEERED:
            cells = dict.fromkeys(agent_ids, "NOTE")
            voted.clear()
        elif event.type is EventType.FINAL and event.presenter:
            cells[who] = "FINAL"
        if cells:
            steps.append(cells)
    cut = max(0, len(steps) - TABLE_STEPS)
    steps = steps[cut:]
    width = max([len(a) for a in agent_ids] + [5])
    header = "agent".ljust(width) + " | " + " ".join(f"{i + 1:>5}"
                                                      for i in range(cut, cut + len(steps)))
    lines = [f"(the first {cut:,} steps are not shown)"] if cut else []
    lines += [header, "-" * len(header)]
    for aid in agent_ids:
        row = " ".join(f"{s.get(aid, ''):>5}" for s in steps)
        lines.append(aid.ljust(width) + " | " + row)
    lines.append("A1 answered · →B1 voted for B1 · ~B1 stale vote discarded · "
                 "✗ vote invalidated · DROP dropped · CUT turn cancelled by the decision · "
                 "NOTE your note reached the team (earlier votes no longer count) · "
                 "FINAL wrote the final answer")
    return "\n".join(lines)
