"""A dataset file, opened by its extension: JSON lines and CSV read here, line by line;
Parquet by :mod:`.arrow_rows`.

An 8 GiB ``.jsonl`` must not be read whole before ``--limit`` applies, and a file of NUL
bytes is one endless line: so a line over :data:`~.source_rows.MAX_LINE_BYTES` is an error,
and so is a CSV row (whose quoted cells may span lines) over
:data:`~.source_rows.MAX_ROW_BYTES` or :data:`~.source_rows.MAX_COLUMNS` cells, or a header
over :data:`~.source_rows.MAX_COLUMNS` columns: every row becomes a mapping of the header's
names, so a header of a million columns would make each six-byte row cost tens of megabytes.
A random sample must see every row: it is refused for a file over
:data:`~.source_rows.MAX_SAMPLE_FILE_BYTES`.

Both :func:`massgen_mcp.evaluation.sources.open_source` (a file named on the command line)
and :mod:`.hf_folder` (the data files of a local ``hf:`` folder) open files here.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.arrow_rows import open_parquet
from massgen_mcp.evaluation.source_rows import (
    EXTENSIONS,
    MAX_COLUMNS,
    MAX_LINE_BYTES,
    MAX_ROW_BYTES,
    MAX_SAMPLE_FILE_BYTES,
    SAMPLE,
    Lazy,
    Source,
)


def open_file(source: str, path: Path, sampling: bool, fields: Sequence[str]) -> Source:
    """The file at ``path`` (named ``source`` in messages) ready to stream, read by its
    extension; ``sampling`` and ``fields`` as for
    :func:`massgen_mcp.evaluation.sources.open_source`."""
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
        return open_parquet(path, sampling, fields)
    try:
        size = path.stat().st_size
        file = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot be read ({exc.strerror or exc})") from None
    if sampling and size > MAX_SAMPLE_FILE_BYTES:
        file.close()
        raise ConfigError(f"{path.name}: {size / 2**30:.1f} GiB; a random sample (--seed) "
                          f"reads the whole file, at most {MAX_SAMPLE_FILE_BYTES // 2**30} GiB; "
                          "drop --seed to take the first --limit rows, or split the file")
    reader = _csv_rows if suffix == ".csv" else _jsonl_rows
    return Source(path.name, reader(path.name, file))


def _lines(name: str, file: IO[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, offset of the line in the file, the line) without its BOM; closes the
    file when done or abandoned."""
    with file:
        offset = 0
        for number in range(1, 2**63):
            line = file.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES:
                raise ConfigError(f"{name}:{number}: the line is longer than "
                                  f"{MAX_LINE_BYTES // 2**20} MiB; each line must be one item")
            start = offset
            offset += len(line)
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line, start = line[len(codecs.BOM_UTF8):], start + len(codecs.BOM_UTF8)
            yield number, start, line


def _jsonl_rows(name: str, file: IO[bytes]) -> Iterator[Lazy]:
    for number, _, raw in _lines(name, file):
        try:
            line = raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{name}:{number}: byte {exc.start + 1} of the line is not "
                              "UTF-8; save the file as UTF-8") from None
        if line.strip():
            yield f"{name}:{number}", _json_parser(name, number, line)


def _json_parser(name: str, number: int, line: str) -> Callable[[], object]:
    def parse() -> object:
        try:
            return load_json(line)
        except UnsafeJson as exc:
            raise ConfigError(f"{name}:{number}: {exc}; each line must be one JSON object "
                              "such as {\"question\": \"...\", \"answer\": \"...\"}") from None
    return parse


def _csv_rows(name: str, file: IO[bytes]) -> Iterator[Lazy]:
    """CSV is parsed as it streams (a quoted field may span lines); rows are cheap, so each
    is parsed at once and its parser only hands it over."""

    row_bytes = 0  # of the row being parsed: its quoted cells may span any number of lines
    start = 1

    def text() -> Iterator[str]:
        nonlocal row_bytes
        for number, offset, raw in _lines(name, file):
            row_bytes += len(raw)
            if row_bytes > MAX_ROW_BYTES:
                raise ConfigError(f"{name}:{start}: the row is longer than "
                                  f"{MAX_ROW_BYTES // 2**20} MiB; each row must be one item "
                                  "(check the file's quoting)")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{name}:{number}: byte {offset + exc.start + 1} of the "
                                  "file is not UTF-8; save the file as UTF-8") from None

    reader = csv.reader(text())
    header: list[str] | None = None
    while True:
        start = reader.line_num + 1  # a quoted field may span lines: name the first
        row_bytes = 0
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ConfigError(f"{name}:{start}: {exc}; check the file's quoting") from None
        if not values:
            continue  # a blank line
        if len(values) > MAX_COLUMNS:
            what = "header" if header is None else "row"
            raise ConfigError(f"{name}:{start}: the {what} has {len(values):,} cells, more "
                              f"than {MAX_COLUMNS:,}; keep the columns an item needs")
        if header is None:
            header = values
            continue
        # A short row's missing cells are null, as csv.DictReader has them.
        cells = dict(zip(header, values + [None] * (len(header) - len(values)), strict=False))
        yield f"{name}:{start}", _given(cells)


def _given(row: object) -> Callable[[], object]:
    return lambda: row
