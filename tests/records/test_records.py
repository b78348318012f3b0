"""The typed records: old folders still read, new ones keep the same JSON, one door for all."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client

from massgen_mcp.cli.main import main
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, SessionStateError
from massgen_mcp.core.records import SCHEMA_VERSION, EventType, RunStatus
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.base import Completion
from massgen_mcp.records import store as store_module
from massgen_mcp.records.ids import new_session_id, session_time
from massgen_mcp.records.store import SessionStore
from massgen_mcp.render.html import render_report
from massgen_mcp.render.text import describe_event
from massgen_mcp.server.app import create_server
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedProvider, agree, answer
from tests.helpers import Scripted, run_team, team_for

RELEASE = Path(__file__).parents[1] / "fixtures" / "release-0.1.0"
OLD_ID = "01M825WQ0MVBEB1ZBBVMKK79J8"


@pytest.fixture
def old_home(home: Path) -> Path:
    """A record folder written by release 0.1.0 (before schema_version existed)."""
    shutil.copytree(RELEASE, home)
    return home


def in_process(home: Path) -> ConsensusService:
    store = SessionStore(home)
    return ConsensusService(store, LocalExecutor(store, ScriptedProvider(agree)),
                            Workspace(home))


async def test_a_record_written_by_release_0_1_0_still_reads(old_home: Path) -> None:
    service = in_process(old_home)
    status, result = await service.status(OLD_ID), await service.result(OLD_ID)
    assert status.status is RunStatus.COMPLETED and status.schema_version == SCHEMA_VERSION
    assert result.winner is not None and result.winner.label in result.tally
    assert result.final_answer and not result.timed_out and not result.budget_exceeded
    assert status.agents["agent_a"].vote is not None
    events = service.events(OLD_ID)
    assert events[0].type is EventType.STARTED and events[-1].type is EventType.FINISHED
    assert [s.session_id for s in service.list_sessions()[0]] == [OLD_ID]
    page = render_report(service.record(OLD_ID))
    assert "What is 6*7?" in page and result.winner.label in page


async def test_an_old_session_can_be_continued(old_home: Path) -> None:
    service = in_process(old_home)
    started = await service.continue_session(OLD_ID, "And 6*8?")
    done = await service.wait(started.session_id, None, until_done=True)
    assert done.status is RunStatus.COMPLETED and done.parent_session_id == OLD_ID
    assert service.events(OLD_ID)[-1].child_session_id == started.session_id


async def test_new_records_keep_the_release_0_1_0_json(old_home: Path) -> None:
    service = in_process(old_home)
    started = await service.start(RunSpec(
        question="What is 6*7?", models=["openai/a", "openai/b", "openai/c"],
        base_url="http://127.0.0.1:9/v1", context="Answer with a number."))
    await service.wait(started.session_id, None, until_done=True)
    old, new = old_home / "sessions" / OLD_ID, started.record_dir
    for name in ("status.json", "result.json", "request.json"):
        old_keys = set(json.loads((old / name).read_text()))
        new_keys = set(json.loads((new / name).read_text()))
        # Added since 0.1.0, optional and ignored by older readers (extra="ignore").
        assert new_keys - old_keys <= {"schema_version", "workspace", "notes", "worker",
                                       "decided_by", "late", "tied", "dropped",
                                       "kind", "config_file", "agreement", "review"}, name
        # kind: eval's runs (issue 49); config_file: where inline keys are read again (58);
        # agreement: every result's backing and dissent, review: a review's target and
        # outcome (55, 56)
        assert old_keys <= new_keys, name
    old_events = {json.loads(line)["type"]: set(json.loads(line))
                  for line in (old / "events.jsonl").read_text().splitlines()}
    added = {"consensus": {"reason"},  # why coordination ended (RunOptions.decide)
             "call": {"first_token_s", "tokens_per_s"},  # a streamed call's pace
             "started": {"roles"}}  # only when a member has a role
    for line in (new / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        assert set(event) - added.get(event["type"], set()) == old_events[event["type"]], (
            event["type"])


async def test_a_record_from_a_newer_release_is_refused_clearly(old_home: Path) -> None:
    path = old_home / "sessions" / OLD_ID / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 99}))
    with pytest.raises(SessionStateError, match=r"newer massgen-mcp .*upgrade"):
        await in_process(old_home).result(OLD_ID)


async def test_a_retry_of_a_kind_this_release_does_not_know_still_reads(
        old_home: Path) -> None:
    """A retry's kind is typed (ErrorKind), and a record is untrusted: a kind from another
    release, or not a word at all, reads as "error" instead of making events.jsonl corrupt
    (issue 50, step 5)."""
    path = old_home / "sessions" / OLD_ID / "events.jsonl"
    first, *rest = path.read_text().splitlines()
    retries = [json.dumps({"seq": 900 + i, "t": 1.0, "ts": 1.0, "type": "retry",
                           "agent_id": "agent_a", "attempt": 1, "delay_s": 0.5,
                           "error": "boom", "kind": kind})
               for i, kind in enumerate(["rate_limit", "overloaded", 7, ["x"]])]
    path.write_text("\n".join([first, *retries, *rest]) + "\n")
    events = in_process(old_home).events(OLD_ID)
    kinds = [e.kind for e in events if e.type is EventType.RETRY]
    assert kinds == [ErrorKind.RATE_LIMIT, ErrorKind.ERROR, ErrorKind.ERROR, ErrorKind.ERROR]
    lines = [describe_event(e) or "" for e in events if e.type is EventType.RETRY]
    assert "agent_a provider rate_limit, retry 1 in 0.5s" in lines[0]
    assert all("agent_a provider error, retry 1" in line for line in lines[1:])
    assert events[-1].type is EventType.FINISHED
    documented = (Path(__file__).parents[2] / "docs" / "session-record.md").read_text()
    assert all(f"`{kind}`" in documented for kind in ErrorKind), "session-record.md lists them"


def test_cli_and_mcp_take_the_same_inputs_through_one_door(
        scripted: Scripted, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`massgen-mcp run` and `run_consensus` both call ConsensusService.start: the same
    base_url, context, context files and options give the same record."""
    server = scripted(agree)
    (tmp_path / "notes.md").write_text("The answer must be a number.")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "What is 6*7?", "--models", "openai/a,openai/b",
                 "--base-url", server.base_url, "--context", "Be brief.",
                 "--context-file", "notes.md", "--timeout", "60", "--json"]) == 0
    cli_dir = Path(json.loads(capsys.readouterr().out)["session_dir"])

    async def over_mcp() -> dict[str, Any]:
        async with Client(create_server(root=tmp_path)) as client:
            handle: dict[str, Any] = (await client.call_tool("run_consensus", {
                "question": "What is 6*7?", "models": ["openai/a", "openai/b"],
                "base_url": server.base_url, "context": "Be brief.",
                "context_files": ["notes.md"], "options": {"timeout_s": 60}, "wait_s": 30,
            })).structured_content
            return handle

    handle = asyncio.run(over_mcp())
    assert handle["status"] == "completed"
    mcp_dir = Path(handle["record_dir"])
    for name in ("config.json", "request.json"):
        assert json.loads((cli_dir / name).read_text()) == json.loads((mcp_dir / name).read_text())
    request = json.loads((mcp_dir / "request.json").read_text())
    assert request["context"].startswith("Be brief.") and "must be a number" in request["context"]
    config = json.loads((mcp_dir / "config.json").read_text())
    assert config["options"]["timeout_s"] == 60
    assert {a["base_url"] for a in config["agents"]} == {server.base_url}


