"""A finished sweep folder read back for reporting: the results table, the manifest and the side tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..axes.grid import CONFIG_COLUMNS
from ..core.errors import InputError
from ..measuring.yardsticks import with_yardstick_columns
from ..storage.manifest_schema import read_manifest
from ..storage.result_schemas import (
    MANIFEST,
    MODULES,
    MODULES_TABLE,
    PARAM_ERRORS,
    PARAM_ERRORS_TABLE,
    PART_ERRORS,
    PART_ERRORS_TABLE,
    PROFILE,
    PROFILE_TABLE,
    RESULTS,
    TIMING,
    TIMING_TABLE,
)
from ..storage.results import load_results, read_parquet

# What the report cannot do without; the other columns are used where present.
REQUIRED_COLUMNS = (*CONFIG_COLUMNS, "status", "failure_class", "failure_type", "failure_message", "skip_reason")


@dataclass(frozen=True)
class SweepFolder:
    path: Path
    results: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    param_errors: pd.DataFrame | None = None
    profile: pd.DataFrame | None = None
    modules: pd.DataFrame | None = None  # modules.parquet, where the sweep measured each module (--per-module)
    part_errors: pd.DataFrame | None = None  # part_errors.parquet, where a quantity has several parts
    timing: pd.DataFrame | None = None  # timing.parquet, the answer's setups timed again after the sweep


def read_sweep_folder(path: str | Path) -> SweepFolder:
    """Everything the report reads; a folder that is not a sweep is an InputError, raised before anything is written."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"'{path}' is not a folder; give the folder a `roundoff sweep --out` wrote")
    if not (path / RESULTS).is_file():
        raise InputError(f"'{path}' holds no {RESULTS}; give the folder a finished `roundoff sweep --out` wrote")
    results = load_results(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in results.columns]
    if missing:
        raise InputError(f"'{path / RESULTS}' is not a roundoff results table (missing columns: {', '.join(missing)})")
    if results.empty:
        raise InputError(f"'{path / RESULTS}' holds no configurations; there is nothing to report")
    # A folder from before the discretisation error and the gradient noise were measured still reports, without them.
    results = with_yardstick_columns(results)
    return SweepFolder(
        path,
        results,
        _manifest(path),
        _side_table(path / PARAM_ERRORS, PARAM_ERRORS_TABLE),
        _side_table(path / PROFILE, PROFILE_TABLE),
        modules_table(path),
        _side_table(path / PART_ERRORS, PART_ERRORS_TABLE),
        _side_table(path / TIMING, TIMING_TABLE),
    )


def read_timing(folder: Path) -> pd.DataFrame | None:
    """The timing pass's table of a sweep folder, where it has one."""
    return _side_table(folder / TIMING, TIMING_TABLE) if folder.is_dir() else None


def _manifest(folder: Path) -> dict[str, Any]:
    # The results alone still make a report; the overview then says less.
    if not (folder / MANIFEST).is_file():
        return {}
    return read_manifest(folder / MANIFEST, "the report cannot say how the sweep was run")


def modules_table(folder: Path) -> pd.DataFrame | None:
    """`modules.parquet` of a sweep folder (a sweep run with --per-module); None where it has none."""
    return _side_table(folder / MODULES, MODULES_TABLE)


def _side_table(path: Path, spec) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    table = read_parquet(path, spec)
    return table if not table.empty else None
