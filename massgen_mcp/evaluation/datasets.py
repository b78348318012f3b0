"""Questions with known answers, from the files and datasets people already have.

``massgen-mcp eval`` reads them from any of:

* ``.jsonl`` / ``.json``: JSON lines, one object per line (the format eval has always read);
* ``.csv``: a header row and one row per item, UTF-8 with or without a BOM (what a spreadsheet
  exports);
* ``.parquet``: a table, read with pyarrow (how Hugging Face and pandas store datasets);
* ``@sample``: the 20 arithmetic questions bundled with massgen-mcp, to try eval without a file;
* ``hf:NAME[:CONFIG[:SPLIT]]``: a Hugging Face dataset (split ``test`` unless given), through
  ``datasets.load_dataset``, so benchmarks such as ``hf:cais/mmlu:all:test`` or
  ``hf:openai/gsm8k:main`` need no conversion; NAME may be a local folder of data files.

Every format becomes rows (dicts), and one function, :func:`_item`, turns a row into an
:class:`Item`: one field mapping (:class:`Fields`; a dotted path such as ``answer.text`` reaches
into nested objects and lists) and the same errors for all. An error is a
:class:`~massgen_mcp.core.errors.ConfigError` that names the row (``file.jsonl:7``, a CSV's
line, ``file.parquet#41`` or ``hf:NAME:CONFIG:SPLIT#41`` with a 0-based row index), the field
and the fix.

Multiple choice: with a choices field, the choices are appended to the question as lines
``A. ...``, ``B. ...``, and the answer (a 0-based index, a letter or the choice's text) becomes
the letter, which the scorer compares with the reply's last standalone capital letter; so at most
10 choices (A-J).

pyarrow and datasets (the ``eval`` extra) are imported only when a Parquet file or a Hugging Face
dataset is read: importing them takes most of a second, and the CLI should start fast.
"""

from __future__ import annotations

import codecs
import csv
import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import ConfigError

SAMPLE = "@sample"
SAMPLE_PATH = Path(__file__).parent.parent / "data" / "eval_sample.jsonl"
EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
MAX_ITEMS = 10_000  # without a --limit: a typo'd split should not start 100,000 runs
LETTERS = "ABCDEFGHIJ"  # the scorer's letters
INSTALL_EVAL = "pip install 'massgen-mcp[eval]'"
_FLAGS = {"question": "--question-field", "answer": "--answer-field", "choices": "--choices-field"}
# Field names datasets commonly use, for the flag an error suggests.
_LIKELY = {
    "question": ("question", "prompt", "problem", "input", "query", "instruction", "text"),
    "answer": ("answer", "label", "target", "output", "solution", "gold", "expected"),
    "choices": ("choices", "options", "answers", "endings", "candidates"),
}
_MISSING = object()

Row = tuple[str, object]  # where it came from (file:line, file#index), and the row


@dataclass(frozen=True)
class Item:
    """One question: the text sent to the team (choices appended) and its expected answer."""

    question: str
    answer: str  # as the dataset gives it, stripped; for a multiple-choice item the letter
    choices: tuple[str, ...] = ()
    source: str = ""  # e.g. "questions.csv:12" or "hf:openai/gsm8k:main:test#41"


@dataclass(frozen=True)
class Fields:
    """Which field of a row holds what (``--question-field`` and friends)."""

    question: str = "question"
    answer: str = "answer"
    choices: str | None = None


