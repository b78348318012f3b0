"""A self-contained HTML report of one session: timeline, vote matrix, answers, usage.

One file, no network: inline CSS (light and dark), no scripts, hover text via ``title``. Every
string that came from a model or a user is HTML-escaped before it is placed in the page, and
the final answer's Markdown is rendered by a deliberately small converter that works on the
escaped text, so an answer can never inject markup.

The one exception is the live page the HTTP server shows while a run goes on: it adds one box
per agent and one fixed inline script (:data:`LIVE_SCRIPT`, allowed by its hash in
:data:`LIVE_CSP`) that follows the server's event stream and writes each agent's draft with
``textContent``, so a draft (model output, mid-sentence) is never parsed as markup either.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from massgen_mcp.core.records import Event, EventType, RunStatus, clip
from massgen_mcp.core.run_state import ResultRecord, SessionRecord
from massgen_mcp.render.format import escape as _e
from massgen_mcp.render.review_html import REVIEW_CSS, review_section
from massgen_mcp.render.text import (
    DECIDED,
    agreement_lines,
    cost_phrase,
    dropped_phrase,
    other_errors,
    winner_phrase,
)

if TYPE_CHECKING:
    from massgen_mcp.core.run_state import SessionSummary

_MARKS = {
    EventType.ANSWER: ("●", "answer"),
    EventType.VOTE: ("▲", "vote"),
    EventType.VOTE_DISCARDED: ("△", "stale vote"),
    EventType.VOTES_INVALIDATED: ("✗", "votes invalidated"),
    EventType.INVALID_ACTION: ("!", "invalid action"),
    EventType.RETRY: ("↻", "provider retry"),
    EventType.TOOL_CALL: ("◆", "tool call"),
    EventType.AGENT_DROPPED: ("■", "dropped"),
    EventType.FINAL: ("★", "final answer"),
    EventType.CHECK: ("✓", "final answer checked"),
    EventType.RESTART: ("⟲", "restart"),
    EventType.QUORUM: ("◷", "late: review began without it"),
    EventType.TURN_CANCELLED: ("✂", "turn cancelled by the decision"),
    EventType.TURN_RESTARTED: ("⤺", "turn restarted on a late first answer"),
    EventType.STEERED: ("✉", "your note to the team"),
}
# Events about the whole team: drawn in every agent's lane.
_TEAM_WIDE = (EventType.VOTES_INVALIDATED, EventType.RESTART, EventType.STEERED)

_LIST_MARK = re.compile(r"^\s*([-*]|\d+\.)\s+")

LIGHT_COLOURS = ("--bg:#fff;--fg:#1d2330;--muted:#667085;--line:#d0d5dd;--card:#f6f7f9;"
                 "--accent:#2563eb;--win:#16a34a;--bad:#dc2626;--warn:#d97706")
DARK_COLOURS = ("--bg:#0f1117;--fg:#e6e8ee;--muted:#98a2b3;--line:#2c313c;--card:#171a22;"
                "--accent:#60a5fa;--win:#4ade80;--bad:#f87171;--warn:#fbbf24")

CSS = (f":root{{{LIGHT_COLOURS}}}\n"
       f"@media (prefers-color-scheme:dark){{:root{{{DARK_COLOURS}}}}}") + """
