"""Standard normal points of whatever shape the model asks for: the stand-in when no data file is given."""

from __future__ import annotations

import torch

from .base import DATA_SOURCES, Batch, DataOptions, DataSource


class Synthetic(DataSource):
    name = "synthetic"
    description = "N(0, I) points of the model's dimension, drawn with the model's seed (no file needed)"
    needs_path = False
    columns = None
    options_type = DataOptions

    def load(self, path, options, rows, columns, generator, start=0) -> Batch:
        points = torch.randn(rows, columns, generator=generator)
        return Batch(points, f"synthetic: {rows} samples of N(0, I) in {columns} dimensions")


DATA_SOURCES.register(Synthetic())
