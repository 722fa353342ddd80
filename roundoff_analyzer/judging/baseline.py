"""A baseline on disk (a sweep folder or a results Parquet file), and accepting new results as the baseline."""

from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import InputError
from ..storage.result_schemas import MANIFEST, RESULTS
from ..storage.results import atomic_write_bytes


def results_file(path: Path) -> Path:
    """The results table of a sweep folder, or the Parquet file itself."""
    return path / RESULTS if path.is_dir() else path


def ensure_writable(baseline: Path) -> None:
    target = results_file(baseline)
    if not os.access(target.parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise InputError(f"baseline '{baseline}' is not writable, so --update-baseline cannot replace it")


def replace_with(baseline: Path, new: Path) -> list[Path]:
    """Write the new results over the baseline's (atomically, file by file); returns what was written.

    A baseline folder also takes the new sweep's manifest, so that it describes the results it holds.
    """
    written = [results_file(baseline)]
    atomic_write_bytes(written[0], results_file(new).read_bytes())
    if baseline.is_dir() and (new / MANIFEST).is_file():
        written.append(baseline / MANIFEST)
        atomic_write_bytes(written[1], (new / MANIFEST).read_bytes())
    return written