*{box-sizing:border-box}body{margin:0;padding:24px;background:var(--bg);color:var(--fg);
font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.muted{color:var(--muted)}.card{background:var(--card);border:1px solid var(--line);
border-radius:8px;padding:12px 16px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;
border:1px solid var(--line)}.completed{color:var(--win)}.failed,.cancelled{color:var(--bad)}
.timed_out,.interrupted,.running{color:var(--warn)}
.lanes{position:relative}.lane{display:grid;grid-template-columns:150px 1fr;align-items:center;
height:34px;border-bottom:1px dashed var(--line)}.lane .who{font-size:13px;overflow:hidden;
text-overflow:ellipsis;white-space:nowrap}.track{position:relative;height:100%;margin:0 12px}
.ev{position:absolute;top:7px;transform:translateX(-50%);font-size:15px;cursor:default}
.ev.answer{color:var(--accent)}.ev.vote{color:var(--win)}.ev.agent_dropped,
.ev.invalid_action{color:var(--bad)}.ev.retry,.ev.vote_discarded,
.ev.votes_invalidated{color:var(--warn)}.ev.final{color:var(--win)}
.axis{display:grid;grid-template-columns:150px 1fr;font-size:12px;color:var(--muted)}
.axis .ticks{display:flex;justify-content:space-between;margin:0 12px}.problems{color:var(--bad)}
table{border-collapse:collapse;width:100%;font-size:14px}th,td{border:1px solid var(--line);
padding:4px 8px;text-align:left}td.vote{text-align:center}td.current{font-weight:700;
color:var(--win)}.final-answer{font-size:15px}.final-answer pre{overflow:auto}
pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
pre{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px;
white-space:pre-wrap;word-break:break-word}details{margin:6px 0}summary{cursor:pointer}
.legend span{margin-right:14px}.ev.steered{color:var(--accent)}
.notes{margin:10px 0}.notes ol{margin:4px 0 0;padding-left:22px}.notes li{white-space:pre-wrap}
.boxes{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.agent-box{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:8px 12px;min-width:0}.agent-box.writing{border-color:var(--accent)}
.agent-box .head{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap;font-size:13px}
.agent-box .draft{margin:6px 0 0;min-height:5.5em;max-height:14em;overflow:hidden;
display:flex;flex-direction:column-reverse}.agent-box:not(.writing) .draft{color:var(--muted)}
"""

# The live page's one script. It follows ``<page>/live`` (server-sent events: ``status`` with
# the run's state and every agent's draft, ``end`` once the run is over), writes drafts and
# notes with textContent only, re-reads the page itself when the run moves on (a new answer or
# vote: the report below the boxes changes), and reloads once at the end for the final report
# (or every 5 s if the server refused the stream).
LIVE_SCRIPT = """
"use strict";
(() => {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const boxes = new Map([...live.querySelectorAll(".agent-box")]
    .map((box) => [box.dataset.agent, box]));
  let revision = live.dataset.revision, busy = false, again = false;
  const source = new EventSource(location.pathname.replace(/\\/?$/, "/live") + location.search);
  source.addEventListener("status", (event) => draw(JSON.parse(event.data)));
  source.addEventListener("end", () => { source.close(); location.reload(); });
  // Refused (too many streams open): no stream, so reload now and then, as without scripts.
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) setTimeout(() => location.reload(), 5000);
  });

  function draw(s) {
    live.dataset.state = s.status;
    for (const a of s.agents) {
      const box = boxes.get(a.id);
      if (!box) continue;
      box.classList.toggle("writing", a.draft !== null);
      box.querySelector(".phase").textContent =
        a.activity ? `${a.phase} · ${a.activity}` : a.phase;
      const d = a.draft;
      box.querySelector(".stats").textContent = d === null ? ""
        : `${d.purpose} · ${d.tokens} token${d.tokens === 1 ? "" : "s"}`
          + (d.first_token_s === null ? "" : ` · first token ${d.first_token_s.toFixed(1)} s`);
      if (d !== null) box.querySelector(".draft code").textContent = d.text;
    }
    const notes = document.getElementById("notes");
    notes.hidden = s.notes.length === 0;
    notes.querySelector("ol").replaceChildren(...s.notes.map((note) => {
      const item = document.createElement("li");
      item.textContent = note;
      return item;
    }));
    if (String(s.revision) !== revision) {
      revision = String(s.revision);
      refresh();
    }
  }

  // The report below the boxes, re-rendered by the server: parsed with DOMParser (which runs
  // no script) and swapped in; one fetch at a time, one more if the run moved meanwhile.
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        const reply = await fetch(location.href, { cache: "no-store" });
        if (!reply.ok) return;
        const page = new DOMParser().parseFromString(await reply.text(), "text/html");
        for (const id of ["head", "report"]) {
          const fresh = page.getElementById(id);
          if (fresh) document.getElementById(id).replaceWith(document.adoptNode(fresh));
        }
      } while (again);
    } finally {
      busy = false;
    }
  }
})();
"""
_LIVE_SCRIPT_HASH = base64.b64encode(hashlib.sha256(LIVE_SCRIPT.encode()).digest()).decode()
# What the pages may do: styles inline, nothing else loaded, no script at all in a report...
REPORT_CSP = ("default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
              "form-action 'none'; frame-ancestors 'none'")
# ... and on the live page exactly LIVE_SCRIPT, talking to this server only.
LIVE_CSP = (f"{REPORT_CSP}; script-src 'sha256-{_LIVE_SCRIPT_HASH}'; connect-src 'self'")



def markdown(text: str) -> str:
    """A small, safe Markdown subset: headings, emphasis, code, lists, paragraphs."""
    out: list[str] = []
    blocks = re.split(r"(```.*?```)", text or "", flags=re.DOTALL)
    for block in blocks:
        if block.startswith("```") and block.endswith("```"):
            code = block[3:-3].split("\n", 1)
            out.append(f"<pre><code>{_e(code[1] if len(code) > 1 else code[0])}</code></pre>")
            continue
        for para in re.split(r"\n\s*\n", block):
            lines = [ln for ln in para.strip("\n").split("\n") if ln.strip()]
            if not lines:
                continue
            if all(_LIST_MARK.match(ln) for ln in lines):
                tag = "ol" if re.match(r"\s*\d+\.", lines[0]) else "ul"
                items = "".join(f"<li>{_inline(_LIST_MARK.sub('', ln))}</li>" for ln in lines)
                out.append(f"<{tag}>{items}</{tag}>")
                continue
            heading = re.match(r"(#{1,6})\s+(.*)", lines[0])
            if heading and len(lines) == 1:
                level = min(len(heading.group(1)) + 2, 6)
                out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
                continue
            out.append("<p>" + "<br>".join(_inline(ln) for ln in lines) + "</p>")
    return "\n".join(out)


def _inline(text: str) -> str:
    escaped = _e(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    escaped = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"(?<![*\w])\*([^*]+)\*(?!\*)", r"<em>\1</em>", escaped)


def _event_title(event: Event) -> str:
    parts = [f"{_MARKS[event.type][1]} at {event.t or 0:.2f}s"]
    for key in ("tool", "arguments", "chars", "label", "reason", "problem", "error", "by",
                "count", "detail", "late"):
        value = getattr(event, key)
        if value not in (None, ""):
            parts.append(f"{key}: {value}")
    return " · ".join(parts)


def _timeline(events: list[Event], agents: list[str]) -> str:
    end = max([e.t or 0 for e in events] + [0.001])
    lanes = []
    for aid in agents:
        marks = []
        for e in events:
            if e.type not in _MARKS:
                continue
            if e.type is EventType.QUORUM:
                if aid not in (e.late or []):
                    continue
            elif e.owner != aid and e.type not in _TEAM_WIDE:
                continue
            left = 100 * (e.t or 0) / end
            marks.append(f'<span class="ev {e.type}" style="left:{left:.2f}%" '
                         f'title="{_e(_event_title(e))}">{_MARKS[e.type][0]}</span>')
        lanes.append(f'<div class="lane" data-agent="{_e(aid)}"><div class="who">{_e(aid)}'
                     f'</div><div class="track">{"".join(marks)}</div></div>')
    digits = 2 if end < 2 else 1
    ticks = "".join(f"<span>{end * i / 4:.{digits}f}s</span>" for i in range(5))
    legend = "".join(f"<span>{sym} {name}</span>" for sym, name in _MARKS.values())
    return (f'<div class="lanes">{"".join(lanes)}</div><div class="axis"><span></span>'
            f'<div class="ticks">{ticks}</div></div><p class="legend muted">{legend}</p>')


def _vote_matrix(events: list[Event], agents: list[str], result: ResultRecord | None) -> str:
    votes = [e for e in events if e.type is EventType.VOTE]
    labels = sorted({e.label for e in votes if e.label} | set(result.tally if result else {}))
    current = {(v.voter, v.answer) for v in (result.votes if result else [])}
    if not labels:
        return '<p class="muted">No votes were cast.</p>'
    head = "".join(f"<th>{_e(label)}</th>" for label in labels)
    rows = []
    for aid in agents:
        cells = []
        for label in labels:
            cast = [v for v in votes if v.agent_id == aid and v.label == label]
            if not cast:
                cells.append("<td></td>")
                continue
            reason = " | ".join(v.reason or "" for v in cast)
            cls = "vote current" if (aid, label) in current else "vote"
            mark = "✔" if (aid, label) in current else "○"
            cells.append(f'<td class="{cls}" title="{_e(reason)}">{mark}</td>')
        rows.append(f"<tr><th>{_e(aid)}</th>{''.join(cells)}</tr>")
    return (f"<table class='matrix'><tr><th>voter \\ answer</th>{head}</tr>{''.join(rows)}"
            "</table><p class='muted'>✔ vote that counted at the end · ○ earlier vote, "
            "invalidated by a newer answer · hover for the reason</p>")


def _agent_rows(record: SessionRecord) -> str:
    rows = []
    result_agents = record.result.agents if record.result else {}
    for aid, live in record.status.agents.items():
        done = result_agents.get(aid)
        u = done.usage if done else live.usage
        state = done.status if done else live.phase
        dropped = (done.dropped_reason if done else live.dropped_reason) or ""
        role = record.roles.get(aid)  # the agent's own role: the report's reader may see it
        shown = "" if role is None else (
            f'<br><span class="muted" title="{_e(role)}">role: {_e(clip(role, 60)[0])}</span>')
        rows.append(
            f"<tr><td>{_e(aid)}{shown}</td><td>{_e(live.model)}</td><td>{_e(state)}</td>"
            f"<td>{_e(u.calls)}</td><td>{_e(u.prompt_tokens)}</td>"
            f"<td>{_e(u.completion_tokens)}</td>"
            f"<td>{_e('unknown' if u.cost_usd is None else u.cost_usd)}</td>"
            f"<td>{_e(dropped)}</td></tr>")
    return "".join(rows)


def _how_decided(record: SessionRecord) -> str:
    """Why coordination ended, for the winner line: " · a majority decided; ..."."""
    decided = record.result.decided_by if record.result else None
    if decided is None:
        return ""
    parts = [DECIDED[decided]]
    late = sorted({a for e in record.events if e.type is EventType.QUORUM for a in e.late or []})
    if late:
        parts.append("review began without " + ", ".join(late) + " (late)")
    cut = [e.agent_id for e in record.events
           if e.type is EventType.TURN_CANCELLED and e.agent_id]
    if cut:
        parts.append("turns cancelled: " + ", ".join(cut))
    return " · " + "; ".join(parts)


def _authors(record: SessionRecord) -> dict[str, str]:
    """Answer label -> "agent_a (openai/a)", for every answer ever given: the labels are
    anonymous to the agents, not to the person reading the report."""
    models = {aid: a.model for aid, a in record.status.agents.items()}
    return {e.label: f"{e.agent_id} ({models.get(e.agent_id, '?')})" for e in record.events
            if e.type is EventType.ANSWER and e.label and e.agent_id}


def _outcome(record: SessionRecord) -> str:
    """The winner line (escaped HTML): while the run goes on, that it is running, not that
    there is no winner; at the end the winner and how it won (a tie-break named), then the
    agents that were dropped and the run's other problems."""
    status, result = record.status, record.result
    if result is None:
        if status.status is RunStatus.RUNNING:
            return f"Running ({_e(status.phase)}): no winner yet."
        return "No winner."
    phrase = winner_phrase(result)
    line = (f"Winner <strong>{_e(result.winner.label)}</strong>"
            f"{_e(phrase.removeprefix(result.winner.label))}{_e(_how_decided(record))}"
            if result.winner and phrase else "No winner.")
    if result.review is None:  # a review's section says its own agreement and dissent
        line += "".join(f"<br>{_e(extra)}" for extra in agreement_lines(
            result.agreement, result.winner.label if result.winner else None))
    line += "".join(f"<br>{_e(note)}" for note in result.notes)
    problems = [p for p in [dropped_phrase(result)] if p] + other_errors(result)
    if problems:
        line += "".join(f'<br><span class="problems">{_e(p)}</span>' for p in problems)
    return line