def load_items(source: str, fields: Fields = Fields(), *, limit: int | None = None,
               seed: int | None = None) -> list[Item]:
    """The items of ``source`` (a file, ``@sample`` or ``hf:NAME[:CONFIG[:SPLIT]]``).

    With ``seed`` the rows are shuffled by ``random.Random(seed)`` first, else kept in order;
    then the first ``limit`` are taken. Only the rows taken are mapped to items, so only their
    field errors are reported. Without a limit, more than :data:`MAX_ITEMS` rows is an error.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: {limit}; give a whole number of at least 1")
    if source.startswith("hf:"):
        name, rows = _read_hf(source)
    else:
        path = SAMPLE_PATH if source == SAMPLE else Path(source)
        name, rows = path.name, _read_file(source, path)
    if not rows:
        raise ConfigError(f"{name}: no rows; the dataset is empty")
    if limit is None and len(rows) > MAX_ITEMS:
        raise ConfigError(f"{name}: {len(rows):,} rows, more than {MAX_ITEMS:,} at once; pass "
                          "--limit N (with --seed S for a random sample)")
    order = list(range(len(rows)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    return [_item(*rows[index], fields) for index in order[:limit]]


def _read_file(source: str, path: Path) -> list[Row]:
    if path.is_dir():
        raise ConfigError(f"{source}: a folder; pass a file, or hf:{source} for a folder of "
                          "Hugging Face data files")
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        raise ConfigError(f"{source}: unknown file type {suffix or '(no extension)'!r}; use "
                          f"{', '.join(EXTENSIONS)}, {SAMPLE} or hf:NAME[:CONFIG[:SPLIT]]")
    if not path.is_file():
        raise ConfigError(f"{source}: no such file")
    if suffix == ".parquet":
        return _read_parquet(path)
    try:
        data = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot be read ({exc.strerror or exc})") from None
    return _read_csv(path.name, data) if suffix == ".csv" else _read_jsonl(path.name, data)


def _read_jsonl(name: str, data: bytes) -> list[Row]:
    rows: list[Row] = []
    for number, raw in enumerate(data.splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{name}:{number}: byte {exc.start + 1} of the line is not "
                              "UTF-8; save the file as UTF-8") from None
        if not line.strip():
            continue
        try:
            rows.append((f"{name}:{number}", load_json(line)))
        except UnsafeJson as exc:
            raise ConfigError(f"{name}:{number}: {exc}; each line must be one JSON object "
                              "such as {\"question\": \"...\", \"answer\": \"...\"}") from None
    return rows


def _read_csv(name: str, data: bytes) -> list[Row]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{name}:{line}: byte {exc.start + 1} of the file is not UTF-8; save "
                          "the file as UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[Row] = []
    header: list[str] | None = None
    while True:
        start = reader.line_num + 1  # a quoted field may span lines: name the first
        try:
            values = next(reader)
        except StopIteration:
            return rows
        except csv.Error as exc:
            raise ConfigError(f"{name}:{start}: {exc}; check the file's quoting") from None
        if not values:
            continue  # a blank line
        if header is None:
            header = values
            continue
        # A short row's missing cells are null, as csv.DictReader has them.
        cells = dict(zip(header, values + [None] * (len(header) - len(values)), strict=False))
        rows.append((f"{name}:{start}", cells))


def _read_parquet(path: Path) -> list[Row]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"{path.name}: reading Parquet needs pyarrow; {INSTALL_EVAL}") from None
    try:
        table = pyarrow.parquet.read_table(path)
    except (pyarrow.ArrowException, OSError) as exc:
        raise ConfigError(f"{path.name}: not a readable Parquet file ({_one_line(exc)})") \
            from None
    return [(f"{path.name}#{index}", row) for index, row in enumerate(table.to_pylist())]


def _read_hf(source: str) -> tuple[str, list[Row]]:
    parts = source.removeprefix("hf:").split(":")
    if len(parts) > 3 or not parts[0]:
        raise ConfigError(f"{source}: expected hf:NAME[:CONFIG[:SPLIT]], e.g. "
                          "hf:cais/mmlu:all:test")
    name, config, split = [*parts, "", ""][:3]
    split = split or "test"
    # datasets.load_dataset reads a local folder of that name before the Hub: a cloned
    # repository could shadow a benchmark with answers of its own. A folder is read only when
    # it is written as a path.
    if not name.startswith(("/", "./", "../", "~")) and Path(name).exists():
        raise ConfigError(f"{source}: there is a local {name!r} here, which would be read "
                          f"instead of the Hugging Face dataset; write hf:./{name} to read "
                          "the local one, or run from another folder")
    name = str(Path(name).expanduser()) if name.startswith("~") else name
    label = f"hf:{name}:{config}:{split}"
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"{source}: reading Hugging Face datasets needs the datasets "
                          f"package; {INSTALL_EVAL}") from None
    try:
        dataset = datasets.load_dataset(name, config or None, split=split)
        rows: list[dict[str, Any]] = dataset.to_list()
    except Exception as exc:  # the Hub, the network, the files: any of them, said in one line
        raise ConfigError(f"{source}: Hugging Face dataset {name!r} (config "
                          f"{config or 'default'}, split {split}) could not be loaded: "
                          f"{_one_line(exc)}") from None
    return label, [(f"{label}#{index}", row) for index, row in enumerate(rows)]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text[:300]}"


def _item(where: str, row: object, fields: Fields) -> Item:
    """The one mapping from a row, of any format, to an item."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: {_kind(row)}, not an object; each line must be one JSON "
                          "object such as {\"question\": \"...\", \"answer\": \"...\"}")
    question = _field(row, where, "question", fields.question)
    if not isinstance(question, str):
        raise ConfigError(f"{where}: field {fields.question!r} is {_kind(question)}; the "
                          "question must be text")
    question = question.strip()
    if not question:
        raise ConfigError(f"{where}: field {fields.question!r} is empty; every item needs a "
                          "question")
    answer = _field(row, where, "answer", fields.answer)
    if not isinstance(answer, str | int | float | bool):
        raise ConfigError(f"{where}: field {fields.answer!r} is {_kind(answer)}; the answer "
                          f"must be text or a number (reach into it with a dotted path, e.g. "
                          f"{fields.answer}.text or {fields.answer}.0)")
    if not str(answer).strip():
        raise ConfigError(f"{where}: field {fields.answer!r} is empty; every item needs an "
                          "answer")
    if fields.choices is None:
        return Item(question, str(answer).strip(), source=where)
    choices = _choices(_field(row, where, "choices", fields.choices), where, fields.choices)
    lines = "\n".join(f"{letter}. {choice}" for letter, choice in zip(LETTERS, choices,
                                                                      strict=False))
    return Item(f"{question}\n\n{lines}", _letter(answer, choices, where), choices, where)


