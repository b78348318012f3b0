"""Rows of an Arrow table (a Parquet file, a Hugging Face dataset), each checked for the bytes
it declares before it is decoded into Python objects.

A table's file is small for what it can declare: an 837-byte Parquet file can declare rows of
one megabyte each, a 1 MB one 60 million of them, and a dictionary-encoded value stored once
can be referenced by every row. So a Parquet file is read by only the columns the field
mapping names, every text leaf (a list's elements, a struct's fields too) kept
dictionary-encoded, so a row costs its indices, not its decoded values; by batches of
:data:`BATCH_ROWS` rows when every column read costs a few bytes a row (text, numbers), else
one row at a time (a list<string> column of 16 copies of a 1 MiB value, 64 rows, was decoded
whole: 2.1 GB). A column chunk that declares more than :data:`MAX_CHUNK_BYTES` uncompressed (a
decompression bomb) or :data:`MAX_CHUNK_VALUES` values is refused up front, and so is a table
of more than :data:`~.source_rows.MAX_COLUMNS` columns; a row is decoded only after the bytes
it declares (a dictionary value counted by its length, nested values down to their leaves)
are found to be at most :data:`~.source_rows.MAX_ROW_BYTES`
(:func:`check_row_bytes`, which a Hugging Face dataset's rows go through too).

pyarrow (the ``eval`` extra) is imported only here, and only when a table is read: importing
it takes most of a second, and the CLI should start fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.source_rows import (
    INSTALL_EVAL,
    MAX_COLUMNS,
    MAX_ROW_BYTES,
    Lazy,
    Source,
    check_sample,
    one_line,
)

MAX_CHUNK_BYTES = 2**30  # what one Parquet column chunk may declare, decompressed
BATCH_ROWS = 64  # Parquet rows decoded at a time, when every column read costs a few bytes a row
MAX_CHUNK_VALUES = MAX_CHUNK_BYTES // 16  # a chunk's values (each at least an index and offset)


def open_parquet(path: Path, sampling: bool, fields: Sequence[str]) -> Source:
    """The file at ``path`` ready to stream, by the columns ``fields`` reach, once its
    metadata shows nothing it declares is over the caps."""
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
    check_sample(path.name, metadata.num_rows, sampling)
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
        check_row_bytes(where, row.columns)
        return row.to_pylist()[0]
    return parse


def check_row_bytes(where: str, arrays: Iterable[Any]) -> None:
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
