"""Eval datasets: JSONL, CSV, Parquet and a Hugging Face dataset (a local folder read offline
through ``datasets.load_dataset``) become the same items; one field mapping, multiple choice,
limit and seed, and every error names the row, the field and the fix."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.parquet
import pytest

from massgen_mcp.cli.output import EXIT_INPUT
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.datasets import MAX_ITEMS, Fields, Item, load_items

# MMLU's shape on Hugging Face (cais/mmlu): the answer is the choice's 0-based index.
MMLU_ROWS: list[dict[str, Any]] = [
    {"question": "Which planet is the largest?", "subject": "astronomy",
     "choices": ["Mars", "Jupiter", "Venus", "Mercury"], "answer": 1},
    {"question": "What is 2 + 2?", "subject": "arithmetic",
     "choices": ["4", "3", "5", "22"], "answer": 0},
]
MC = Fields(choices="choices")


@pytest.fixture
def hf_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hugging Face's caches in tmp_path and offline mode on, whether or not datasets and
    huggingface_hub were imported (and read the environment) before this test."""
    import datasets.config
    import huggingface_hub.constants

    cache = tmp_path / "hf"
    for name, value in {"HF_HOME": str(cache), "HF_DATASETS_CACHE": str(cache / "datasets"),
                        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HOME", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> str:
    """With a BOM, as Excel writes it; choices as a JSON list, then as ``a|b|c``."""
    lines = [",".join(rows[0])]
    for number, row in enumerate(rows):
        cells = []
        for key, value in row.items():
            if key == "choices":
                value = json.dumps(value) if number % 2 == 0 else "|".join(value)
            cells.append('"' + str(value).replace('"', '""') + '"')
        lines.append(",".join(cells))
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8-sig"))
    return str(path)


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return str(path)


def write_hf(folder: Path, rows: list[dict[str, Any]]) -> str:
    """A Hugging Face dataset as it is laid out on the Hub: data/<split>-NNNNN-of-NNNNN."""
    write_parquet(folder / "data" / "test-00000-of-00001.parquet", rows)
    return f"hf:{folder}"


WRITERS: dict[str, tuple[Callable[[Path, list[dict[str, Any]]], str], str, list[str]]] = {
    # format: (writer, file name, each row's source after the name)
    "jsonl": (write_jsonl, "q.jsonl", ["q.jsonl:1", "q.jsonl:2"]),
    "csv": (write_csv, "q.csv", ["q.csv:2", "q.csv:3"]),
    "parquet": (write_parquet, "q.parquet", ["q.parquet#0", "q.parquet#1"]),
}


def write(fmt: str, tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The source string for ``rows`` written in ``fmt``, and each row's expected source."""
    if fmt == "hf":
        source = write_hf(tmp_path / "ds", rows)
        return source, [f"{source}::test#{index}" for index in range(len(rows))]
    writer, name, sources = WRITERS[fmt]
    return writer(tmp_path / name, rows), sources


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "hf"])
def test_every_format_reads_mmlu_shaped_rows_to_the_same_items(
        fmt: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if fmt == "hf":
        cache = request.getfixturevalue("hf_offline")
    source, sources = write(fmt, tmp_path, MMLU_ROWS)

    assert load_items(source, MC) == [
        Item("Which planet is the largest?\n\nA. Mars\nB. Jupiter\nC. Venus\nD. Mercury", "B",
             ("Mars", "Jupiter", "Venus", "Mercury"), sources[0]),
        Item("What is 2 + 2?\n\nA. 4\nB. 3\nC. 5\nD. 22", "A", ("4", "3", "5", "22"),
             sources[1]),
    ]
    # Without a choices field the same rows are plain question/answer items.
    assert [(i.question, i.answer, i.choices) for i in load_items(source)] == [
        ("Which planet is the largest?", "1", ()), ("What is 2 + 2?", "0", ())]
    if fmt == "hf":  # a local folder is read where it is: nothing is converted into a cache
        assert not any(cache.rglob("*.arrow"))


def test_hf_spec_names_config_and_split(tmp_path: Path, hf_offline: Path) -> None:
    source = write_hf(tmp_path / "ds", MMLU_ROWS[:1])
    items = load_items(f"{source}::test", MC)
    assert items[0].source == f"{source}::test#0"
    assert items[0].answer == "B"


def test_sample_is_the_bundled_file() -> None:
    items = load_items("@sample")
    assert len(items) == 20
    assert items[0] == Item("What is 17 + 25?", "42", (), "eval_sample.jsonl:1")


def test_fields_are_mapped_by_name_and_dotted_path(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "q.jsonl", [
        {"prompt": "  Say hi  ", "target": {"text": ["hello", "hi"]}},
        {"prompt": "Six times seven?", "target": {"text": [42, 6.5]}},
        {"prompt": "Is it?", "target": {"text": [True, False]}},
    ])
    items = load_items(source, Fields(question="prompt", answer="target.text.0"))
    assert [(i.question, i.answer) for i in items] == [
        ("Say hi", "hello"), ("Six times seven?", "42"), ("Is it?", "True")]
    second = load_items(source, Fields(question="prompt", answer="target.text.1"))
    assert [i.answer for i in second] == ["hi", "6.5", "False"]


def test_a_csv_column_named_with_a_dot_is_a_column(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("q,answer.text\nWhat is 1+1?,2\n", encoding="utf-8")
    assert load_items(str(path), Fields("q", "answer.text")) == [
        Item("What is 1+1?", "2", (), "q.csv:2")]


def test_a_csv_row_is_named_by_the_line_it_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text('question,answer\n"Two\nlines?",yes\n\nEmpty answer?,\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_items(str(path))
    assert str(caught.value) == "q.csv:5: field 'answer' is empty; every item needs an answer"
    assert load_items(str(path), limit=1) == [Item("Two\nlines?", "yes", (), "q.csv:2")]


@pytest.mark.parametrize("answer", [2, "2", " 2 ", "C", "c", "Venus", " Venus "])
def test_a_multiple_choice_answer_by_index_letter_or_text_becomes_the_letter(
        answer: object, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "q.jsonl", [
        {"question": "Which is second from the sun?", "options": ["Mars", "Jupiter", "Venus"],
         "answer": answer}])
    [item] = load_items(source, Fields(choices="options"))
    assert item == Item("Which is second from the sun?\n\nA. Mars\nB. Jupiter\nC. Venus", "C",
                        ("Mars", "Jupiter", "Venus"), "q.jsonl:1")


def test_choices_in_csv_as_json_or_bars_and_numeric_text_answers(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text('question,choices,answer\n'
                    'Next prime after 5?,"[""3"", ""5"", ""7""]",7\n'
                    'Largest?, 10 | 20 | 30 ,2\n', encoding="utf-8")
    items = load_items(str(path), MC)
    # "7" is no index of 3 choices but is the text of C; "2" is only an index (of C).
    assert [(i.choices, i.answer) for i in items] == [
        (("3", "5", "7"), "C"), (("10", "20", "30"), "C")]


def test_without_a_seed_limit_keeps_file_order(tmp_path: Path) -> None:
    rows = [{"question": f"q{n}", "answer": str(n)} for n in range(30)]
    source = write_jsonl(tmp_path / "q.jsonl", rows)
    assert [i.answer for i in load_items(source, limit=5)] == ["0", "1", "2", "3", "4"]
    assert [i.answer for i in load_items(source, limit=100)] == [str(n) for n in range(30)]
    assert [i.answer for i in load_items(source)] == [str(n) for n in range(30)]


def test_a_seed_samples_deterministically_with_the_limit(tmp_path: Path) -> None:
    """With --limit, a seed draws a random sample (reservoir sampling: every row is read,
    only the sample kept); alone, it shuffles every row."""
    rows = [{"question": f"q{n}", "answer": str(n)} for n in range(30)]
    source = write_jsonl(tmp_path / "q.jsonl", rows)

    first = load_items(source, limit=5, seed=7)
    answers = [i.answer for i in first]
    assert len(set(answers)) == 5 and set(answers) <= {str(n) for n in range(30)}
    assert load_items(source, limit=5, seed=7) == first  # the same sample every time
    assert [i.answer for i in load_items(source, limit=5, seed=8)] != answers
    assert answers != [str(n) for n in range(5)]  # not the first rows
    assert first[0].source == f"q.jsonl:{int(answers[0]) + 1}"  # still names its line
    order = list(range(30))
    random.Random(7).shuffle(order)
    everything = load_items(source, seed=7)
    assert [i.answer for i in everything] == [str(n) for n in order]
    assert sorted(i.answer for i in load_items(source, limit=100, seed=7)) == sorted(
        str(n) for n in range(30))


def test_more_than_the_cap_needs_a_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n' * (MAX_ITEMS + 1), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^big\.jsonl: more than 10,000 rows at once; pass "
                                          r"--limit N \(with --seed S"):
        load_items(str(path))
    assert len(load_items(str(path), limit=3, seed=1)) == 3
    path.write_text('{"question": "q", "answer": "a"}\n' * MAX_ITEMS, encoding="utf-8")
    assert len(load_items(str(path))) == MAX_ITEMS


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--limit: 0; give a whole number of at least 1$"):
        load_items("@sample", limit=0)


# (file name, bytes, fields, the whole message)
ERRORS: list[tuple[str, bytes, Fields, str]] = [
    ("q.jsonl", b'{"question": "a", "answer": "b"}\n{"question": \n', Fields(),
     "q.jsonl:2: not JSON (Expecting value at character 14); each line must be one JSON "
     "object such as {\"question\": \"...\", \"answer\": \"...\"}"),
    ("q.jsonl", b'\n[1, 2]\n', Fields(),
     "q.jsonl:2: a list, not an object; each line must be one JSON object such as "
     "{\"question\": \"...\", \"answer\": \"...\"}"),
    ("q.jsonl", b'{"question": "a", "answer": "b"}\n{"prompt": "a", "label": "b"}\n', Fields(),
     "q.jsonl:2: no field 'question' (fields: prompt, label); pass --question-field prompt"),
    ("q.jsonl", b'{"question": "a", "label": "b"}\n', Fields(),
     "q.jsonl:1: no field 'answer' (fields: question, label); pass --answer-field label"),
    ("q.jsonl", b'{"question": "a", "answer": 1, "options": ["x", "y"]}\n',
     Fields(choices="choices"),
     "q.jsonl:1: no field 'choices' (fields: question, answer, options); pass "
     "--choices-field options"),
    ("q.jsonl", b'{"q": "a", "a": "b"}\n', Fields(),
     "q.jsonl:1: no field 'question' (fields: q, a); pass --question-field with one of them"),
    ("q.jsonl", b'{"question": "a", "answer": {"text": "b"}}\n', Fields(answer="answer.txt"),
     "q.jsonl:1: no field 'answer.txt' (fields: question, answer); pass --answer-field with "
     "one of them"),
    ("q.jsonl", b'{"question": "a", "answer": "b"}\n\n{"question": "  ", "answer": "b"}\n',
     Fields(), "q.jsonl:3: field 'question' is empty; every item needs a question"),
    ("q.jsonl", b'{"question": 5, "answer": "b"}\n', Fields(),
     "q.jsonl:1: field 'question' is a number; the question must be text"),
    ("q.jsonl", b'{"question": "a", "answer": null}\n', Fields(),
     "q.jsonl:1: field 'answer' is empty (null); every item needs its answer"),
    ("q.jsonl", b'{"question": "a", "answer": " "}\n', Fields(),
     "q.jsonl:1: field 'answer' is empty; every item needs an answer"),
    ("q.jsonl", b'{"question": "a", "answer": ["b"]}\n', Fields(),
     "q.jsonl:1: field 'answer' is a list; the answer must be text or a number (reach into "
     "it with a dotted path, e.g. answer.text or answer.0)"),
    ("q.jsonl", b'{"question": "a", "answer": "b"}\n{"question": "\xff", "answer": "b"}\n',
     Fields(), "q.jsonl:2: byte 15 of the line is not UTF-8; save the file as UTF-8"),
    ("q.csv", b'question,answer\na,b\nc,\xe9\n', Fields(),
     "q.csv:3: byte 23 of the file is not UTF-8; save the file as UTF-8"),
    ("q.csv", b'prompt,answer\na,b\n', Fields(),
     "q.csv:2: no field 'question' (fields: prompt, answer); pass --question-field prompt"),
    ("q.csv", b'question,answer\na\n', Fields(),
     "q.csv:2: field 'answer' is empty (null); every item needs its answer"),
    ("q.csv", b'question,answer\na,b\n"' + b"x" * 140_000 + b'",b\n', Fields(),
     "q.csv:3: field larger than field limit (131072); check the file's quoting"),
    ("q.jsonl", b'{"question": "a", "choices": ["x", "y", "z"], "answer": 3}\n', MC,
     "q.jsonl:1: answer index 3 is out of range for 3 choices (0-2); indexes start at 0"),
    ("q.jsonl", b'{"question": "a", "choices": ["x", "y", "z"], "answer": -1}\n', MC,
     "q.jsonl:1: answer index -1 is out of range for 3 choices (0-2); indexes start at 0"),
    ("q.csv", b'question,choices,answer\na,x|y|z,1\nb,x|y|z,7\n', MC,
     "q.csv:3: answer index 7 is out of range for 3 choices (0-2); indexes start at 0"),
    ("q.jsonl", b'{"question": "a", "choices": ["x", "y"], "answer": "w"}\n', MC,
     "q.jsonl:1: answer 'w' is not an index (0-1), a letter (A-B) or the text of one of the 2 "
     "choices; fix the answer, or check --answer-field"),
    ("q.jsonl", b'{"question": "a", "choices": ["2", "0", "1"], "answer": "0"}\n', MC,
     "q.jsonl:1: answer '0' could be choice A (index 0) or choice B (its text); write the "
     "letter instead"),
    ("q.jsonl", b'{"question": "a", "choices": ["B", "A"], "answer": "A"}\n', MC,
     "q.jsonl:1: answer 'A' could be choice A (letter A) or choice B (its text); write the "
     "0-based index as a JSON number instead"),
    ("q.jsonl", b'{"question": "a", "choices": ["x"], "answer": 0}\n', MC,
     "q.jsonl:1: field 'choices' holds 1 choice; give 2 to 10 (A-J)"),
    ("q.jsonl", b'{"question": "a", "choices": "x|", "answer": 0}\n', MC,
     "q.jsonl:1: field 'choices': choice B is empty; remove it or fill it in"),
    ("q.jsonl", b'{"question": "a", "choices": {"x": 1}, "answer": 0}\n', MC,
     "q.jsonl:1: field 'choices' is an object; the choices must be a list of texts, a JSON "
     "list or texts separated by '|'"),
    ("q.csv", b'question,choices,answer\na,"[""x"", ",0\n', MC,
     "q.csv:2: field 'choices' is not a JSON list (not JSON (Expecting value at character "
     "7)); write [\"first\", \"second\"] or first|second"),
    ("q.jsonl", b'\n  \n', Fields(), "q.jsonl: no rows; the dataset is empty"),
    ("q.csv", b'\xef\xbb\xbfquestion,answer\r\n', Fields(),
     "q.csv: no rows; the dataset is empty"),
    ("q.parquet", b'PAR1 this is not parquet', Fields(),
     "q.parquet: not a readable Parquet file (ArrowInvalid: "),
]


@pytest.mark.parametrize(("name", "content", "fields", "message"), ERRORS,
                         ids=[f"{e[0]}:{e[3].split(': ', 1)[1][:40]}" for e in ERRORS])
def test_a_bad_row_is_an_error_naming_its_line_field_and_fix(
        name: str, content: bytes, fields: Fields, message: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_items(str(path), fields)
    if name.endswith(".parquet"):  # pyarrow's own words follow
        assert str(caught.value).startswith(message)
    else:
        assert str(caught.value) == message


def test_a_parquet_row_is_named_by_its_index(tmp_path: Path) -> None:
    source = write_parquet(tmp_path / "q.parquet", [{"question": "a", "answer": "b"},
                                                    {"question": "", "answer": "c"}])
    with pytest.raises(ConfigError, match=r"^q\.parquet#1: field 'question' is empty; "):
        load_items(source)


def test_an_hf_row_is_named_by_its_index(tmp_path: Path, hf_offline: Path) -> None:
    source = write_hf(tmp_path / "ds", [{"prompt": "a", "answer": "b"}])
    with pytest.raises(ConfigError) as caught:
        load_items(source)
    assert str(caught.value) == (f"{source}::test#0: no field 'question' (fields: prompt, "
                                 "answer); pass --question-field prompt")


def test_a_missing_file_an_unknown_type_and_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^nope\.jsonl: no such file$"):
        load_items("nope.jsonl")
    (tmp_path / "q.txt").write_text("question,answer\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_items(str(tmp_path / "q.txt"))
    assert str(caught.value) == (f"{tmp_path / 'q.txt'}: unknown file type '.txt'; use .jsonl, "
                                 ".json, .csv, .parquet, @sample or hf:NAME[:CONFIG[:SPLIT]]")
    with pytest.raises(ConfigError, match=r"unknown file type '\(no extension\)'"):
        load_items("questions")
    with pytest.raises(ConfigError) as caught:
        load_items(str(tmp_path))
    assert str(caught.value) == (f"{tmp_path}: a folder; pass a file, or hf:{tmp_path} for a "
                                 "folder of Hugging Face data files")


def test_a_json_file_is_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text('{"question": "a", "answer": "b"}\n', encoding="utf-8")
    assert load_items(str(path)) == [Item("a", "b", (), "q.json:1")]


def test_an_hf_source_must_be_name_config_split() -> None:
    for source in ("hf:", "hf::all:test", "hf:a:b:c:d"):
        with pytest.raises(ConfigError, match=r": expected hf:NAME\[:CONFIG\[:SPLIT\]\], e\.g\. "
                                              r"hf:cais/mmlu:all:test$"):
            load_items(source)


def test_an_hf_load_failure_is_one_line_naming_name_config_and_split(
        tmp_path: Path, hf_offline: Path) -> None:
    source = write_hf(tmp_path / "ds", MMLU_ROWS)
    with pytest.raises(ConfigError) as caught:
        load_items(f"{source}::train")
    assert str(caught.value) == (
        f"{source}::train: the folder has no data files for split 'train' (splits: test); "
        f"name one as {source}::SPLIT")
    with pytest.raises(ConfigError) as caught:
        load_items("hf:no-such-org/no-such-dataset:main")
    message = str(caught.value)
    assert message.startswith("hf:no-such-org/no-such-dataset:main: Hugging Face dataset "
                              "'no-such-org/no-such-dataset' (config main, split test) could "
                              "not be loaded: ")
    assert "\n" not in message and "Traceback" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_hf_without_datasets_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now fails
    with pytest.raises(ConfigError) as caught:
        load_items("hf:cais/mmlu:all:test", MC)
    assert str(caught.value) == ("hf:cais/mmlu:all:test: reading Hugging Face datasets needs "
                                 "the datasets package; pip install 'massgen-mcp[eval]'")


def test_parquet_without_pyarrow_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = write_parquet(tmp_path / "q.parquet", MMLU_ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError) as caught:
        load_items(source, MC)
    assert str(caught.value) == ("q.parquet: reading Parquet needs pyarrow; pip install "
                                 "'massgen-mcp[eval]'")


def test_pyarrow_and_datasets_are_imported_only_when_needed(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "q.jsonl", MMLU_ROWS)
    code = ("import sys\n"
            "from massgen_mcp.evaluation.datasets import Fields, load_items\n"
            f"assert len(load_items({source!r}, Fields(choices='choices'))) == 2\n"
            "print(sorted({'pyarrow', 'datasets', 'pandas'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out == "[]\n"


def test_a_local_folder_never_shadows_a_hugging_face_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cloned repository with a folder named like a benchmark must not replace it."""
    (tmp_path / "openai" / "gsm8k").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"there is a local 'openai/gsm8k' here.*hf:\./"):
        load_items("hf:openai/gsm8k:main:test")


# -- streaming: a source is read only as far as the rows eval takes ----------------------------

# Each child runs under an address-space limit, so a regression fails with a MemoryError
# instead of taking the machine's memory, and prints its peak RSS (MiB) last.
BOUNDED = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.datasets import load_items
try:
    options = json.loads(sys.argv[2])
    found = [item.source for item in load_items(*json.loads(sys.argv[1]), **options)]
except ConfigError as exc:
    found = str(exc)
print(json.dumps(found))
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child spawned by a big test
# process (an xdist worker that loaded a model) would report the parent's peak as its own.
print(next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmHWM:")) // 1024)
"""
PEAK_MIB = 500
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc: Linux")


def load_bounded(source: str, **options: Any) -> tuple[list[str] | str, int]:
    """load_items(source, **options) in a child: the items' sources (or the error's one
    line), and the child's peak RSS in MiB."""
    proc = subprocess.run([sys.executable, "-c", BOUNDED, json.dumps([source]),
                           json.dumps(options)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found, peak = proc.stdout.splitlines()
    return json.loads(found), int(peak)


@linux_only
def test_a_sparse_8_gib_jsonl_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    write_jsonl(path, [{"question": f"q{n}", "answer": str(n)} for n in range(3)])
    with path.open("r+b") as file:
        file.truncate(8 * 2**30)  # then 8 GiB of NUL bytes, with no line break
    found, peak = load_bounded(str(path), limit=2)
    assert found == ["huge.jsonl:1", "huge.jsonl:2"]
    assert peak < PEAK_MIB
    # Every row needed: the endless line is refused in one line, not read.
    found, peak = load_bounded(str(path))
    assert found == "huge.jsonl:4: the line is longer than 8 MiB; each line must be one item"
    assert peak < PEAK_MIB
    # A sample reads the whole file: refused up front.
    found, _ = load_bounded(str(path), limit=2, seed=1)
    assert found == ("huge.jsonl: 8.0 GiB; a random sample (--seed) reads the whole file, at "
                     "most 1 GiB; drop --seed to take the first --limit rows, or split the file")


@pytest.fixture(scope="module")
def dictionary_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few hundred KB on disk declaring 20 M rows, each a one-megabyte question: a
    dictionary-encoded column holds the value once and 20 M indices to it."""
    import numpy

    path = tmp_path_factory.mktemp("bomb") / "bomb.parquet"
    question = pyarrow.array(["Q" * 2**20])
    answer = pyarrow.array(["4"])
    kind = pyarrow.dictionary(pyarrow.int32(), pyarrow.string())
    schema = pyarrow.schema([("question", kind), ("answer", kind)])
    with pyarrow.parquet.ParquetWriter(path, schema, compression="zstd") as writer:
        for _ in range(4):
            indices = pyarrow.array(numpy.zeros(5_000_000, dtype="int32"))
            writer.write_table(pyarrow.table({
                "question": pyarrow.DictionaryArray.from_arrays(indices, question),
                "answer": pyarrow.DictionaryArray.from_arrays(indices, answer)}, schema=schema))
    return path


@linux_only
def test_a_parquet_table_of_huge_dictionary_rows_is_read_only_up_to_the_limit(
        dictionary_bomb: Path) -> None:
    found, peak = load_bounded(str(dictionary_bomb), limit=3)
    assert found == ["bomb.parquet#0", "bomb.parquet#1", "bomb.parquet#2"]
    assert peak < PEAK_MIB


@linux_only
def test_a_table_declaring_too_many_rows_is_refused_in_one_line(dictionary_bomb: Path) -> None:
    found, peak = load_bounded(str(dictionary_bomb), limit=3, seed=1)
    assert found == ("bomb.parquet: declares 20,000,000 rows; a random sample (--seed) reads "
                     "every row, at most 10,000,000; drop --seed to take the first --limit "
                     "rows")
    assert peak < PEAK_MIB
    found, peak = load_bounded(str(dictionary_bomb))
    assert found == ("bomb.parquet: more than 10,000 rows at once; pass --limit N (with "
                     "--seed S for a random sample)")
    assert peak < PEAK_MIB


@linux_only
def test_running_out_of_memory_is_one_line(tmp_path: Path, home: Path) -> None:
    """Rows that fit the caps but not the memory there is: eval says so in one line."""
    path = tmp_path / "wide.parquet"
    indices = pyarrow.array([0] * 64, pyarrow.int32())
    pyarrow.parquet.write_table(pyarrow.table({
        "question": pyarrow.DictionaryArray.from_arrays(indices, pyarrow.array(["Q" * 2**22])),
        "answer": pyarrow.array(["4"] * 64)}), path, compression="zstd")
    code = ("import resource, sys\n"
            "from massgen_mcp.cli.main import main\n"
            "import pyarrow.parquet\n"
            "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
            "resource.setrlimit(resource.RLIMIT_AS, (size + 2**26, size + 2**26))\n"
            f"sys.exit(main(['eval', {str(path)!r}, '--limit', '64', '--models', 'a,b']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == EXIT_INPUT, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "massgen-mcp: wide.parquet: ran out of memory while reading it; pass a smaller --limit, or "
        "split the file"]


# -- what rows declare: a row, a row's fields and the items kept are capped --------------------

def write_repeated(path: Path, value: str, rows: int) -> Path:
    """A Parquet table of ``rows`` rows whose question is one dictionary value: a few KB on
    disk, however large the value and the rows it declares."""
    path.parent.mkdir(parents=True, exist_ok=True)
    indices = pyarrow.array([0] * rows, pyarrow.int32())
    pyarrow.parquet.write_table(pyarrow.table({
        "question": pyarrow.DictionaryArray.from_arrays(indices, pyarrow.array([value])),
        "answer": pyarrow.array(["4"] * rows)}), path, compression="zstd")
    return path


@linux_only
def test_rows_of_a_megabyte_each_cost_the_cap_on_kept_text_not_what_they_declare(
        tmp_path: Path) -> None:
    """10,000 rows of one 1 MiB value, no --limit: what an 837-byte file can ask for (10 GB,
    which grew at 1 GB/s until the OOM killer came); refused in one line at the cap."""
    path = write_repeated(tmp_path / "mega.parquet", "Q" * 2**20, MAX_ITEMS)
    assert path.stat().st_size < 64_000
    found, peak = load_bounded(str(path))
    assert found == ("mega.parquet#63: the items taken so far hold more than 64 M characters, "
                     "the most eval keeps; pass a smaller --limit, or split the file")
    assert peak < PEAK_MIB


def test_a_row_declaring_more_than_the_cap_is_refused_before_it_is_decoded(
        tmp_path: Path) -> None:
    path = write_repeated(tmp_path / "big.parquet", "Q" * 9 * 2**20, 3)
    with pytest.raises(ConfigError) as caught:
        load_items(str(path), limit=1)
    assert str(caught.value) == ("big.parquet#0: the row holds 9,437,201 bytes, more than "
                                 "8 MiB; each row must be one item")


def test_a_csv_header_or_row_wider_than_the_cap_is_refused(tmp_path: Path) -> None:
    """A header of 1.5 M columns made each 6-byte row a mapping of 1.5 M names (70 MB)."""
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(f"c{n}" for n in range(1_500)) + "\nq,a\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_items(str(wide), Fields("c0", "c1"), limit=1)
    assert str(caught.value) == ("wide.csv:1: the header has 1,500 cells, more than 1,000; "
                                 "keep the columns an item needs")
    row = tmp_path / "row.csv"
    row.write_text("question,answer\nq,a\n" + ",".join(["x"] * 1_001) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_items(str(row))
    assert str(caught.value) == ("row.csv:3: the row has 1,001 cells, more than 1,000; keep "
                                 "the columns an item needs")


def test_a_csv_row_of_quoted_lines_is_capped_as_a_whole(tmp_path: Path) -> None:
    """Quoted cells may hold line breaks, so one row can run on for any number of lines."""
    path = tmp_path / "long.csv"
    path.write_bytes(b"question,answer\nq,a\n" + b'"x\n",' * (2 * 2**20) + b"\n")
    with pytest.raises(ConfigError) as caught:
        load_items(str(path))
    assert str(caught.value) == ("long.csv:3: the row is longer than 8 MiB; each row must be "
                                 "one item (check the file's quoting)")


def test_a_local_hf_folder_is_read_in_place_not_converted_into_the_cache(
        tmp_path: Path, hf_offline: Path) -> None:
    """``hf:./folder --limit 1``: load_dataset would convert the whole folder into its Arrow
    cache before row 1 (a 25 KB file wrote 205 MB); the folder's files are streamed instead."""
    folder = tmp_path / "ds"
    write_repeated(folder / "data" / "test-00000-of-00001.parquet", "Q" * 2**20, 200)
    items = load_items(f"hf:{folder}", limit=1)
    assert [item.source for item in items] == [f"hf:{folder}::test#0"]
    written = sum(path.stat().st_size for path in hf_offline.rglob("*") if path.is_file())
    assert written < 2**20


def test_a_local_hf_folder_reads_only_its_own_files(tmp_path: Path, hf_offline: Path) -> None:
    """A cloned folder's README can point its data_files anywhere, and a file can be a link:
    what eval sends to the models stays inside the folder."""
    outside = tmp_path / "private"
    outside.mkdir()
    write_jsonl(outside / "test.jsonl", [{"question": "secret", "answer": "1"}])
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "test.jsonl").symlink_to(outside / "test.jsonl")
    with pytest.raises(ConfigError, match=r"test\.jsonl is outside the folder"):
        load_items(f"hf:{folder}", limit=1)
    (folder / "test.jsonl").unlink()
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n"
                                      "  - split: test\n    path: ../private/test.jsonl\n---\n")
    with pytest.raises(ConfigError, match=r"test\.jsonl is outside the folder"):
        load_items(f"hf:{folder}", limit=1)


@pytest.mark.parametrize("pattern", ["/**/*.nomatch.csv", "../**/*.csv", "data/../../*.csv",
                                     "~/*.csv", "C:/*.csv", "file:///etc/*.csv",
                                     "http://127.0.0.1:9/beacon/*.csv"])
def test_a_local_hf_folder_readme_pattern_that_could_reach_outside_is_refused_by_its_shape(
        tmp_path: Path, hf_offline: Path, pattern: str) -> None:
    """``/**/*.nomatch.csv`` walked the whole filesystem (27.8 s, 671 MB) before any check:
    such a pattern is refused as it is written, before anything is listed."""
    folder = tmp_path / "ds2"
    folder.mkdir()
    write_csv(folder / "test.csv", [{"question": "q", "answer": "a"}])
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n"
                                      f"  - split: test\n    path: {json.dumps(pattern)}\n---\n")
    with pytest.raises(ConfigError) as caught:
        load_items(f"hf:{folder}", limit=1)
    assert str(caught.value) == (
        f"hf:{folder}: {folder / 'README.md'}: data_files {pattern} is outside the folder or "
        "could reach outside it (a URL, an absolute path, ~ or ..); eval reads only the "
        "folder's own files, named relative to it")


def test_a_local_hf_folder_readme_configs_name_its_files(tmp_path: Path,
                                                         hf_offline: Path) -> None:
    """The README's configs are read here, as ``datasets`` reads them: the default config
    (or the one named), a split's patterns matched inside the folder, in order."""
    folder = tmp_path / "ds"
    for sub in ("plain", "hard/x"):
        (folder / sub).mkdir(parents=True)
    write_jsonl(folder / "plain" / "test.jsonl", [{"question": "plain", "answer": "1"}])
    write_jsonl(folder / "hard" / "x" / "b.jsonl", [{"question": "hard b", "answer": "2"}])
    write_jsonl(folder / "hard" / "a.jsonl", [{"question": "hard a", "answer": "3"}])
    (folder / "README.md").write_text(
        "---\nlicense: mit\nconfigs:\n- config_name: plain\n  default: true\n  data_files:\n"
        "  - split: test\n    path: plain/*.jsonl\n- config_name: hard\n  data_files:\n"
        "  - split: test\n    path: [\"hard/**/*.jsonl\"]\n- config_name: dir\n"
        "  data_dir: hard\n---\n# A dataset\n")
    assert [i.question for i in load_items(f"hf:{folder}")] == ["plain"]
    assert [i.question for i in load_items(f"hf:{folder}:hard")] == ["hard a", "hard b"]
    assert [i.question for i in load_items(f"hf:{folder}:dir:train")] == ["hard a", "hard b"]
    with pytest.raises(ConfigError, match=r"no config 'other' \(configs: plain, hard, dir\)"):
        load_items(f"hf:{folder}:other")


def test_a_parquet_file_is_read_by_the_columns_the_fields_name(tmp_path: Path) -> None:
    """Only the columns the mapping uses are decoded: a list column of 16 copies of a
    1 MiB value that no field names costs nothing; named, its row is refused by the bytes
    its nested values declare, before the row is decoded."""
    big = "x" * 2**20
    path = tmp_path / "lists.parquet"
    pyarrow.parquet.write_table(pyarrow.table({
        "question": pyarrow.array(["q"] * 4), "answer": pyarrow.array(["A"] * 4),
        "junk": pyarrow.array([[big] * 16] * 4, type=pyarrow.list_(pyarrow.string()))}),
        path, compression="zstd")
    assert [item.question for item in load_items(str(path), limit=1)] == ["q"]
    with pytest.raises(ConfigError, match=r"^lists\.parquet#0: the row holds 16,7\d\d,\d\d\d "
                       "bytes, more than 8 MiB; each row must be one item$"):
        load_items(str(path), Fields(choices="junk"), limit=1)
