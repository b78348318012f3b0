"""Rows from a dataset's file, streamed: eval reads only as far as the rows it takes.

A dataset is untrusted input (a cloned repository's, a download): an 8 GiB ``.jsonl`` or a
1 MB Parquet file declaring 60 million rows of a one-megabyte value must not be read whole
before ``--limit`` applies. So each reader yields rows one at a time, each as a *lazy* row
(``where``, and a function that parses it): :func:`massgen_mcp.evaluation.datasets.load_items`
stops at the rows it needs and parses only the ones it keeps.

* JSON lines and CSV are read line by line; a line over :data:`MAX_LINE_BYTES` is an error
  (a file of NUL bytes is one endless line), and so is a CSV row (whose quoted cells may span
  lines) over :data:`MAX_ROW_BYTES` or :data:`MAX_COLUMNS` cells, or a header over
  :data:`MAX_COLUMNS` columns: every row becomes a mapping of the header's names, so a header
  of a million columns would make each six-byte row cost tens of megabytes.
* Parquet is read by batches of :data:`BATCH_ROWS` rows, text columns kept dictionary-encoded,
  so a batch costs its rows' indices, not their decoded values. A column chunk that declares
  more than :data:`MAX_CHUNK_BYTES` uncompressed (a decompression bomb) is refused up front,
  and so is a table of more than :data:`MAX_COLUMNS` columns; a row is decoded only after the
  bytes it declares (a dictionary value counted by its length) are found to be at most
  :data:`MAX_ROW_BYTES`: an 837-byte file can declare rows of one megabyte each.
* ``hf:`` with a local folder (written as a path) reads the folder's data files, as
  ``datasets`` resolves them for the split, with these same readers: ``datasets.load_dataset``
  would first convert the whole folder into its Arrow cache (a 25 KB file became 205 MB there
  before row 1). Only a dataset from the Hub goes through ``load_dataset`` (and its cache);
  its rows get the same check of their size before they are decoded.
* A random sample (``--seed`` with ``--limit``) must see every row: it is refused for a file
  over :data:`MAX_SAMPLE_FILE_BYTES` or a table declaring over :data:`MAX_SAMPLE_ROWS` rows.

pyarrow and datasets (the ``eval`` extra) are imported only when a Parquet file or a Hugging
Face dataset is read: importing them takes most of a second, and the CLI should start fast.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from massgen_mcp.core.edges import UnsafeJson, load_json
from massgen_mcp.core.errors import ConfigError

SAMPLE = "@sample"
SAMPLE_PATH = Path(__file__).parent.parent / "data" / "eval_sample.jsonl"
EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
INSTALL_EVAL = "pip install 'massgen-mcp[eval]'"
MAX_LINE_BYTES = 8 * 2**20  # one question, its choices and answer: far more than any benchmark's
MAX_ROW_BYTES = MAX_LINE_BYTES  # ... in any format (a CSV row may span lines)
MAX_COLUMNS = 1_000  # a row's fields (a CSV's header, a table's columns)
MAX_SAMPLE_FILE_BYTES = 2**30  # a sample reads the whole file
MAX_SAMPLE_ROWS = 10_000_000  # ... and every row of a table
MAX_CHUNK_BYTES = 2**30  # what one Parquet column chunk may declare, decompressed
BATCH_ROWS = 64  # Parquet rows decoded at a time

Lazy = tuple[str, Callable[[], object]]  # where the row is (file:line, file#index), its parser


@dataclass
class Source:
    """A dataset opened for reading: its name in messages, its rows in order, and how many
    rows it declares when it knows (Parquet, Hugging Face) before reading them."""

    name: str
    rows: Iterator[Lazy]
    declared: int | None = None


def open_source(source: str, *, sampling: bool) -> Source:
    """``source`` (a file, ``@sample`` or ``hf:NAME[:CONFIG[:SPLIT]]``) ready to stream;
    ``sampling``: every row will be read, so the caps on a whole read apply."""
    if source.startswith("hf:"):
        return _open_hf(source, sampling)
    path = SAMPLE_PATH if source == SAMPLE else Path(source)
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
        return _open_parquet(path, sampling)
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


def _open_parquet(path: Path, sampling: bool) -> Source:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"{path.name}: reading Parquet needs pyarrow; {INSTALL_EVAL}") from None
    try:
        schema = pyarrow.parquet.read_schema(path)
        text = [field.name for field in schema
                if pyarrow.types.is_string(field.type) or pyarrow.types.is_large_string(field.type)
                or pyarrow.types.is_binary(field.type)]
        table = pyarrow.parquet.ParquetFile(path, read_dictionary=text)
        metadata = table.metadata
        chunks = [metadata.row_group(g).column(c).total_uncompressed_size
                  for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)]
    except (pyarrow.ArrowException, OSError) as exc:
        raise ConfigError(f"{path.name}: not a readable Parquet file ({one_line(exc)})") \
            from None
    if metadata.num_columns > MAX_COLUMNS:
        raise ConfigError(f"{path.name}: the table has {metadata.num_columns:,} columns, more "
                          f"than {MAX_COLUMNS:,}; keep the columns an item needs")
    if chunks and max(chunks) > MAX_CHUNK_BYTES:
        raise ConfigError(f"{path.name}: a column chunk declares {max(chunks):,} bytes "
                          f"uncompressed, more than {MAX_CHUNK_BYTES:,}; write the table with "
                          "smaller row groups")
    _check_sample(path.name, metadata.num_rows, sampling)
    return Source(path.name, _parquet_rows(path.name, table), metadata.num_rows)


def _parquet_rows(name: str, table: Any) -> Iterator[Lazy]:
    import pyarrow

    index = 0
    try:
        for batch in table.iter_batches(batch_size=BATCH_ROWS):
            for offset in range(batch.num_rows):
                yield f"{name}#{index}", _batch_row(f"{name}#{index}", batch, offset)
                index += 1
    except (pyarrow.ArrowException, OSError) as exc:
        raise ConfigError(f"{name}#{index}: not a readable Parquet row ({one_line(exc)})") \
            from None


def _batch_row(where: str, batch: Any, offset: int) -> Callable[[], object]:
    def parse() -> object:
        row = batch.slice(offset, 1)
        _check_row_bytes(where, row.columns)
        return row.to_pylist()[0]
    return parse


def _check_row_bytes(where: str, arrays: Iterable[Any]) -> None:
    """Refuse a row (one-row slices of its arrays) that declares more than
    :data:`MAX_ROW_BYTES`, before it is decoded into Python objects."""
    size = sum(_declared_bytes(array) for array in arrays)
    if size > MAX_ROW_BYTES:
        raise ConfigError(f"{where}: the row holds {size:,} bytes, more than "
                          f"{MAX_ROW_BYTES // 2**20} MiB; each row must be one item")


def _declared_bytes(array: Any) -> int:
    """The bytes a (short) Arrow array's values hold, undecoded: the buffers it references,
    except that a dictionary-encoded value counts its own length in the dictionary (the
    array's ``nbytes`` would count the whole dictionary, and one 1 MiB value referenced by
    a million rows is the cheap way to declare a terabyte)."""
    import pyarrow

    if isinstance(array, pyarrow.ChunkedArray):
        return sum(_declared_bytes(chunk) for chunk in array.chunks)
    if not pyarrow.types.is_dictionary(array.type):
        return int(array.nbytes)
    total = int(array.indices.nbytes)
    for index in array.indices:
        if index.is_valid:
            total += int(array.dictionary.slice(index.as_py(), 1).nbytes)
    return total


def _check_sample(name: str, rows: int, sampling: bool) -> None:
    if sampling and rows > MAX_SAMPLE_ROWS:
        raise ConfigError(f"{name}: declares {rows:,} rows; a random sample (--seed) reads "
                          f"every row, at most {MAX_SAMPLE_ROWS:,}; drop --seed to take the "
                          "first --limit rows")


def _open_hf(source: str, sampling: bool) -> Source:
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
    local = name.startswith(("/", "./", "../", "~"))
    name = str(Path(name).expanduser()) if name.startswith("~") else name
    label = f"hf:{name}:{config}:{split}"
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"{source}: reading Hugging Face datasets needs the datasets "
                          f"package; {INSTALL_EVAL}") from None
    if local:
        return _open_hf_folder(source, name, config, split, label, sampling)
    try:
        # On disk as Arrow, memory-mapped: a row is read when it is asked for.
        dataset = datasets.load_dataset(name, config or None, split=split)
    except Exception as exc:  # the Hub, the network, the files: any of them, said in one line
        raise _not_loaded(source, name, config, split, exc) from None
    _check_sample(label, dataset.num_rows, sampling)
    rows = ((f"{label}#{index}", _hf_row(f"{label}#{index}", dataset, index))
            for index in range(dataset.num_rows))
    return Source(label, rows, dataset.num_rows)


def _not_loaded(source: str, name: str, config: str, split: str,
                exc: BaseException) -> ConfigError:
    return ConfigError(f"{source}: Hugging Face dataset {name!r} (config {config or 'default'}, "
                       f"split {split}) could not be loaded: {one_line(exc)}")


def _open_hf_folder(source: str, name: str, config: str, split: str, label: str,
                    sampling: bool) -> Source:
    """A local folder's data files for ``split``, as ``datasets`` resolves them (file and
    folder names such as ``data/test-00000-of-00001.parquet``, a README's configs), read by
    this module's own readers, one file after another: nothing is converted or written."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(name, config or None)
        files = builder.config.data_files
    except Exception as exc:  # a missing folder, an unknown config: said in one line
        raise _not_loaded(source, name, config, split, exc) from None
    if not files or split not in files:
        found = ", ".join(files or []) or "none"
        raise ConfigError(f"{source}: the folder has no data files for split {split!r} "
                          f"(splits: {found}); name one as hf:{name}:{config}:SPLIT")
    paths = [str(path) for path in files[split]]
    root = Path(name).resolve()
    for path in paths:
        suffix = Path(path).suffix.lower()
        if suffix not in EXTENSIONS or "://" in path:
            raise ConfigError(f"{source}: {path}: eval reads a folder's {', '.join(EXTENSIONS)} "
                              "files; convert it to one of them")
        # A README's configs may name files by any pattern ("../../*"), and a file may be a
        # link: what a cloned folder makes eval send to the models stays inside it.
        if not Path(path).resolve().is_relative_to(root):
            raise ConfigError(f"{source}: {path} is outside the folder (its README's "
                              "data_files, or a link); eval reads only the folder's own files")

    def rows() -> Iterator[Lazy]:
        index = 0
        for path in paths:
            for _, parse in open_source(path, sampling=sampling).rows:
                yield f"{label}#{index}", parse
                index += 1

    return Source(label, rows())


def _hf_row(where: str, dataset: Any, index: int) -> Callable[[], object]:
    def parse() -> object:
        _check_row_bytes(where, dataset.data.slice(index, 1).columns)
        return dataset[index]
    return parse


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text[:300]}"
