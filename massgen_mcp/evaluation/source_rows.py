"""What every reader of a dataset hands back and holds to: the lazy row, the :class:`Source`,
and the caps on what one row and one whole read may cost.

A dataset is untrusted input (a cloned repository's, a download), so each reader
(:mod:`.dataset_files` for JSON lines and CSV, :mod:`.arrow_rows` for Parquet and Hugging Face
tables, :mod:`.hf_folder` for a local ``hf:`` folder) yields rows one at a time, each as a
*lazy* row: where it is, and a function that parses it. The readers share these types and
limits, so they live below all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from massgen_mcp.core.errors import ConfigError

SAMPLE = "@sample"
EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
INSTALL_EVAL = "pip install 'massgen-mcp[eval]'"
MAX_LINE_BYTES = 8 * 2**20  # one question, its choices and answer: far more than any benchmark's
MAX_ROW_BYTES = MAX_LINE_BYTES  # ... in any format (a CSV row may span lines)
MAX_COLUMNS = 1_000  # a row's fields (a CSV's header, a table's columns)
MAX_SAMPLE_FILE_BYTES = 2**30  # a sample reads the whole file
MAX_SAMPLE_ROWS = 10_000_000  # ... and every row of a table

Lazy = tuple[str, Callable[[], object]]  # where the row is (file:line, file#index), its parser


@dataclass
class Source:
    """A dataset opened for reading: its name in messages, its rows in order, and how many
    rows it declares when it knows (Parquet, Hugging Face) before reading them."""

    name: str
    rows: Iterator[Lazy]
    declared: int | None = None


def check_sample(name: str, rows: int, sampling: bool) -> None:
    """Refuse a random sample (which reads every row) of a table declaring over
    :data:`MAX_SAMPLE_ROWS` rows."""
    if sampling and rows > MAX_SAMPLE_ROWS:
        raise ConfigError(f"{name}: declares {rows:,} rows; a random sample (--seed) reads "
                          f"every row, at most {MAX_SAMPLE_ROWS:,}; drop --seed to take the "
                          "first --limit rows")


def one_line(exc: BaseException) -> str:
    """An exception in one short line, for a message that names what failed."""
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text[:300]}"
