"""`--data NAME[:PATH][?key=value&...]`: which source, which file, which of its options.

Examples: `synthetic`, `2spirals`, `bsds300:data/BSDS300.hdf5`, `bsds300:data/BSDS300.hdf5?split=test`.
How many rows are read is the model's `batch` option, so the batch size has one home.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import ValidationError

from ...core.errors import InputError
from ...core.validation import phrase
from .base import DATA_SOURCES, Batch, DataOptions, DataSource

SYNTAX = "NAME[:PATH][?key=value&...]"


@dataclass(frozen=True)
class DataRequest:
    text: str
    source: DataSource
    path: Path | None
    options: DataOptions

    def load(
        self,
        rows: int,
        columns: int,
        generator: torch.Generator,
        model: str,
        dimension_option: str | None = None,
        start: int = 0,
    ) -> Batch:
        """The batch for `model`, which takes `rows` points of `columns` coordinates (set by `-o dimension_option`)."""
        fixed = self.source.columns
        if fixed is not None and fixed != columns:
            hint = f"; set -o {dimension_option}={fixed}" if dimension_option else ""
            raise InputError(
                f"data '{self.text}' has {fixed} columns, but model {model} takes points of {columns}{hint}"
            )
        batch = self.source.load(self.path, self.options, rows, columns, generator, start)
        if tuple(batch.points.shape) != (rows, columns):
            raise InputError(
                f"data '{self.text}' gave points of shape {tuple(batch.points.shape)}; expected ({rows}, {columns})"
            )
        return batch


def parse_data(text: str) -> DataRequest:
    """Check the name, the path and the options of a `--data` value; a missing file is found here."""
    base, _, query = text.partition("?")
    name, has_path, path_text = base.partition(":")
    source = DATA_SOURCES.get(name.strip())
    if source.needs_path and not path_text:
        raise InputError(f"data '{text}': {source.name} needs a file, as --data {source.name}:PATH")
    if not source.needs_path and has_path:
        raise InputError(f"data '{text}': {source.name} is generated in code and takes no file path")
    path = Path(path_text).expanduser() if path_text else None
    if path is not None and not path.is_file():
        raise InputError(
            f"data file '{path}' does not exist (nothing is downloaded; give the path of the file you have)"
        )
    return DataRequest(text, source, path, _options(source, text, query))


def _options(source: DataSource, text: str, query: str) -> DataOptions:
    values: dict[str, str] = {}
    for pair in filter(None, query.split("&")):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"data '{text}': '{pair}' is not key=value; the form is {SYNTAX}")
        values[key] = value
    try:
        return source.options_type(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        problem = "is unknown" if err["type"] == "extra_forbidden" else phrase(err)
        allowed = ", ".join(source.options_type.model_fields) or "none"
        raise InputError(
            f"data '{text}': option '{err['loc'][0]}' {problem}; options of {source.name}: {allowed}"
        ) from None
