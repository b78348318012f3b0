"""Rows from a dataset, streamed: eval reads only as far as the rows it takes.

A dataset is untrusted input (a cloned repository's, a download): an 8 GiB ``.jsonl`` or a
1 MB Parquet file declaring 60 million rows of a one-megabyte value must not be read whole
before ``--limit`` applies. So each reader yields rows one at a time, each as a *lazy* row
(``where``, and a function that parses it; :mod:`.source_rows`):
:func:`massgen_mcp.evaluation.datasets.load_items` stops at the rows it needs and parses only
the ones it keeps. This module is the one entry, :func:`open_source`, and it sends each kind
of source to its reader:

* a file (or ``@sample``): :mod:`.dataset_files`, JSON lines and CSV line by line, Parquet
  by :mod:`.arrow_rows` (only the columns the fields reach, each row's declared bytes checked
  before it is decoded);
* ``hf:`` with a local folder (written as a path): :mod:`.hf_folder`, the folder's data files
  with these same readers, nothing converted or resolved by ``datasets``;
* ``hf:`` with a dataset from the Hub: ``datasets.load_dataset`` (and its cache), read here;
  its rows get the same check of their size before they are decoded.

A random sample (``--seed`` with ``--limit``) must see every row: it is refused for a file
over :data:`~.source_rows.MAX_SAMPLE_FILE_BYTES` or a table declaring over
:data:`~.source_rows.MAX_SAMPLE_ROWS` rows.

datasets (the ``eval`` extra) is imported only when a Hugging Face dataset is read: importing
it takes most of a second, and the CLI should start fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.arrow_rows import check_row_bytes
from massgen_mcp.evaluation.dataset_files import open_file
from massgen_mcp.evaluation.hf_folder import open_hf_folder
from massgen_mcp.evaluation.source_rows import (
    INSTALL_EVAL,
    SAMPLE,
    Source,
    check_sample,
    one_line,
)

SAMPLE_PATH = Path(__file__).parent.parent / "data" / "eval_sample.jsonl"


def open_source(source: str, *, sampling: bool, fields: Sequence[str] = ()) -> Source:
    """``source`` (a file, ``@sample`` or ``hf:NAME[:CONFIG[:SPLIT]]``) ready to stream;
    ``sampling``: every row will be read, so the caps on a whole read apply; ``fields``: the
    (dotted) field paths the rows will be mapped by, so that a table reads only their
    columns (none: all of them)."""
    if source.startswith("hf:"):
        return _open_hf(source, sampling, fields)
    path = SAMPLE_PATH if source == SAMPLE else Path(source)
    return open_file(source, path, sampling, fields)


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
    if local:  # read by hf_folder alone: datasets would resolve a README's patterns
        return open_hf_folder(source, name, config, split, label, sampling, fields)
    try:
        # On disk as Arrow, memory-mapped: a row is read when it is asked for.
        dataset = datasets.load_dataset(name, config or None, split=split)
    except Exception as exc:  # the Hub, the network, the files: any of them, said in one line
        raise _not_loaded(source, name, config, split, exc) from None
    check_sample(label, dataset.num_rows, sampling)
    rows = ((f"{label}#{index}", _hf_row(f"{label}#{index}", dataset, index))
            for index in range(dataset.num_rows))
    return Source(label, rows, dataset.num_rows)


def _not_loaded(source: str, name: str, config: str, split: str,
                exc: BaseException) -> ConfigError:
    return ConfigError(f"{source}: Hugging Face dataset {name!r} (config {config or 'default'}, "
                       f"split {split}) could not be loaded: {one_line(exc)}")


def _hf_row(where: str, dataset: Any, index: int) -> Callable[[], object]:
    def parse() -> object:
        check_row_bytes(where, dataset.data.slice(index, 1).columns)
        return dataset[index]
    return parse
