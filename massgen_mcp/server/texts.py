"""The text content of our tool results: what a person reads at a glance, and all a model needs.

Hosts differ in what they pass on. Gemini CLI shows the user a result's text in full (the
pretty-printed JSON it once was made 88 lines for three one-line answers); Claude Code and
Codex hand the model the text. So the text is a few lines: the answer, the winner and tally,
dropped agents, the session id and what to do next; the full record stays in
structuredContent for programs (server/views.py shapes it), and ``get_result(detail="full")``
or the record folder has every answer and vote reason. A review's text is its verdict and
its agreed and unconfirmed findings, one line each with its tier and support
(:func:`~massgen_mcp.render.review.as_brief`), not the Markdown review that is its final
answer: evidence and fixes are in structuredContent.
"""

from __future__ import annotations

from typing import Any

from fastmcp.tools import ToolResult
from pydantic import BaseModel

from massgen_mcp.render.review import as_brief
from massgen_mcp.render.text import agreement_lines, status_words
from massgen_mcp.server.views import (
    CancelView,
    ResultView,
    ReviewHandle,
    RunHandle,
    SessionPage,
    StatusView,
    SteerView,
)

FINISHED = "finished; the result is included"


def plural(count: int, noun: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def readable(view: BaseModel) -> ToolResult:
    """The tool result for ``view``: a short text, and the view as structuredContent."""
    return ToolResult(content=text_of(view), structured_content=view)


def text_of(view: BaseModel) -> str:
    if isinstance(view, RunHandle):
        return handle_text(view)
    if isinstance(view, ResultView):
        return result_text(view)
    if isinstance(view, StatusView):
        return status_text(view)
    if isinstance(view, SessionPage):
        return page_text(view)
    if isinstance(view, CancelView | SteerView):
        return f"Session {view.session_id}: {view.message}."
    return setup_text(view.model_dump(mode="json"))


def handle_text(handle: RunHandle) -> str:
    if handle.result is None:
        text = f"Session {handle.session_id} is {handle.status}: {handle.message}."
    else:
        text = result_text(handle.result)
        text = text if handle.message == FINISHED else f"{text}\n{handle.message}."
    if isinstance(handle, ReviewHandle) and handle.notes:
        text += "\n" + "\n".join(f"Note: {note}." for note in handle.notes)
    return text


def tally_text(tally: dict[str, int]) -> str:
    ranked = sorted(tally.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{label} {plural(votes, 'vote')}" for label, votes in ranked) \
        or "no votes"


def result_text(result: ResultView) -> str:
    if result.review is not None:  # the verdict and agreed findings, not the whole review
        lines = [as_brief(result.review)]
    else:
        lines = [result.final_answer if result.final_answer is not None
                 else f"No final answer: the run {result.status}"
                      f" ({result.finish_reason or 'no reason recorded'})."]
    if result.final_answer_truncated and result.review is None:
        lines.append('[clipped; get_result(detail="full") has all of it]')
    lines.append("")
    if result.winner is not None and result.review is None:  # a review's brief says it
        won = (f"Winner {result.winner.label} ({result.winner.agent_id}, "
               f"{result.winner.model}); {tally_text(result.tally)}")
        if result.tie_broken:
            won += f"; a tie between {', '.join(result.tied)} was broken"
        lines.append(won + ".")
        lines += [f"{line[0].upper()}{line[1:]}." for line in agreement_lines(
            result.agreement, result.winner.label)]
    lines += [f"Note: {note}." for note in result.notes]
    if result.dropped:
        lines.append("Dropped: " + "; ".join(f"{agent} ({why})"
                                             for agent, why in result.dropped.items()) + ".")
    flags = [flag for flag, on in (("timed out", result.timed_out),
                                   ("over budget", result.budget_exceeded)) if on]
    if flags or result.errors:
        lines.append("Note: " + "; ".join(flags + result.errors) + ".")
    usage = result.usage
    cost = "" if usage.cost_usd is None else f", ${usage.cost_usd:.4f}"
    took = "" if result.elapsed_s is None else f" in {result.elapsed_s:.1f} s"
    lines.append(f"Session {result.session_id}: {result.status} ({result.finish_reason})"
                 f"{took}, {plural(usage.calls, 'model call')}{cost}. Every answer and vote "
                 f'reason: get_result(session_id, detail="full"), or {result.record_dir}.')
    return "\n".join(lines)


def status_text(status: StatusView) -> str:
    head = (f"Session {status.session_id}: {status_words(status.status, status.phase)}, "
            f"{status.elapsed_s:.0f} s; {plural(len(status.answers), 'answer')}; "
            f"{tally_text(status.tally)}.")
    agents = []
    for agent in status.agents:
        if agent.dropped_reason:
            doing = f"dropped ({agent.dropped_reason})"
        elif agent.draft is not None:
            doing = f"writing… {plural(agent.draft.tokens, 'token')}"
        elif agent.voted_for:
            doing = f"voted {agent.voted_for}"
        else:
            doing = agent.activity or agent.phase
        agents.append(f"{agent.agent_id} ({agent.model}): {doing}")
    return "\n".join([head, "; ".join(agents), status.next_step[:1].upper()
                      + status.next_step[1:] + "."])


def page_text(page: SessionPage) -> str:
    if not page.sessions:
        return "No sessions."
    lines = [f"{item.session_id}  {item.status}  winner {item.winner or '-'}  {item.question}"
             for item in page.sessions]
    if page.next_cursor:
        lines.append(f"More: list_sessions(cursor={page.next_cursor!r}).")
    return "\n".join(lines)


def setup_text(setup: dict[str, Any]) -> str:
    """check_setup's fields, one a line (names of providers only, never key values)."""
    lines = []
    for key, value in setup.items():
        if isinstance(value, list):
            value = "; ".join(", ".join(f"{k} {v}" for k, v in item.items())
                              if isinstance(item, dict) else str(item)
                              for item in value) or "none"
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        lines.append(f"{key}: {value}")
    return "\n".join(lines)
