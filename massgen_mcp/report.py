"""A self-contained HTML report of one session: timeline, vote matrix, answers, usage.

One file, no network: inline CSS (light and dark), no scripts, hover text via ``title``. Every
string that came from a model or a user is HTML-escaped before it is placed in the page, and
the final answer's Markdown is rendered by a deliberately small converter that works on the
escaped text, so an answer can never inject markup.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

_MARKS = {
    "answer": ("●", "answer"),
    "vote": ("▲", "vote"),
    "vote_discarded": ("△", "stale vote"),
    "votes_invalidated": ("✗", "votes invalidated"),
    "invalid_action": ("!", "invalid action"),
    "retry": ("↻", "provider retry"),
    "agent_dropped": ("■", "dropped"),
    "final": ("★", "final answer"),
}

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
text-overflow:ellipsis;white-space:nowrap}.track{position:relative;height:100%}
.ev{position:absolute;top:7px;transform:translateX(-50%);font-size:15px;cursor:default}
.ev.answer{color:var(--accent)}.ev.vote{color:var(--win)}.ev.agent_dropped,
.ev.invalid_action{color:var(--bad)}.ev.retry,.ev.vote_discarded,
.ev.votes_invalidated{color:var(--warn)}.ev.final{color:var(--win)}
.axis{display:grid;grid-template-columns:150px 1fr;font-size:12px;color:var(--muted)}
.axis .ticks{display:flex;justify-content:space-between}
table{border-collapse:collapse;width:100%;font-size:14px}th,td{border:1px solid var(--line);
padding:4px 8px;text-align:left}td.vote{text-align:center}td.current{font-weight:700;
color:var(--win)}.final-answer{font-size:15px}.final-answer pre{overflow:auto}
pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
pre{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px;
white-space:pre-wrap;word-break:break-word}details{margin:6px 0}summary{cursor:pointer}
.legend span{margin-right:14px}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


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


def _event_title(event: dict[str, Any]) -> str:
    kind = event["type"]
    parts = [f"{_MARKS.get(kind, ('', kind))[1]} at {event.get('t', 0):.2f}s"]
    for key in ("label", "reason", "problem", "error", "by", "count"):
        if event.get(key) not in (None, ""):
            parts.append(f"{key}: {event[key]}")
    return " · ".join(parts)


def _timeline(events: list[dict[str, Any]], agents: list[str]) -> str:
    end = max([e.get("t", 0) for e in events] + [0.001])
    lanes = []
    for aid in agents:
        marks = []
        for e in events:
            owner = e.get("agent_id") or (e.get("presenter") if e["type"] == "final" else None)
            if e["type"] not in _MARKS or (owner != aid and e["type"] != "votes_invalidated"):
                continue
            left = 100 * e.get("t", 0) / end
            symbol = _MARKS[e["type"]][0]
            marks.append(f'<span class="ev {e["type"]}" style="left:{left:.2f}%" '
                         f'title="{_e(_event_title(e))}">{symbol}</span>')
        lanes.append(f'<div class="lane" data-agent="{_e(aid)}"><div class="who">{_e(aid)}'
                     f'</div><div class="track">{"".join(marks)}</div></div>')
    digits = 2 if end < 2 else 1
    ticks = "".join(f"<span>{end * i / 4:.{digits}f}s</span>" for i in range(5))
    legend = "".join(f"<span>{sym} {name}</span>" for sym, name in _MARKS.values())
    return (f'<div class="lanes">{"".join(lanes)}</div><div class="axis"><span></span>'
            f'<div class="ticks">{ticks}</div></div><p class="legend muted">{legend}</p>')


def _vote_matrix(events: list[dict[str, Any]], agents: list[str],
                 result: dict[str, Any]) -> str:
    votes = [e for e in events if e["type"] == "vote"]
    labels = sorted({e["label"] for e in votes} | set(result.get("tally", {})))
    current = {(v["voter"], v["answer"]) for v in result.get("votes", [])}
    if not labels:
        return '<p class="muted">No votes were cast.</p>'
    head = "".join(f"<th>{_e(label)}</th>" for label in labels)
    rows = []
    for aid in agents:
        cells = []
        for label in labels:
            cast = [v for v in votes if v["agent_id"] == aid and v["label"] == label]
            if not cast:
                cells.append("<td></td>")
                continue
            reason = " | ".join(str(v.get("reason") or "") for v in cast)
            cls = "vote current" if (aid, label) in current else "vote"
            mark = "✔" if (aid, label) in current else "○"
            cells.append(f'<td class="{cls}" title="{_e(reason)}">{mark}</td>')
        rows.append(f"<tr><th>{_e(aid)}</th>{''.join(cells)}</tr>")
    return (f"<table class='matrix'><tr><th>voter \\ answer</th>{head}</tr>{''.join(rows)}"
            "</table><p class='muted'>✔ vote that counted at the end · ○ earlier vote, "
            "invalidated by a newer answer · hover for the reason</p>")


def render_report(status: dict[str, Any], result: dict[str, Any] | None,
                  events: list[dict[str, Any]], answers: dict[str, str]) -> str:
    """The whole page as a string."""
    result = result or {}
    agents = list(status.get("agents", {}))
    winner = result.get("winner") or {}
    usage = result.get("usage") or status.get("usage") or {}
    state = result.get("status") or status.get("status", "running")
    agent_rows = []
    for aid, info in (result.get("agents") or status.get("agents") or {}).items():
        u = info.get("usage") or {}
        agent_rows.append(
            f"<tr><td>{_e(aid)}</td><td>{_e(info.get('model'))}</td>"
            f"<td>{_e(info.get('status') or info.get('phase'))}</td><td>{_e(u.get('calls'))}"
            f"</td><td>{_e(u.get('prompt_tokens'))}</td><td>{_e(u.get('completion_tokens'))}"
            f"</td><td>{_e('unknown' if u.get('cost_usd') is None else u['cost_usd'])}</td>"
            f"<td>{_e(info.get('dropped_reason') or '')}"
            "</td></tr>")
    answer_blocks = "".join(
        f"<details{' open' if label == winner.get('label') else ''}><summary>{_e(label)}"
        f"{' (winner)' if label == winner.get('label') else ''}</summary>"
        f"<pre>{_e(text)}</pre></details>" for label, text in sorted(answers.items()))
    final = result.get("final_answer")
    final_html = (f'<div class="card final-answer">{markdown(final)}</div>' if final else
                  '<p class="muted">No final answer.</p>')
    tally = ", ".join(f"{label}: {n}" for label, n in (result.get("tally") or {}).items())
    winner_line = (f"Winner <strong>{_e(winner.get('label'))}</strong> by "
                   f"{_e(winner.get('agent_id'))} ({_e(winner.get('model'))}) · votes "
                   f"{_e(tally)}" if winner else "No winner.")
    cost = usage.get("cost_usd")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>massgen session {_e(status.get('session_id'))}</title><style>{CSS}</style></head>
<body>
<h1>{_e(status.get('question'))}</h1>
<p class="muted">session {_e(status.get('session_id'))} ·
<span class="badge {_e(state)}" id="status">{_e(state)}</span>
{_e(result.get('finish_reason') or status.get('finish_reason') or '')} ·
{_e(status.get('elapsed_s'))} s · {_e(usage.get('calls'))} calls ·
{_e(usage.get('prompt_tokens'))} prompt + {_e(usage.get('completion_tokens'))} completion
tokens · cost {'unknown' if cost is None else f'${cost:.4f}'}</p>
<p id="winner">{winner_line}</p>
<h2>Final answer</h2>{final_html}
<h2>Timeline</h2>{_timeline(events, agents)}
<h2>Votes</h2>{_vote_matrix(events, agents, result)}
<h2>Answers</h2>{answer_blocks or '<p class="muted">No answers yet.</p>'}
<h2>Agents and usage</h2>
<table><tr><th>agent</th><th>model</th><th>status</th><th>calls</th><th>prompt tokens</th>
<th>completion tokens</th><th>cost (USD)</th><th>dropped because</th></tr>
{''.join(agent_rows)}</table>
</body></html>
"""


def session_report(store: Any, session_id: str, *, live: bool = False) -> str:
    """Render a session's report from its record. ``live`` adds a 2-second auto-refresh
    while the run is still going (the live page on the HTTP server)."""
    status = store.read_status(session_id)
    answers: dict[str, str] = {}
    folder = store.folder(session_id) / "answers"
    if folder.is_dir():
        answers = {p.stem: p.read_text(encoding="utf-8") for p in folder.glob("*.md")}
    page = render_report(status, store.read_result(session_id), store.read_events(session_id),
                         answers)
    if live and status.get("status") == "running":
        page = page.replace("<head>", '<head><meta http-equiv="refresh" content="2">', 1)
    return page


def write_report(store: Any, session_id: str) -> Path:
    """Write ``report.html`` into the session folder (atomically) and return its path."""
    from massgen_mcp.sessions.store import atomic_write

    path = store.folder(session_id) / "report.html"
    atomic_write(path, session_report(store, session_id))
    return path
