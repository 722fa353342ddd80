"""Every Parquet table this project reads goes through one declared schema: a table from another version, edited by
hand or damaged is one InputError line naming the file, the column, what was found and what was expected.

A schema is the pyarrow schema the table is written with, plus which of its columns every version wrote (required)
and which may hold no nulls. Columns a later version added may be missing (an older folder still reads); a column of
another kind (text where numbers were) is refused, a narrower one of the same kind (int32, float32) is widened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.errors import InputError, one_line

if TYPE_CHECKING:  # pyarrow's to_pandas imports pandas where a table is read: a worker process never does
    import pandas as pd


@dataclass(frozen=True)
class TableSchema:
    what: str  # the table in words: "a sweep's results table"
    schema: pa.Schema
    required: tuple[str, ...]  # written by every version: a table without one is not this kind of table
    not_null: tuple[str, ...] = ()  # keys: a row without one means nothing

    def __post_init__(self) -> None:
        unknown = [c for c in (*self.required, *self.not_null) if c not in self.schema.names]
        assert not unknown, f"columns not in the schema: {unknown}"


def _kind(arrow_type: pa.DataType) -> str:
    if pa.types.is_dictionary(arrow_type):
        return _kind(arrow_type.value_type)
    for kind, test in (
        ("null", pa.types.is_null),
        ("boolean", pa.types.is_boolean),
        ("integer", pa.types.is_integer),
        ("floating", pa.types.is_floating),
        ("text", pa.types.is_string),
        ("text", pa.types.is_large_string),
    ):
        if test(arrow_type):
            return kind
    return str(arrow_type)


# Which stored kinds a column of each expected kind accepts (a cast that loses nothing is still checked value by value).
_ACCEPTED = {
    "integer": {"integer", "floating"},
    "floating": {"floating", "integer"},
    "text": {"text"},
    "boolean": {"boolean"},
}
_IN_WORDS = {"integer": "numbers", "floating": "numbers", "text": "text", "boolean": "true/false"}


def conform(table: pa.Table, spec: TableSchema, path: Path | str) -> pa.Table:
    """`table` with every column of the schema it holds cast to the schema's type; one line where it cannot be."""
    missing = [name for name in spec.required if name not in table.column_names]
    if missing:
        expected = ", ".join(f"{name} ({spec.schema.field(name).type})" for name in missing)
        raise InputError(f"'{path}' is not {spec.what}: column(s) {expected} missing")
    for field in spec.schema:
        if field.name not in table.column_names:
            continue
        index = table.column_names.index(field.name)
        column = table.column(index)
        found = _kind(column.type)
        expected = _kind(field.type)
        if found != "null" and found not in _ACCEPTED.get(expected, {expected}):
            raise InputError(
                f"'{path}' is not {spec.what}: column {field.name} holds {column.type} values, not "
                f"{_IN_WORDS.get(expected, expected)} (expected {field.type})"
            )
        if column.type != field.type:
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InputError(
                    f"'{path}' is not {spec.what}: column {field.name} holds {column.type} values that are not "
                    f"{field.type} ({one_line(exc)})"
                ) from None
            table = table.set_column(index, field.name, column)
        if field.name in spec.not_null and column.null_count:
            raise InputError(
                f"'{path}' is not {spec.what}: column {field.name} is empty in {column.null_count} of "
                f"{len(column)} rows, expected {field.type} in every row"
            )
    return table


def read_table(path: Path | str, spec: TableSchema) -> pd.DataFrame:
    """The table at `path`, checked against `spec`, as pandas reads it; anything unreadable is one InputError line."""
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow raises on a damaged or foreign file, it is bad input
        raise InputError(f"cannot read '{path}' as {spec.what} in Parquet: {one_line(exc)}") from None
    table = conform(table, spec, path)
    try:
        return table.to_pandas()
    except Exception as exc:  # noqa: BLE001 - pandas metadata written by hand can name columns or types not there
        raise InputError(f"cannot read '{path}' as {spec.what}: {one_line(exc)}") from None
