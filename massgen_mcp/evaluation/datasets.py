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

Sources are streamed (:mod:`.sources`): eval reads only the rows it takes, so a huge or
hostile file costs what ``--limit`` asks for, not its size; and each row taken is mapped to its
item at once (the row itself is not kept), the items' text at most :data:`MAX_TEXT_CHARS`, so
what rows declare (10,000 rows of a one-megabyte value fit in an 837-byte Parquet file) costs at
most that much.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, NoReturn

from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.source_rows import Source
from massgen_mcp.evaluation.sources import open_source

MAX_ITEMS = 10_000  # without a --limit: a typo'd split should not start 100,000 runs
MAX_TEXT_CHARS = 64 * 2**20  # the items' text eval keeps: a benchmark's 10,000 are a few MB
LETTERS = "ABCDEFGHIJ"  # the scorer's letters
_FLAGS = {"question": "--question-field", "answer": "--answer-field", "choices": "--choices-field"}
# Field names datasets commonly use, for the flag an error suggests.
_LIKELY = {
    "question": ("question", "prompt", "problem", "input", "query", "instruction", "text"),
    "answer": ("answer", "label", "target", "output", "solution", "gold", "expected"),
    "choices": ("choices", "options", "answers", "endings", "candidates"),
}
_MISSING = object()

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

    The source is streamed (:mod:`.sources`) and read only as far as needed: without
    ``seed``, the first ``limit`` rows; with ``seed`` and ``limit``, a random sample of
    ``limit`` rows drawn by reservoir sampling with ``random.Random(seed)`` (every row is
    read, none kept but the sample); with ``seed`` alone, every row, shuffled. Only the rows
    taken are parsed and mapped to items, so only their errors are reported. Without a
    limit, more than :data:`MAX_ITEMS` rows is an error. Running out of memory is one line.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: {limit}; give a whole number of at least 1")
    opened = open_source(source, sampling=seed is not None and limit is not None,
                         fields=[path for path in (fields.question, fields.answer,
                                                   fields.choices) if path])
    try:
        taken = _take(opened, limit, seed, fields)
        if not taken:
            raise ConfigError(f"{opened.name}: no rows; the dataset is empty")
        for item in taken:  # in the order eval uses them: the first bad one is reported
            if isinstance(item, ConfigError):
                raise item
        return [item for item in taken if isinstance(item, Item)]
    except MemoryError:
        raise ConfigError(f"{opened.name}: ran out of memory while reading it; pass a smaller "
                          "--limit, or split the file") from None


Taken = Item | ConfigError  # a row taken: its item, or why it has none (said if it is kept)


class _Kept:
    """The items kept so far, and their text, held to :data:`MAX_TEXT_CHARS`."""

    def __init__(self, fields: Fields) -> None:
        self.fields, self.chars = fields, 0

    def take(self, where: str, parse: Callable[[], object]) -> Taken:
        """The row parsed (its error raised: the file cannot be read on) and mapped to its
        item (its error kept, to be raised only if the row stays in the sample)."""
        row = parse()
        try:
            item: Taken = _item(where, row, self.fields)
        except ConfigError as exc:
            exc.__context__ = exc.__cause__ = None  # keep no frame, and so no row, alive
            item = exc.with_traceback(None)
        self.chars += _chars(item)
        if self.chars > MAX_TEXT_CHARS:
            raise ConfigError(f"{where}: the items taken so far hold more than "
                              f"{MAX_TEXT_CHARS // 2**20} M characters, the most eval keeps; "
                              "pass a smaller --limit, or split the file")
        return item

    def drop(self, item: Taken) -> None:
        self.chars -= _chars(item)


def _chars(item: Taken) -> int:
    return len(item.question) + len(item.answer) if isinstance(item, Item) else 0


def _take(source: Source, limit: int | None, seed: int | None, fields: Fields) -> list[Taken]:
    """The rows :func:`load_items` keeps, each mapped to its item, in the order it uses them."""
    kept = _Kept(fields)
    if limit is None:
        if source.declared is not None and source.declared > MAX_ITEMS:
            _too_many(source.name)
        items: list[Taken] = []
        for where, parse in source.rows:
            if len(items) == MAX_ITEMS:
                _too_many(source.name)
            items.append(kept.take(where, parse))
        if seed is not None:
            random.Random(seed).shuffle(items)
        return items
    if seed is None:
        return [kept.take(where, parse) for where, parse in islice(source.rows, limit)]
    rng = random.Random(seed)
    sample: list[Taken] = []
    for seen, (where, parse) in enumerate(source.rows):  # Algorithm R
        if seen < limit:
            sample.append(kept.take(where, parse))
        elif (slot := rng.randrange(seen + 1)) < limit:
            kept.drop(sample[slot])
            sample[slot] = kept.take(where, parse)
    rng.shuffle(sample)
    return sample


def _too_many(name: str) -> NoReturn:
    raise ConfigError(f"{name}: more than {MAX_ITEMS:,} rows at once; pass --limit N (with "
                      "--seed S for a random sample)")


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
