"""BSDS300 as the HDF5 file of the MAF preprocessing: datasets `train`, `validation`, `test` of 63 columns.

Nothing is downloaded: the user names the file. Only the first `rows` rows of the chosen split are
read, so a run does not load the million training rows it does not use.
"""

from __future__ import annotations

from typing import Literal

import h5py
import numpy as np
import torch

from ...core.errors import InputError, one_line
from .base import DATA_SOURCES, Batch, DataOptions, DataSource

SPLITS = ("train", "validation", "test")
COLUMNS = 63
EXPECTED = f"datasets {', '.join(SPLITS)} of floats of shape (rows, {COLUMNS}) as written by the MAF preprocessing"


class BSDS300Options(DataOptions):
    split: Literal["train", "validation", "test"] = "train"


class BSDS300(DataSource):
    name = "bsds300"
    description = (
        f"BSDS300 image patches from the MAF preprocessing's HDF5 file ({', '.join(SPLITS)}; {COLUMNS} columns)"
    )
    needs_path = True
    columns = COLUMNS
    options_type = BSDS300Options

    def load(self, path, options, rows, columns, generator, start=0) -> Batch:
        try:
            with h5py.File(path, "r") as file:
                _check_layout(file, path)
                split = file[options.split]
                if split.shape[0] < start + rows:
                    raise InputError(
                        f"BSDS300 file '{path}': split '{options.split}' has {split.shape[0]} rows, fewer than the "
                        f"{start + rows} asked for (-o batch{f', batch {start // rows} of them' if start else ''})"
                    )
                points = torch.from_numpy(np.asarray(split[start : start + rows], dtype=np.float32))
        except OSError as exc:
            raise InputError(
                f"'{path}' cannot be read as an HDF5 file ({one_line(exc)}); expected BSDS300 with {EXPECTED}"
            ) from None
        label = f"bsds300: the first {rows} rows of split '{options.split}' of {path.resolve()} ({COLUMNS} columns)"
        return Batch(points, label)


def _check_layout(file: h5py.File, path) -> None:
    for split in SPLITS:
        dataset = file.get(split)
        if not isinstance(dataset, h5py.Dataset):
            found = ", ".join(file.keys()) or "nothing"
            raise InputError(f"BSDS300 file '{path}' has no dataset '{split}' (found: {found}); expected {EXPECTED}")
        if dataset.ndim != 2 or dataset.shape[1] != COLUMNS or dataset.dtype.kind != "f":
            raise InputError(
                f"BSDS300 file '{path}': dataset '{split}' holds {dataset.dtype} of shape {dataset.shape}; expected "
                f"{EXPECTED}"
            )


DATA_SOURCES.register(BSDS300())