def _field(row: dict[Any, Any], where: str, role: str, path: str) -> object:
    """The value at ``path``; a missing or null one is an error that suggests the flag."""
    value = _lookup(row, path)
    if value is _MISSING:
        keys = [str(key) for key in row]
        guess = next((name for name in _LIKELY[role] if name in keys), None)
        fix = f"pass {_FLAGS[role]} {guess}" if guess and guess != path.split(".")[0] else \
            f"pass {_FLAGS[role]} with one of them"
        raise ConfigError(f"{where}: no field {path!r} (fields: {', '.join(keys) or 'none'}); "
                          f"{fix}")
    if value is None:
        raise ConfigError(f"{where}: field {path!r} is empty (null); every item needs its "
                          f"{role}")
    return value


def _lookup(row: dict[Any, Any], path: str) -> object:
    if path in row:
        return row[path]
    value: object = row
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isascii() and part.isdigit() \
                and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _choices(value: object, where: str, field: str) -> tuple[str, ...]:
    """A list, a JSON list in a string (CSV) or a string of ``|``-separated choices."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            try:
                value = load_json(value)
            except UnsafeJson as exc:
                raise ConfigError(f"{where}: field {field!r} is not a JSON list ({exc}); write "
                                  "[\"first\", \"second\"] or first|second") from None
        else:
            value = value.split("|")
    if not isinstance(value, list | tuple) or not all(
            isinstance(choice, str | int | float) for choice in value):
        raise ConfigError(f"{where}: field {field!r} is {_kind(value)}; the choices must be a "
                          "list of texts, a JSON list or texts separated by '|'")
    choices = tuple(str(choice).strip() for choice in value)
    if not 2 <= len(choices) <= len(LETTERS):
        raise ConfigError(f"{where}: field {field!r} holds {len(choices)} "
                          f"{'choice' if len(choices) == 1 else 'choices'}; give 2 to "
                          f"{len(LETTERS)} (A-{LETTERS[-1]})")
    if "" in choices:
        raise ConfigError(f"{where}: field {field!r}: choice {LETTERS[choices.index('')]} is "
                          "empty; remove it or fill it in")
    return choices


def _letter(answer: str | int | float | bool, choices: tuple[str, ...], where: str) -> str:
    """The letter of the choice the answer names: by 0-based index, letter or text."""
    last = len(choices) - 1
    if isinstance(answer, int) and not isinstance(answer, bool):
        if not 0 <= answer <= last:
            raise _out_of_range(where, answer, last)
        return LETTERS[answer]
    text = str(answer).strip()
    number = int(text) if text.isascii() and text.isdigit() else None
    found: dict[int, str] = {}  # the choices it could mean, and how
    if number is not None and number <= last:
        found[number] = f"index {text}"
    if len(text) == 1 and text.upper() in LETTERS[:len(choices)]:
        found.setdefault(LETTERS.index(text.upper()), f"letter {text}")
    for position, choice in enumerate(choices):
        if choice == text:
            found.setdefault(position, "its text")
    if len(found) == 1:
        return LETTERS[next(iter(found))]
    if found:
        which = " or ".join(f"choice {LETTERS[p]} ({how})" for p, how in sorted(found.items()))
        fix = "the 0-based index as a JSON number" if any(
            how.startswith("letter") for how in found.values()) else "the letter"
        raise ConfigError(f"{where}: answer {text!r} could be {which}; write {fix} instead")
    if number is not None:
        raise _out_of_range(where, number, last)
    raise ConfigError(f"{where}: answer {text!r} is not an index (0-{last}), a letter "
                      f"(A-{LETTERS[last]}) or the text of one of the {len(choices)} choices; "
                      "fix the answer, or check --answer-field")


def _out_of_range(where: str, index: int, last: int) -> ConfigError:
    return ConfigError(f"{where}: answer index {index} is out of range for {last + 1} choices "
                       f"(0-{last}); indexes start at 0")


def _kind(value: object) -> str:
    """What a value is, in the words of JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"
