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
* Parquet is read by only the columns the field mapping names, every text leaf (a list's
  elements, a struct's fields too) kept dictionary-encoded, so a row costs its indices, not
  its decoded values; by batches of :data:`BATCH_ROWS` rows when every column read costs a
  few bytes a row (text, numbers), else one row at a time (a list<string> column of 16
  copies of a 1 MiB value, 64 rows, was decoded whole: 2.1 GB). A column chunk that declares
  more than :data:`MAX_CHUNK_BYTES` uncompressed (a decompression bomb) or
  :data:`MAX_CHUNK_VALUES` values is refused up front, and so is a table of more than
  :data:`MAX_COLUMNS` columns; a row is decoded only after the bytes it declares (a
  dictionary value counted by its length, nested values down to their leaves) are found to
  be at most :data:`MAX_ROW_BYTES`: an 837-byte file can declare rows of one megabyte each.
* ``hf:`` with a local folder (written as a path) reads the folder's data files with these
  same readers: ``datasets.load_dataset`` would first convert the whole folder into its
  Arrow cache (a 25 KB file became 205 MB there before row 1), and even
  ``load_dataset_builder`` resolves a README's ``data_files`` patterns (a URL fetched, ``/**``
  walking the filesystem) before they can be checked. So the split's files are found here:
  the README's ``configs`` (read bounded, as safe YAML; a pattern that could reach outside
  the folder is refused by its shape), or ``datasets``' own split names, matched against one
  walk of the folder. Only a dataset from the Hub goes through ``load_dataset`` (and its
  cache); its rows get the same check of their size before they are decoded.
* A random sample (``--seed`` with ``--limit``) must see every row: it is refused for a file
  over :data:`MAX_SAMPLE_FILE_BYTES` or a table declaring over :data:`MAX_SAMPLE_ROWS` rows.

pyarrow and datasets (the ``eval`` extra) are imported only when a Parquet file or a Hugging
Face dataset is read: importing them takes most of a second, and the CLI should start fast.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Callable, Iterable, Iterator, Sequence
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
BATCH_ROWS = 64  # Parquet rows decoded at a time, when every column read costs a few bytes a row
MAX_README_BYTES = 2**20  # a local hf: folder's README (its YAML header names the data files)
MAX_FOLDER_ENTRIES = 100_000  # files and folders walked in a local hf: folder
MAX_CHUNK_VALUES = MAX_CHUNK_BYTES // 16  # a chunk's values (each at least an index and offset)

Lazy = tuple[str, Callable[[], object]]  # where the row is (file:line, file#index), its parser


@dataclass
class Source:
    """A dataset opened for reading: its name in messages, its rows in order, and how many
    rows it declares when it knows (Parquet, Hugging Face) before reading them."""

    name: str
    rows: Iterator[Lazy]
    declared: int | None = None


def open_source(source: str, *, sampling: bool, fields: Sequence[str] = ()) -> Source:
    """``source`` (a file, ``@sample`` or ``hf:NAME[:CONFIG[:SPLIT]]``) ready to stream;
    ``sampling``: every row will be read, so the caps on a whole read apply; ``fields``: the
    (dotted) field paths the rows will be mapped by, so that a table reads only their
    columns (none: all of them)."""
    if source.startswith("hf:"):
        return _open_hf(source, sampling, fields)
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
        return _open_parquet(path, sampling, fields)
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


def _open_parquet(path: Path, sampling: bool, fields: Sequence[str]) -> Source:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"{path.name}: reading Parquet needs pyarrow; {INSTALL_EVAL}") from None
    try:
        metadata = pyarrow.parquet.read_metadata(path)
        schema = metadata.schema
        columns = _parquet_columns(schema.to_arrow_schema().names, fields)
        # The leaves (a list's elements, a struct's fields included) of the columns read.
        leaves = [c for c in range(metadata.num_columns)
                  if schema.column(c).path.split(".")[0] in columns]
        # Every text leaf, nested ones too, is kept dictionary-encoded: a row costs its
        # indices, not copies of a value its file stores once.
        text = [schema.column(c).path for c in leaves
                if schema.column(c).physical_type == "BYTE_ARRAY"]
        table = pyarrow.parquet.ParquetFile(path, read_dictionary=text)
        chunks = [metadata.row_group(g).column(c)
                  for g in range(metadata.num_row_groups) for c in leaves]
        largest = max((chunk.total_uncompressed_size for chunk in chunks), default=0)
        values = max((chunk.num_values for chunk in chunks), default=0)
        arrow = table.schema_arrow
    except (pyarrow.ArrowException, OSError) as exc:
        raise ConfigError(f"{path.name}: not a readable Parquet file ({one_line(exc)})") \
            from None
    if len(leaves) > MAX_COLUMNS:
        raise ConfigError(f"{path.name}: the table has {len(leaves):,} columns, more "
                          f"than {MAX_COLUMNS:,}; keep the columns an item needs")
    if largest > MAX_CHUNK_BYTES:
        raise ConfigError(f"{path.name}: a column chunk declares {largest:,} bytes "
                          f"uncompressed, more than {MAX_CHUNK_BYTES:,}; write the table with "
                          "smaller row groups")
    # Decoding even one row may take a chunk's every value (one row can hold them all):
    # each costs its index and offset, whatever its bytes.
    if values > MAX_CHUNK_VALUES:
        raise ConfigError(f"{path.name}: a column chunk declares {values:,} values, more "
                          f"than {MAX_CHUNK_VALUES:,}; write the table with smaller row groups")
    _check_sample(path.name, metadata.num_rows, sampling)
    # A batch of rows is decoded in Arrow before any row's check: only columns whose row
    # costs a fixed few bytes (numbers; text kept as dictionary indices) are read 64 rows at
    # a time; a list, a struct or anything else is read one row at a time.
    cheap = all(_fixed_cost(arrow.field(name).type) for name in columns)
    return Source(path.name, _parquet_rows(path.name, table, columns,
                                           BATCH_ROWS if cheap else 1), metadata.num_rows)