def _notes(record: SessionRecord, *, live: bool) -> str:
    """The user's steering notes, in the page's header: each with when it came and the votes
    it cleared. On the live page the list is always there (hidden while empty) for the
    script to fill as notes arrive."""
    steered = [e for e in record.events if e.type is EventType.STEERED]
    if not steered and not live:
        return ""
    items = "".join(
        f'<li title="at {e.t or 0:.2f}s · {_e(e.count or 0)} vote(s) cleared">{_e(e.detail)}</li>'
        for e in steered)
    return (f'<div class="card notes" id="notes"{"" if steered else " hidden"}>'
            f"<strong>Your notes to the team</strong> <span class=\"muted\">(every agent "
            f"sees them from its next turn; votes cast before a note no longer count)</span>"
            f"<ol>{items}</ol></div>")


def _live_boxes(record: SessionRecord) -> str:
    """One box per agent, filled by :data:`LIVE_SCRIPT` from the event stream."""
    status = record.status
    boxes = "".join(
        f'<div class="agent-box" data-agent="{_e(aid)}"><div class="head"><strong>{_e(aid)}'
        f'</strong><span class="muted">{_e(a.model)}</span><span class="phase">{_e(a.phase)}'
        f'</span><span class="stats muted"></span></div><pre class="draft"><code></code></pre>'
        "</div>" for aid, a in status.agents.items())
    return (f'<section id="live" data-revision="{_e(status.revision)}" data-state="'
            f'{_e(status.status)}"><h2>Live</h2><div class="boxes">{boxes}</div></section>')