async def test_the_live_status_is_masked_like_the_record(home: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """get_status serves the in-memory status while a run goes on: it must carry no key."""
    canary = "sk-canary-live-0123456789"
    monkeypatch.setenv("LIVE_TEST_API_KEY", canary)
    gate = asyncio.Event()

    def policy(req: ChatRequest) -> Reply:
        if req.model == "a" and not req.vote_labels:
            return answer(f"My key is {canary}.")
        return agree(req)

    class Gated(ScriptedProvider):
        async def complete(self, agent: AgentSpec, *args: Any, **kwargs: Any) -> Completion:
            if agent.id == "agent_b":
                await gate.wait()  # b stays in flight until the test has looked
            return await super().complete(agent, *args, **kwargs)

    store = SessionStore(home)
    service = ConsensusService(store, LocalExecutor(store, Gated(policy)), Workspace(home))
    started = await service.start(RunSpec(question="q", models=["openai/a", "openai/b"],
                                          base_url="http://127.0.0.1:9/v1"))
    status = await service.status(started.session_id)
    while not status.answers:
        status = await service.wait(started.session_id, 10, until_done=False,
                                    after_revision=status.revision)
    assert not status.done and "***" in status.answers[0].preview
    assert canary not in status.model_dump_json()
    gate.set()
    done = await service.wait(started.session_id, None, until_done=True)
    assert done.status is RunStatus.COMPLETED


# -- records a repository can carry -------------------------------------------------------------

PLANTED = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"  # the largest id there is: a time in the year 10889


def planted_copy(record: Path, where: Path, question: str) -> Path:
    """A copy of ``record`` asking ``question``, without its report."""
    shutil.copytree(record, where)
    (where / "report.html").unlink()
    status = json.loads((where / "status.json").read_text())
    (where / "status.json").write_text(json.dumps({**status, "question": question}))
    return where


async def test_a_planted_session_takes_over_neither_latest_nor_the_report(
        scripted: Scripted, home: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A repository ships .massgen/sessions/7ZZZ... (always the largest id): as a link to a
    folder outside the project, it is no session at all (not listed, not found, no report
    written through it); as a real folder, its id's time is in the future, so it is not
    ``latest`` (a person can still ask for it by id), and a report.html in it that links
    elsewhere is replaced, not written through."""
    mine = await run_team(team_for(scripted(agree)))
    own = mine.result["session_id"]
    sessions = home / "sessions"
    outside = planted_copy(sessions / own, tmp_path / "outside" / PLANTED, "planted question")
    (sessions / PLANTED).symlink_to(outside, target_is_directory=True)

    def cli(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    code, out = cli("show", "latest")
    assert code == 0 and out.startswith(f"session  {own}  ") and "planted question" not in out
    code, out = cli("show", "latest", "--html")
    assert code == 0 and out.strip() == str(sessions / own / "report.html")
    code, out = cli("show", "7", "--html")  # the link's prefix: no session starts with it
    assert code != 0 and f"no session id starts with 7 in {sessions}" in out
    code, out = cli("show", PLANTED, "--html")
    assert code != 0 and not (outside / "report.html").exists()
    code, out = cli("sessions")
    assert own in out and PLANTED not in out

    (sessions / PLANTED).unlink()
    real = planted_copy(sessions / own, sessions / PLANTED, "planted question")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not a report")
    (real / "report.html").symlink_to(elsewhere)
    code, out = cli("show", "latest")
    assert code == 0 and out.startswith(f"session  {own}  ") and "planted question" not in out
    code, out = cli("show", PLANTED, "--html")
    assert code == 0 and out.strip() == str(real / "report.html")
    assert elsewhere.read_text() == "not a report"
    assert not (real / "report.html").is_symlink() and "<html" in (
        real / "report.html").read_text().lower()


async def test_a_planted_session_dated_ahead_never_becomes_latest_when_its_day_comes(
        scripted: Scripted, home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A repository can ship an id dated a few days ahead: skipped while it is in the
    future, it would become ``latest`` on that day. Its status was written here (checked
    out) before that time, which no run's is: a run's id is made when it starts."""
    monkeypatch.setattr(store_module, "CLOCK_SKEW_S", 0.0)  # no clock slack to hide in
    sessions = home / "sessions"
    first = (await run_team(team_for(scripted(agree)))).result["session_id"]
    checked_out = planted_copy(sessions / first, sessions.parent / "checkout", "PLANTED-Q")
    own = (await run_team(team_for(scripted(agree)))).result["session_id"]
    # "That day has come": the planted id is newer than the user's run and not in the
    # future, but its status was written before its id's time.
    # 1.5 ms on: 1 ms lands in the same millisecond ~30 % of the time (float rounding), and
    # the id then sorts by its random bits (the test's flakiness, seen under load too).
    planted = new_session_id(session_time(own) + 0.0015)
    checked_out.rename(sessions / planted)
    assert planted > own and SessionStore().find("latest") == own
    assert main(["show", "latest"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"session  {own}  ") and "PLANTED-Q" not in out


def test_a_recorder_does_not_open_its_event_log_through_a_planted_link(old_home: Path) -> None:
    """A cloned repository's session folder may hold events.jsonl as a link to a file of the
    user's. Today's paths read the events first (a link is refused there), but the recorder
    itself opened its append log following the link; it now opens it through no link
    (core/files.open_append), whoever reopens the record."""
    from massgen_mcp.core.errors import RecordWriteError

    victim = old_home / "bashrc"
    victim.write_text("mine\n")
    events = old_home / "sessions" / OLD_ID / "events.jsonl"
    events.unlink()
    events.symlink_to(victim)
    with pytest.raises(RecordWriteError):
        SessionStore(old_home).reopen(OLD_ID)
    assert victim.read_text() == "mine\n"