def _parquet_columns(names: list[str], fields: Sequence[str]) -> list[str]:
    """The table's columns that ``fields`` reach (``answer.text`` reaches a column
    ``answer.text``, else ``answer``); all of them when a field reaches none, so the row's
    error lists every field it has."""
    wanted = [[name for name in names if name in (path, path.split(".")[0])]
              for path in fields]
    if not fields or not all(wanted):
        return names
    return [name for name in names if any(name in found for found in wanted)]


def _fixed_cost(kind: Any) -> bool:
    """Whether a column of this Arrow type costs a few bytes a row once decoded as read."""
    import pyarrow

    types = pyarrow.types
    if types.is_dictionary(kind) or types.is_string(kind) or types.is_binary(kind):
        return True  # read as dictionary indices (read_dictionary)
    return bool(types.is_boolean(kind) or types.is_integer(kind) or types.is_floating(kind)
                or types.is_decimal(kind) or types.is_temporal(kind) or types.is_null(kind))


def _parquet_rows(name: str, table: Any, columns: list[str], batch: int) -> Iterator[Lazy]:
    import pyarrow

    index = 0
    try:
        for rows in table.iter_batches(batch_size=batch, columns=columns):
            for offset in range(rows.num_rows):
                yield f"{name}#{index}", _batch_row(f"{name}#{index}", rows, offset)
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
    a million rows is the cheap way to declare a terabyte). A list's or a struct's values
    are counted the same way, down to their leaves."""
    import pyarrow

    types = pyarrow.types
    if isinstance(array, pyarrow.ChunkedArray):
        return sum(_declared_bytes(chunk) for chunk in array.chunks)
    kind = array.type
    if types.is_dictionary(kind):
        total = int(array.indices.nbytes)
        if _is_text(kind.value_type):
            import pyarrow.compute

            lengths = pyarrow.compute.binary_length(array.dictionary)
            used = pyarrow.compute.sum(pyarrow.compute.take(lengths, array.indices)).as_py()
            return total + int(used or 0) + 4 * len(array)  # and an offset each
        for index in array.indices:
            if index.is_valid:
                total += _declared_bytes(array.dictionary.slice(index.as_py(), 1))
        return total
    if types.is_map(kind):  # .keys and .items are every map's: take the slice's own
        start, end = array.offsets[0].as_py(), array.offsets[-1].as_py()
        return 8 * (len(array) + 1) + sum(_declared_bytes(part.slice(start, end - start))
                                          for part in (array.keys, array.items))
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
        return 8 * (len(array) + 1) + _declared_bytes(array.flatten())
    if types.is_struct(kind):
        return len(array) + sum(_declared_bytes(child) for child in array.flatten())
    return int(array.nbytes)


def _is_text(kind: Any) -> bool:
    import pyarrow

    types = pyarrow.types
    return bool(types.is_string(kind) or types.is_large_string(kind) or types.is_binary(kind)
                or types.is_large_binary(kind))


def _check_sample(name: str, rows: int, sampling: bool) -> None:
    if sampling and rows > MAX_SAMPLE_ROWS:
        raise ConfigError(f"{name}: declares {rows:,} rows; a random sample (--seed) reads "
                          f"every row, at most {MAX_SAMPLE_ROWS:,}; drop --seed to take the "
                          "first --limit rows")


def _open_hf(source: str, sampling: bool, fields: Sequence[str]) -> Source:
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
    if local:  # read by this module alone: datasets would resolve a README's patterns
        return _open_hf_folder(source, name, config, split, label, sampling, fields)
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
                    sampling: bool, fields: Sequence[str]) -> Source:
    """A local folder's data files for ``split`` (file and folder names such as
    ``data/test-00000-of-00001.parquet``, as ``datasets`` names splits, or its README's
    ``configs``), read by this module's own readers, one file after another: nothing is
    converted or written.

    The folder may be a clone: its README's ``data_files`` patterns are the attacker's.
    ``datasets.load_dataset_builder`` resolves them before anything can look at the files
    they reach: a URL is listed over HTTP (a beacon, a GET into the local network), and
    ``/**/*.csv`` walks the whole filesystem (27.8 s, 671 MB). So the README is read here,
    a pattern that could reach outside the folder (absolute, ``..``, ``~``, a scheme or a
    drive) is refused by its shape, and the rest are matched against one walk of the
    folder itself (links not followed, at most :data:`MAX_FOLDER_ENTRIES` entries)."""
    import datasets.data_files

    root = Path(name).resolve()
    if not root.is_dir():
        raise ConfigError(f"{source}: {name} is not a folder; write hf:./FOLDER for a local "
                          "one, or hf:OWNER/NAME for the Hub's")
    splits, data_dir = _readme_splits(source, root, config)
    base = root / data_dir  # data_dir's shape was checked: inside the folder, or a link
    if not base.resolve().is_relative_to(root) or not base.is_dir():
        raise ConfigError(f"{source}: the README's data_dir {data_dir} is not a folder inside "
                          "the folder")
    listing = _folder_files(source, base)
    if splits is None:
        splits = _default_splits(listing, datasets.data_files)
        listing = [f for f in listing if Path(f).suffix.lower() in EXTENSIONS]
    if split not in splits:
        found = ", ".join(splits) or "none"
        raise ConfigError(f"{source}: the folder has no data files for split {split!r} "
                          f"(splits: {found}); name one as hf:{name}:{config}:SPLIT")
    ignored = set(datasets.data_files.FILES_TO_IGNORE)
    paths: list[str] = []
    for pattern in splits[split]:
        matched = sorted(f for f in listing if _glob(pattern).fullmatch(f)
                         and f.rsplit("/", 1)[-1] not in ignored)
        paths += [str(base / f) for f in matched if str(base / f) not in paths]
    if not paths:
        raise ConfigError(f"{source}: the folder's patterns for split {split!r} match no "
                          "files")
    for path in paths:
        if Path(path).suffix.lower() not in EXTENSIONS:
            raise ConfigError(f"{source}: {path}: eval reads a folder's {', '.join(EXTENSIONS)} "
                              "files; convert it to one of them")
        # A file may be a link: what a cloned folder makes eval send to the models stays
        # inside it.
        if not Path(path).resolve().is_relative_to(root):
            raise ConfigError(f"{source}: {path} is outside the folder (a link); eval reads "
                              "only the folder's own files")

    def rows() -> Iterator[Lazy]:
        index = 0
        for path in paths:
            for _, parse in open_source(path, sampling=sampling, fields=fields).rows:
                yield f"{label}#{index}", parse
                index += 1

    return Source(label, rows())


def _readme_splits(source: str, root: Path, config: str
                   ) -> tuple[dict[str, list[str]] | None, str]:
    """The split -> patterns of the folder's README's ``configs`` for ``config`` (empty:
    the default one), and its ``data_dir`` (the patterns are relative to it), each checked
    to stay inside the folder; None for the splits when the config names no data_files
    (they are found by file names, as without a README), "." for no data_dir."""
    readme = root / "README.md"
    header = _readme_header(source, readme)
    configs = header.get("configs") if isinstance(header, dict) else None
    if configs is None:
        return _no_configs(source, config)
    shape = (f"{source}: {readme}: configs must be a list of mappings with config_name and "
             "data_files")
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ConfigError(shape)
    names = [str(c.get("config_name", "default")) for c in configs]
    if config:
        chosen = [c for c, n in zip(configs, names, strict=True) if n == config]
    else:
        chosen = ([c for c in configs if c.get("default") is True]
                  or [c for c, n in zip(configs, names, strict=True) if n == "default"]
                  or (configs if len(configs) == 1 else []))
    if not chosen:
        raise ConfigError(f"{source}: the folder's README has no config {config or 'default'!r}"
                          f" (configs: {', '.join(names) or 'none'}); name one as "
                          "hf:FOLDER:CONFIG:SPLIT")
    data_dir = chosen[0].get("data_dir", ".")
    if not isinstance(data_dir, str):
        raise ConfigError(shape)
    _check_pattern(source, readme, data_dir)
    files = chosen[0].get("data_files")
    if files is None and "data_dir" in chosen[0]:
        return None, data_dir
    if isinstance(files, str | list) and not (isinstance(files, list) and files
                                              and isinstance(files[0], dict)):
        files = {"train": files}
    elif isinstance(files, list):
        files = {str(entry.get("split", "train")): entry.get("path") for entry in files
                 if isinstance(entry, dict)}
    if not isinstance(files, dict):
        raise ConfigError(shape)
    splits: dict[str, list[str]] = {}
    for name, patterns in files.items():
        patterns = [patterns] if isinstance(patterns, str) else patterns
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ConfigError(f"{source}: {readme}: data_files of split {name!r} must be a "
                              "path pattern or a list of them")
        for pattern in patterns:
            _check_pattern(source, readme, pattern)
        splits[str(name)] = patterns
    return splits, data_dir


def _readme_header(source: str, readme: Path) -> object:
    """The README's YAML header (between its first two ``---`` lines), None without one;
    read bounded (:data:`MAX_README_BYTES`, no link, no FIFO) and parsed as safe YAML."""
    from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely
    from massgen_mcp.team.safe_yaml import parse_yaml

    try:
        text = read_bytes_safely(readme, MAX_README_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.reason if isinstance(exc, UnsafeFileError) else type(exc).__name__
        raise ConfigError(f"{source}: the folder's README.md cannot be read ({why}); it must "
                          f"be a UTF-8 file of at most {MAX_README_BYTES // 2**20} MiB, not a "
                          "link") from None
    lines = [line.strip() for line in text.lstrip("\ufeff").splitlines()]
    if not lines or lines[0] != "---" or "---" not in lines[1:]:
        return None
    return parse_yaml("\n".join(text.lstrip("\ufeff").splitlines()[1:lines.index("---", 1)]),
                      str(readme))


def _no_configs(source: str, config: str) -> tuple[None, str]:
    if config:
        raise ConfigError(f"{source}: the folder's README names no configs, so there is no "
                          f"config {config!r}; leave it out, as hf:FOLDER::SPLIT")
    return None, "."


def _check_pattern(source: str, readme: Path, pattern: str) -> None:
    """Refuse, by its shape alone (nothing is listed yet), a pattern that could reach
    anything but the folder's own files."""
    parts = pattern.replace("\\", "/").split("/")
    if (not pattern or "://" in pattern or pattern.startswith(("/", "\\", "~"))
            or ".." in parts or (len(pattern) > 1 and pattern[1] == ":")):
        raise ConfigError(f"{source}: {readme}: data_files {pattern} is outside the folder "
                          "or could reach outside it (a URL, an absolute path, ~ or ..); eval "
                          "reads only the folder's own files, named relative to it")