def _skipped(record: SessionRecord) -> str:
    """The note that the record held more events than are read at once: the timeline, votes
    and notes show its last ones."""
    if not record.events_skipped:
        return ""
    return (f'<p class="muted" id="skipped">{record.events_skipped:,} earlier events skipped: '
            f"the record holds more than are read at once; the timeline and votes show the "
            f"last {len(record.events):,}.</p>")


def render_report(record: SessionRecord, *, live: bool = False) -> str:
    """The whole page as a string. ``live`` (the HTTP server's page) adds, while the run is
    still going, one box per agent with its draft as it is written, and
    :data:`LIVE_SCRIPT` to keep them current (the server must send :data:`LIVE_CSP` with
    it); without scripts the page refreshes itself every 2 s instead."""
    status, result = record.status, record.result
    agents = list(status.agents)
    winner = result.winner if result else None
    usage = result.usage if result else status.usage
    state = result.status if result else status.status
    reason = (result.finish_reason if result else None) or status.finish_reason or ""
    authors = _authors(record)
    answer_blocks = "".join(
        f"<details{' open' if winner and label == winner.label else ''}><summary>{_e(label)}"
        f" by {_e(authors.get(label, 'an unknown agent'))}"
        f"{' (winner)' if winner and label == winner.label else ''}</summary>"
        f"<pre>{_e(text)}</pre></details>" for label, text in sorted(record.answers.items()))
    final = result.final_answer if result else None
    final_html = (f'<div class="card final-answer">{markdown(final)}</div>' if final else
                  '<p class="muted">No final answer.</p>')
    running = live and status.status is RunStatus.RUNNING
    refresh = '<noscript><meta http-equiv="refresh" content="2"></noscript>' if running else ""
    script = f"<script>{LIVE_SCRIPT}</script>" if running else ""
    review = review_section(record)  # "" unless the run is a review: then its findings
    styles = CSS + REVIEW_CSS if review else CSS
    return f"""<!doctype html>
<html lang="en"><head>{refresh}<meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>massgen session {_e(status.session_id)}</title><style>{styles}</style></head>
<body>
<header id="head">
<h1>{_e(status.question)}</h1>
<p class="muted">session {_e(status.session_id)} ·
<span class="badge {_e(state)}" id="status">{_e(state)}</span>
{_e(reason)} ·
{_e(status.elapsed_s)} s · {_e(usage.calls)} calls ·
{_e(usage.prompt_tokens)} prompt + {_e(usage.completion_tokens)} completion
tokens · cost {_e(cost_phrase(usage, running=status.status is RunStatus.RUNNING))}</p>
{_notes(record, live=running)}</header>
{_live_boxes(record) if running else ""}
<div id="report">
<p id="winner">{_outcome(record)}</p>{review}
<h2>Final answer</h2>{final_html}
<h2>Timeline</h2>{_skipped(record)}{_timeline(record.events, agents)}
<h2>Votes</h2>{_vote_matrix(record.events, agents, result)}
<h2>Answers</h2>{answer_blocks or '<p class="muted">No answers yet.</p>'}
<h2>Agents and usage</h2>
<table><tr><th>agent</th><th>model</th><th>status</th><th>calls</th><th>prompt tokens</th>
<th>completion tokens</th><th>cost (USD)</th><th>dropped because</th></tr>
{_agent_rows(record)}</table>
</div>{script}
</body></html>
"""


def render_session_list(sessions: Sequence[SessionSummary], *, link_suffix: str = "") -> str:
    """The live list of sessions on the HTTP server (``/sessions``), refreshing every 5 s;
    ``link_suffix`` carries the page's token on to each session's page."""
    rows = "".join(
        f"<tr><td><a href='/sessions/{_e(s.session_id)}{_e(link_suffix)}'>{_e(s.session_id)}"
        f"</a></td><td>{_e(s.status)}</td><td>{_e(s.winner or '')}</td>"
        f"<td>{_e(clip(' '.join(s.question.split()), 120)[0])}</td></tr>" for s in sessions)
    return (
        "<!doctype html><meta charset='utf-8'><meta http-equiv='refresh' content='5'>"
        f"<title>massgen sessions</title><style>{CSS}</style><body><h1>massgen sessions</h1>"
        "<table><tr><th>session</th><th>status</th><th>winner</th><th>question</th>"
        f"</tr>{rows}</table></body>")
