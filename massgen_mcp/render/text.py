"""Plain-text views of a run for people: progress lines and the coordination table."""

from __future__ import annotations

from massgen_mcp.core.records import Decision, Event, EventType, clip

PROGRESS_CHARS = 80  # one progress line per event fits a terminal
# How coordination ended (records.Decision), in words.
DECIDED: dict[str, str] = {Decision.ALL_VOTED: "every agent voted",
                           Decision.MAJORITY: "a majority decided"}


def _short(text: str | None, limit: int = PROGRESS_CHARS) -> str:
    return clip(" ".join((text or "").split()), limit)[0]


def describe_event(event: Event) -> str | None:
    """One progress line for an event, or None for events not worth a line."""
    kind, who = event.type, event.agent_id or ""
    t = f"[{event.t or 0:6.2f}s]"
    if kind is EventType.STARTED:
        agents = ", ".join(f"{a}={m}" for a, m in (event.agents or {}).items())
        return f"{t} started with {agents}"
    if kind is EventType.ANSWER:
        return f"{t} {who} answered {event.label}: {_short(event.preview)}"
    if kind is EventType.VOTE:
        return f"{t} {who} voted for {event.label}: {_short(event.reason)}"
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
    if kind is EventType.TURN_CANCELLED:
        cut = f", its {event.purpose} call cut off" if event.count else ""
        return f"{t} {who}'s turn cancelled{cut}: {event.reason}"
    if kind is EventType.CONSENSUS:
        how = DECIDED.get(event.reason or "", "")
        return f"{t} consensus{': ' + how if how else ''}"
    if kind in (EventType.TIMEOUT, EventType.BUDGET_EXCEEDED,
                EventType.CANCELLED, EventType.FINAL_FALLBACK):
        detail = event.detail or event.reason or ""
        return f"{t} {kind.replace('_', ' ')} {detail}".rstrip()
    if kind is EventType.FINISHED:
        return f"{t} finished: {event.status} ({event.finish_reason})"
    return None


def coordination_table(events: list[Event], agent_ids: list[str]) -> str:
    """Agent x step grid: answered (A1), voted (→B1), stale vote (~B1), invalidated (✗),
    dropped (DROP), turn cancelled by the decision (CUT), presented the final answer
    (FINAL)."""
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
        elif event.type is EventType.FINAL and event.presenter:
            cells[who] = "FINAL"
        if cells:
            steps.append(cells)
    width = max([len(a) for a in agent_ids] + [5])
    header = "agent".ljust(width) + " | " + " ".join(f"{i + 1:>5}" for i in range(len(steps)))
    lines = [header, "-" * len(header)]
    for aid in agent_ids:
        row = " ".join(f"{s.get(aid, ''):>5}" for s in steps)
        lines.append(aid.ljust(width) + " | " + row)
    lines.append("A1 answered · →B1 voted for B1 · ~B1 stale vote discarded · "
                 "✗ vote invalidated · DROP dropped · CUT turn cancelled by the decision · "
                 "FINAL wrote the final answer")
    return "\n".join(lines)
