"""What a host's model and user read of us: the instructions lead with the one call that gets
the answer, the schema states wait_s's true maximum, a result's text is a few readable lines
with every field a model needs (the full record stays structured), and progress measures."""

from __future__ import annotations

import time
from pathlib import Path

from fastmcp import Client

from massgen_mcp.core.records import Phase, RunStatus
from massgen_mcp.core.run_state import AgentStatus, Draft, StatusRecord
from massgen_mcp.server.app import create_server
from massgen_mcp.server.handshake import INSTRUCTIONS
from massgen_mcp.server.views import progress_message, progress_steps
from massgen_mcp.testing.policies import error
from massgen_mcp.testing.scripted import ChatRequest, Reply, agree
from tests.helpers import Scripted, by_model, text_of

ONE_CALL = "run_consensus(question, wait_s=50)"


def models_for(base_url: str, n: int = 3) -> list[str]:
    return [f"openai/{m}@{base_url}" for m in "abc"[:n]]


def test_the_instructions_name_the_one_call_first() -> None:
    assert ONE_CALL in INSTRUCTIONS
    first = INSTRUCTIONS.index(ONE_CALL)
    assert first < INSTRUCTIONS.index("get_status"), "get_status is for longer runs only"
    assert "returns a session_id at once" not in INSTRUCTIONS


async def test_descriptions_lead_with_wait_s_50_and_the_schema_states_its_cap(
        tmp_path: Path) -> None:
    async with Client(create_server(root=tmp_path)) as client:
        tools = {t.name: t for t in await client.list_tools()}
    assert (tools["run_consensus"].description or "").find("wait_s=50") < 120
    for name, tool in tools.items():
        wait_s = tool.input_schema["properties"].get("wait_s")
        if wait_s is not None:
            assert wait_s["maximum"] == 50 and wait_s["minimum"] == 0, name
    for name in ("get_status", "get_result", "list_sessions", "check_setup"):
        assert tools[name].annotations is not None
        assert tools[name].annotations.read_only_hint is True, name


async def test_a_finished_run_reads_in_a_few_lines_and_keeps_the_full_record(
        tmp_path: Path, scripted: Scripted) -> None:
    def drop_c(req: ChatRequest) -> Reply:
        return error(400, "model c does not exist")

    server = scripted(by_model(c=drop_c, default=agree))
    progress: list[tuple[float, float | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total))

    async with Client(create_server(root=tmp_path), progress_handler=on_progress) as client:
        got = await client.call_tool("run_consensus", {
            "question": "What is 6*7?", "models": models_for(server.base_url),
            "wait_s": 50})
    handle = got.structured_content
    assert handle is not None and handle["status"] == "completed"
    result = handle["result"]
    text = text_of(got.content[0])
    lines = text.splitlines()
    assert len(lines) <= 11, text  # with the agreement, the losing answer and the dissent
    assert lines[0] == result["final_answer"].splitlines()[0]
    winner = result["winner"]
    assert f"Winner {winner['label']} ({winner['agent_id']}, {winner['model']})" in text
    for label, votes in result["tally"].items():
        assert f"{label} {votes} vote{'' if votes == 1 else 's'}" in text
    assert "Dropped: agent_c (" in text and "model c does not exist" in text
    agreement = result["agreement"]  # the dissent, in the text and the structured record
    assert agreement["members"] == 2 and agreement["dropped"] == ["agent_c"]
    assert f"Agreement: {agreement['backing']} of 2 live members back {winner['label']}." in text
    for dissent in agreement["dissent"]:  # the CLI's and the report's words
        assert (f"Dissent: {dissent['agent_id']} ({dissent['model']}), voted for "
                f"{dissent['voted_for']}") in text
    assert handle["session_id"] in text and '"' not in lines[-1][:20]
    assert set(result) >= {"votes", "answers", "usage", "record_dir", "report"}
    assert progress and all(total == 7 for _, total in progress), progress
    values = [v for v, _ in progress]
    assert values == sorted(set(values)), "progress grows with every notification"
    assert values[0] == 0 and values[-1] == 7


async def test_a_run_still_going_says_what_to_call_next(tmp_path: Path,
                                                        scripted: Scripted) -> None:
    server = scripted(agree, latency_s=0.5)
    async with Client(create_server(root=tmp_path)) as client:
        got = await client.call_tool("run_consensus", {
            "question": "q", "models": models_for(server.base_url), "wait_s": 0})
        text = text_of(got.content[0])
        sid = got.structured_content["session_id"] if got.structured_content else ""
        assert text.startswith(f"Session {sid} is running") and "get_status" in text
        status = await client.call_tool("get_status", {"session_id": sid, "wait_s": 50})
    shown = text_of(status.content[0]).splitlines()
    assert len(shown) == 3 and shown[0].startswith(f"Session {sid}: completed"), shown
    assert "agent_a (openai/a): voted " in shown[1] and "get_result" in shown[2]


def test_progress_counts_one_token_and_many_tokens() -> None:
    now = time.time()

    def agent(tokens: int | None) -> AgentStatus:
        draft = None if tokens is None else Draft(purpose="answer", text="…", chars=4,
                                                  tokens=tokens, elapsed_s=0.1)
        return AgentStatus(model="openai/a", label_letter="A", phase="working", answers=0,
                           draft=draft)

    status = StatusRecord(session_id="s", status=RunStatus.RUNNING, phase=Phase.ANSWERING,
                          question="q", started_at=now, updated_at=now,
                          agents={"agent_a": agent(1), "agent_b": agent(2),
                                  "agent_c": agent(None)})
    message = progress_message(status)
    assert "agent_a is writing… 1 token;" in message and "agent_b is writing… 2 tokens" in message
    assert message.startswith("answering: 0 answers")
    assert progress_steps(status) == (0, 7)


async def test_a_wrong_argument_gets_one_line_naming_the_field_and_its_type(
        tmp_path: Path) -> None:
    """Not pydantic's report (its codes, the input echoed back, a link to its site): one line
    a person reads in the host and a model corrects its call from; nothing is started."""
    cases = [
        ("run_consensus", {"question": 5},
         "invalid arguments for run_consensus: question: expected a string, got an integer"),
        ("run_consensus", {"question": "q", "models": "openai/x", "wait_s": "soon"},
         "invalid arguments for run_consensus: models: expected an array, got a string; "
         "wait_s: expected a number, got a string"),
        ("run_consensus", {"question": "q", "options": {"timeout_s": "long"}},
         "invalid arguments for run_consensus: options.timeout_s: expected a number, got a "
         "string"),
        ("get_status", {"session_id": "x", "wait_s": [1]},
         "invalid arguments for get_status: wait_s: expected a number, got an array"),
        ("run_consensus", {}, "invalid arguments for run_consensus: question: required"),
        ("get_result", {"session_id": "x", "bogus": 1},
         "invalid arguments for get_result: bogus: no such argument"),
        ("list_sessions", {"limit": 1000},
         "invalid arguments for list_sessions: limit: Input should be less than or equal to "
         "100"),
    ]
    async with Client(create_server(home=tmp_path / "home")) as client:
        for name, arguments, said in cases:
            result = await client.call_tool(name, arguments, raise_on_error=False)
            assert result.is_error
            assert [text_of(block) for block in result.content] == [said]
    assert not (tmp_path / "home" / "sessions").exists() or not any(
        (tmp_path / "home" / "sessions").iterdir())
