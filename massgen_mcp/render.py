"""Plain-text views of a run for people: progress lines and the coordination table."""

from __future__ import annotations

from typing import Any


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_event(event: dict[str, Any]) -> str | None:
    """One progress line for an event, or None for events not worth a line."""
    kind, who = event.get("type"), event.get("agent_id", "")
    t = f"[{event.get('t', 0):6.2f}s]"
    if kind == "started":
        agents = ", ".join(f"{a}={m}" for a, m in event.get("agents", {}).items())
        return f"{t} started with {agents}"
    if kind == "answer":
        return f"{t} {who} answered {event['label']}: {_short(event.get('preview', ''))}"
    if kind == "vote":
        return f"{t} {who} voted for {event['label']}: {_short(event.get('reason', ''))}"
    if kind == "vote_discarded":
        return f"{t} {who}'s vote for {event['label']} discarded (stale view); asking again"
    if kind == "votes_invalidated":
        return f"{t} {event['count']} vote(s) invalidated by new answer {event['by']}"
    if kind == "invalid_action":
        return f"{t} {who} invalid action ({event['reason']}), retry {event['attempt']}"
    if kind == "retry":
        return (f"{t} {who} provider {event['kind']}, retry {event['attempt']} "
                f"in {event['delay_s']:.1f}s")
    if kind == "agent_dropped":
        return f"{t} {who} dropped: {_short(event['reason'], 160)}"
    if kind in ("consensus", "timeout", "budget_exceeded", "cancelled", "final_fallback"):
        detail = event.get("detail") or event.get("reason") or ""
        return f"{t} {kind.replace('_', ' ')} {detail}".rstrip()
    if kind == "finished":
        return f"{t} finished: {event['status']} ({event['finish_reason']})"
    return None


_STEP_EVENTS = ("answer", "vote", "vote_discarded", "votes_invalidated", "agent_dropped", "final")


def coordination_table(events: list[dict[str, Any]], agent_ids: list[str]) -> str:
    """Agent x step grid: answered (A1), voted (→B1), stale vote (~B1), invalidated (✗),
    dropped (DROP), presented the final answer (FINAL)."""
    steps: list[dict[str, str]] = []
    voted: set[str] = set()
    for event in events:
        kind, who = event.get("type"), event.get("agent_id") or event.get("presenter")
        if kind not in _STEP_EVENTS:
            continue
        cells: dict[str, str] = {}
        if kind == "answer":
            cells[who] = event["label"]
        elif kind == "vote":
            cells[who] = "→" + event["label"]
            voted.add(who)
        elif kind == "vote_discarded":
            cells[who] = "~" + event["label"]
        elif kind == "votes_invalidated":
            cells = dict.fromkeys(voted, "✗")
            voted.clear()
        elif kind == "agent_dropped":
            cells[who] = "DROP"
        elif kind == "final" and who:
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
                 "✗ vote invalidated · DROP dropped · FINAL wrote the final answer")
    return "\n".join(lines)