def _folder_files(source: str, root: Path) -> list[str]:
    """The folder's files as relative POSIX paths, walked once without following links
    into other folders; hidden ones (``.git``) and ``__special__`` ones left out, as
    ``datasets`` leaves them out."""
    import os

    found: list[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        seen += len(dirs) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise ConfigError(f"{source}: the folder holds more than {MAX_FOLDER_ENTRIES:,} "
                              "files and folders; point eval at the data file itself")
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else relative + "/"
        found += [prefix + f for f in files if not f.startswith((".", "__"))]
    return found


def _default_splits(listing: list[str], known: Any) -> dict[str, list[str]]:
    """The splits ``datasets`` infers from file and folder names (its own patterns, in its
    order: ``data/test-00000-of-00001.parquet``, then ``test.csv`` or ``test/``, then every
    file as ``train``), over the folder's eval-readable files."""
    import re

    files = [f for f in listing if Path(f).suffix.lower() in EXTENSIONS]
    for sharded in known.ALL_SPLIT_PATTERNS:
        template = re.compile(_glob(sharded.replace("{split}", "SPLITNAME")).pattern
                              .replace("SPLITNAME", "(?P<split>[^/]+?)"))
        splits: dict[str, list[str]] = {}
        for f in files:
            if match := template.fullmatch(f):
                splits.setdefault(match["split"], [sharded.format(split=match["split"])])
        if splits:
            return splits
    for patterns in known.ALL_DEFAULT_PATTERNS:
        found = {str(split): list(globs) for split, globs in patterns.items()
                 if any(_glob(g).fullmatch(f) for g in globs for f in files)}
        if found:
            return found
    return {}


def _glob(pattern: str) -> Any:
    """``pattern`` as ``datasets`` (fsspec) matches it against a relative POSIX path:
    ``*`` and ``?`` within a name, ``**`` across folders (``**/`` also none), ``[...]``."""
    import re

    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (close := pattern.find("]", i + 2)) > 0:
            inner = pattern[i + 1:close]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner)
                       .replace("\\", "\\\\") + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def _hf_row(where: str, dataset: Any, index: int) -> Callable[[], object]:
    def parse() -> object:
        _check_row_bytes(where, dataset.data.slice(index, 1).columns)
        return dataset[index]
    return parse


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text[:300]}"
