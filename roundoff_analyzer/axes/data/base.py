"""The data axis: where a model's fixed batch of points comes from (synthetic, toy densities, BSDS300)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import torch
from pydantic import BaseModel, ConfigDict

from ...core.registry import Registry


class DataOptions(BaseModel):
    """Base of every source's options (the `?key=value` part of `--data`); unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Batch:
    points: torch.Tensor  # (rows, columns), float32, on the CPU
    label: str  # what the manifest and the report say about where the points came from


class DataSource(Protocol):
    """A source of points. The attributes are read-only properties here so that class attributes, narrower types
    (`columns = 2`) and frozen fields fulfil them."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def needs_path(self) -> bool: ...

    @property
    def columns(self) -> int | None:
        """Fixed by the source (BSDS300: 63), or None when the model decides."""
        ...

    @property
    def options_type(self) -> type[DataOptions]: ...

    def load(
        self,
        path: Path | None,
        options: DataOptions,
        rows: int,
        columns: int,
        generator: torch.Generator,
        start: int = 0,
    ) -> Batch:
        """`rows` points of `columns` coordinates; generated sources draw from `generator`, files read from row
        `start`."""
        ...


DATA_SOURCES: Registry[DataSource] = Registry("data source")


@dataclass(frozen=True)
class ToyDensity:
    """A 2-D density generated in code from the model's seed (FFJORD's toy data)."""

    name: str
    description: str
    sample: Callable[[int, torch.Generator], torch.Tensor]  # (rows, generator) -> (rows, 2)
    needs_path: ClassVar[bool] = False
    columns: ClassVar[int] = 2
    options_type: ClassVar[type[DataOptions]] = DataOptions

    def load(self, path, options, rows, columns, generator, start=0) -> Batch:
        return Batch(self.sample(rows, generator), f"{self.name}: {rows} points of {self.description}")
