"""What the MCP tools do, as plain async methods with typed results.

The MCP layer (:mod:`massgen_mcp.server`) only adapts these to the protocol; tests and other
front-ends can call them directly. Results are pydantic models so every tool has an output schema.
Answers are truncated in summaries so a ``get_result`` stays well under 8k tokens; the full text
is always one ``detail="full"`` call or one resource read away.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from massgen_mcp import __version__
from massgen_mcp.config import (
    MAX_CONTEXT_CHARS,
    PROVIDER_KEY_ENV,
    RunOptions,
    TeamConfig,
    build_team,
    check_question,
)
from massgen_mcp.context_files import confine, read_context_files
from massgen_mcp.defaults import choose_team, discover
from massgen_mcp.errors import ConfigError, SessionStateError
from massgen_mcp.sessions.runner import LiveRun, SessionRunner
from massgen_mcp.sessions.store import TERMINAL_STATUSES, SessionStore, check_session_id

SUMMARY_ANSWER_CHARS = 600
SUMMARY_FINAL_CHARS = 16_000
PREVIEW_CHARS = 160

Status = Literal["running", "completed", "failed", "timed_out", "cancelled", "interrupted"]


class UsageView(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None


class AgentView(BaseModel):
    agent_id: str
    model: str
    phase: str
    answers: int
    current_answer: str | None = None
    voted_for: str | None = None
    dropped_reason: str | None = None


class AnswerView(BaseModel):
    label: str
    agent_id: str
    text: str
    truncated: bool = False


class VoteView(BaseModel):
    voter: str
    answer: str
    reason: str


class WinnerView(BaseModel):
    label: str
    agent_id: str
    model: str


class StatusView(BaseModel):
    session_id: str
    status: Status
    done: bool
    phase: str
    elapsed_s: float
    question: str
    agents: list[AgentView]
    answers: list[AnswerView]
    tally: dict[str, int]
    usage: UsageView
    finish_reason: str | None = None
    revision: int = Field(0, description="grows with every change; pass it back as "
                                         "after_revision so no update is missed")
    next_step: str


class ResultView(BaseModel):
    session_id: str
    status: Status
    finish_reason: str | None
    final_answer: str | None
    final_answer_truncated: bool = False
    winner: WinnerView | None
    tie_broken: bool
    timed_out: bool
    budget_exceeded: bool
    votes: list[VoteView]
    tally: dict[str, int]
    answers: list[AnswerView]
    usage: UsageView
    errors: list[str]
    elapsed_s: float | None
    record_dir: str
    report: str = Field(description="resource URI of the HTML report (also report.html in "
                                    "record_dir)")
    parent_session_id: str | None = None


class RunHandle(BaseModel):
    session_id: str
    status: Status
    record_dir: str
    message: str
    result: ResultView | None = None


class SessionItem(BaseModel):
    session_id: str
    status: str
    question: str
    winner: str | None
    started_at: float | None
    parent_session_id: str | None = None


class SessionPage(BaseModel):
    sessions: list[SessionItem]
    next_cursor: str | None = Field(None, description="pass as cursor for the next page")


class CancelView(BaseModel):
    session_id: str
    status: Status
    message: str


class LocalServerView(BaseModel):
    url: str
    models: list[str]


class SetupView(BaseModel):
    providers_with_keys: list[str] = Field(description="provider names only, never key values")
    providers_without_keys: list[str]
    local_servers: list[LocalServerView]
    embedded_model: str | None
    default_team: list[str] = Field(description="models used when a run names none")
    default_team_reason: str
    storage: str
    sessions_running: int
    versions: dict[str, str]
    how_to_add_more: str


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit] + " …", True)


def _usage(data: dict[str, Any] | None) -> UsageView:
    return UsageView(**{k: v for k, v in (data or {}).items() if k in UsageView.model_fields})


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ConsensusService:
    """Start, watch, read, cancel, continue and resume runs."""

    def __init__(self, store: SessionStore, runner: SessionRunner, root: Path | None = None
                 ) -> None:
        self.store = store
        self.runner = runner
        self.root = (root or Path.cwd()).resolve()

    # -- starting runs ------------------------------------------------------------------------

    async def run_consensus(
        self,
        question: str,
        *,
        models: list[str] | None = None,
        config: str | None = None,
        context: str | None = None,
        context_files: list[str] | None = None,
        options: RunOptions | None = None,
        parent_session_id: str | None = None,
    ) -> LiveRun:
        question = check_question(question)
        parts = [context.strip()] if context and context.strip() else []
        if context_files:
            parts.append(read_context_files(context_files, self.root))
        full_context = "\n\n".join(parts) or None
        if full_context and len(full_context) > MAX_CONTEXT_CHARS:
            raise ConfigError(f"context: {len(full_context)} characters; the limit is "
                              f"{MAX_CONTEXT_CHARS}")
        if config and not config.startswith("@"):
            config = str(confine(self.root, config, "config"))
        overrides = options.model_dump(exclude_unset=True) if options else None
        team, _notes = await choose_team(models=models, config=config, options=overrides)
        return await self.runner.start(question, team, context=full_context,
                                       parent_session_id=parent_session_id)

    async def continue_session(self, session_id: str, follow_up: str, *,
                               options: RunOptions | None = None) -> LiveRun:
        """A new run on ``follow_up`` with the earlier question and final answer as context,
        by the same team; linked to its parent in both records."""
        follow_up = check_question(follow_up, "follow_up")
        parent = self.store.read_result(session_id)
        if parent is None:
            raise SessionStateError(f"session {session_id} has not finished; continue it once "
                                    "get_status says done")
        request = self.store.read_json(session_id, "request.json") or {}
        config = self.store.read_json(session_id, "config.json") or {}
        earlier = (f"<earlier_question>\n{parent['question']}\n</earlier_question>\n"
                   f"<earlier_final_answer>\n{parent.get('final_answer') or '(none)'}\n"
                   "</earlier_final_answer>")
        if request.get("context"):
            earlier = request["context"] + "\n\n" + earlier
        if options:
            config["options"] = {**config.get("options", {}),
                                 **options.model_dump(exclude_unset=True)}
        team = self._recorded_team(session_id, config)
        run = await self.runner.start(follow_up, team, context=earlier,
                                      parent_session_id=session_id)
        self.store.append_event(session_id, "continued", child_session_id=run.session_id)
        return run

    async def resume_session(self, session_id: str) -> LiveRun:
        """Continue an interrupted run from its recorded answers, in the same record."""
        status = self.store.read_status(session_id)
        if status.get("status") != "interrupted":
            raise SessionStateError(f"session {session_id} is {status.get('status')}; only "
                                    "interrupted runs can be resumed")
        request = self.store.read_json(session_id, "request.json") or {}
        team = self._recorded_team(session_id,
                                   self.store.read_json(session_id, "config.json") or {})
        events = self.store.read_events(session_id)
        answers = tuple((e["agent_id"], self.store.read_answer(session_id, e["label"]).rstrip("\n"))
                        for e in events if e.get("type") == "answer")
        calls = tuple(e for e in events if e.get("type") == "call")
        return await self.runner.resume(session_id, request["question"], team,
                                        context=request.get("context"),
                                        parent_session_id=request.get("parent_session_id"),
                                        prior_answers=answers, prior_calls=calls,
                                        prior_event_count=len(events))

    @staticmethod
    def _recorded_team(session_id: str, config: dict[str, Any]) -> TeamConfig:
        """The team a session ran with, from its config.json (keys are not stored there)."""
        if any(a.get("api_key") for a in config.get("agents", [])):
            raise SessionStateError(f"session {session_id} used inline api_keys, which are not "
                                    "stored; start a new run with the same config")
        return build_team(config, source=f"session {session_id} config.json")

    def handle(self, run: LiveRun, message: str) -> RunHandle:
        status = run.writer.latest_status or {}
        return RunHandle(session_id=run.session_id, status=status.get("status", "running"),
                         record_dir=str(run.writer.folder), message=message)

    # -- reading ------------------------------------------------------------------------------

    def status(self, session_id: str) -> StatusView:
        check_session_id(session_id)
        data = self.runner.status(session_id)
        done = data["status"] in TERMINAL_STATUSES
        agents = [
            AgentView(agent_id=aid, model=a["model"], phase=a["phase"], answers=a["answers"],
                      current_answer=a.get("current_answer"),
                      voted_for=(a.get("vote") or {}).get("answer"),
                      dropped_reason=a.get("dropped_reason"))
            for aid, a in data.get("agents", {}).items()
        ]
        answers = [AnswerView(label=a["label"], agent_id=a["agent_id"],
                              text=a["preview"][:PREVIEW_CHARS],
                              truncated=a["chars"] > PREVIEW_CHARS)
                   for a in data.get("answers", [])]
        if done:
            next_step = f"finished ({data['status']}); call get_result to read the answer"
        else:
            next_step = "still running; call get_status again with wait_s=30 to wait for changes"
        return StatusView(
            session_id=session_id, status=data["status"], done=done, phase=data["phase"],
            elapsed_s=data.get("elapsed_s", 0.0), question=data.get("question", ""),
            agents=agents, answers=answers,
            tally={k: len(v) for k, v in data.get("tally", {}).items()},
            usage=_usage(data.get("usage")), finish_reason=data.get("finish_reason"),
            revision=data.get("revision", 0), next_step=next_step,
        )

    async def watch_status(self, session_id: str, wait_s: float,
                           after_revision: int | None = None) -> StatusView:
        """The status once it has changed (since ``after_revision``, or from now), the run
        has finished, or ``wait_s`` has passed."""
        self.status(session_id)  # validates the id before waiting
        if wait_s > 0:
            await self.runner.wait_for_change(session_id, wait_s, after_revision)
        return self.status(session_id)

    def result(self, session_id: str, detail: Literal["summary", "full"] = "summary"
               ) -> ResultView:
        check_session_id(session_id)
        data = self.store.read_result(session_id)
        if data is None:
            status = self.runner.status(session_id)["status"]
            raise SessionStateError(
                f"session {session_id} is {status} and has no result yet; "
                "poll get_status with wait_s until done")
        full = detail == "full"
        final, final_cut = data.get("final_answer"), False
        if final is not None and not full:
            final, final_cut = _clip(final, SUMMARY_FINAL_CHARS)
        answers = []
        for a in data.get("answers", []):
            text, cut = (a["content"], False) if full else _clip(a["content"],
                                                                 SUMMARY_ANSWER_CHARS)
            answers.append(AnswerView(label=a["label"], agent_id=a["agent_id"], text=text,
                                      truncated=cut))
        return ResultView(
            session_id=session_id, status=data["status"], finish_reason=data.get("finish_reason"),
            final_answer=final, final_answer_truncated=final_cut,
            winner=WinnerView(**data["winner"]) if data.get("winner") else None,
            tie_broken=data.get("tie_broken", False), timed_out=data.get("timed_out", False),
            budget_exceeded=data.get("budget_exceeded", False),
            votes=[VoteView(**v) for v in data.get("votes", [])], tally=data.get("tally", {}),
            answers=answers, usage=_usage(data.get("usage")), errors=data.get("errors", []),
            elapsed_s=data.get("elapsed_s"), record_dir=str(self.store.folder(session_id)),
            report=f"massgen://sessions/{session_id}/report",
            parent_session_id=data.get("parent_session_id"),
        )

    def list_sessions(self, status: str | None = None, limit: int = 20,
                      cursor: str | None = None) -> SessionPage:
        found, next_cursor = self.store.list(status=status, limit=limit, cursor=cursor)
        return SessionPage(sessions=[
            SessionItem(session_id=s.session_id, status=s.status,
                        question=_clip(" ".join(s.question.split()), PREVIEW_CHARS)[0],
                        winner=s.winner, started_at=s.started_at,
                        parent_session_id=s.parent_session_id)
            for s in found
        ], next_cursor=next_cursor)

    async def cancel(self, session_id: str) -> CancelView:
        check_session_id(session_id)
        if await self.runner.cancel(session_id):
            return CancelView(session_id=session_id, status="cancelled",
                              message="cancelled; get_result shows what was recorded")
        status = self.store.read_status(session_id)
        if status["status"] == "running":
            raise SessionStateError(
                f"session {session_id} is running in another massgen-mcp process "
                f"(pid {status.get('pid')}); cancel it there")
        return CancelView(session_id=session_id, status=status["status"],
                          message=f"already {status['status']}; nothing to cancel")

    async def wait(self, session_id: str, wait_s: float, on_change: Any = None) -> bool:
        """Wait up to ``wait_s`` for the run to finish, calling ``on_change(status)`` on every
        change; returns True if it finished."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            run = self.runner.live(session_id)
            if run is None or run.done:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self.runner.wait_for_change(session_id, remaining)
            if on_change is not None and not self.runner.live(session_id).done:
                await on_change(self.runner.status(session_id))

    async def check_setup(self) -> SetupView:
        found = await discover(survey=True)
        versions = {"massgen-mcp": __version__, "python": sys.version.split()[0]}
        for dist in ("fastmcp", "mcp", "litellm", "llama-cpp-python"):
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return SetupView(
            providers_with_keys=found.providers_with_keys,
            providers_without_keys=sorted(set(PROVIDER_KEY_ENV) - set(found.providers_with_keys)),
            local_servers=[LocalServerView(url=s.url, models=list(s.models))
                           for s in found.local_servers],
            embedded_model=f"local/{found.embedded_model}" if found.embedded_model else None,
            default_team=[a.model for a in found.team.agents] if found.team else [],
            default_team_reason=found.reason,
            storage=str(self.store.sessions_dir),
            sessions_running=self.runner.running_count(),
            versions=versions,
            how_to_add_more=(
                "set a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, "
                "XAI_API_KEY, OPENROUTER_API_KEY, ...) in the environment or a .env file; "
                "start Ollama or LM Studio; pip install 'massgen-mcp[local]' for the offline "
                "model; or set a team in .massgen/config.yaml"),
        )

    def mark_interrupted(self) -> list[str]:
        return self.store.mark_interrupted(
            lambda pid: pid != os.getpid() and _pid_alive(pid))
