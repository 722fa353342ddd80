"""Tables written by earlier versions, read as this one writes them: the columns added since, filled with what those
runs did; and a folder from a later version, whose tables this one cannot know, refused in one line.

A column whose value those runs did not measure stays missing (null), and its reader says so: the float64
references' norms of tables version 2 (judging/yardstick_check.py's `unrecorded_norms`); the native solver's
`backward_mode` of version 3, where the report says nothing of the backward's mode (judging/backward_modes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..axes.grid import AXIS_DEFAULTS
from ..core.errors import InputError
from ..core.json_files import read_json_object
from ..measuring.outcomes import Status
from .result_schemas import MANIFEST, TABLES_VERSION, TABLES_VERSION_KEY

if TYPE_CHECKING:
    import pandas as pd


def with_span(table: pd.DataFrame) -> pd.DataFrame:
    """Rows written before the span was recorded: every model then was one solve on [0, 1]."""
    if "dtype" not in table.columns or all(c in table.columns and table[c].notna().all() for c in ("t0", "t1")):
        return table
    table = table.copy()
    for column, value in (("t0", 0.0), ("t1", 1.0)):
        table[column] = table[column].fillna(value) if column in table.columns else value
    return table


# Before rows recorded their tableau each library ran its own rule under a method name; only rk4 differed.
_RK4_BEFORE_RECORDED = {"torchdiffeq": "rk4_38", "torchdiffeq-adjoint": "rk4_38"}


def with_tableau(table: pd.DataFrame) -> pd.DataFrame:
    """Rows written before the `tableau` column (or shards from before it): the rule their library ran, as it ran it
    then (torchdiffeq's rk4 the 3/8 rule, every other library's the classical one). Skipped rows keep none."""
    if "method" not in table.columns or "library" not in table.columns:
        return table
    if "tableau" in table.columns and not table["tableau"].isna().any():
        return table
    import pandas as pd

    table = table.copy()
    recorded = table["tableau"] if "tableau" in table.columns else pd.Series(None, index=table.index, dtype=object)
    ran = table["status"] != Status.SKIPPED if "status" in table.columns else pd.Series(True, index=table.index)
    then = [
        (_RK4_BEFORE_RECORDED.get(library, "rk4_classical") if method == "rk4" else method) if r else None
        for library, method, r in zip(table["library"], table["method"], ran)
    ]
    table["tableau"] = recorded.where(recorded.notna(), pd.Series(then, index=table.index, dtype=object))
    return table


def with_axis_defaults(table: pd.DataFrame, seed: int | None = None) -> pd.DataFrame:
    """Tables written before the arithmetic axis: every run was hardware arithmetic rounding to nearest; before the
    checkpoint axis (or in shards from before it), every run had the sweep's single set of weights; before the seed
    axis, every run had the sweep's single seed: `seed`, which its manifest records (`swept_seed`), else 0."""
    missing = [c for c in AXIS_DEFAULTS if c not in table.columns]
    if "dtype" not in table.columns:
        return table
    unset = [c for c in AXIS_DEFAULTS if c in table.columns and table[c].isna().any()]
    if not missing and not unset:
        return table
    defaults = {**AXIS_DEFAULTS, **({"seed": seed} if seed is not None else {})}
    table = table.copy()
    for column in unset:
        filled = table[column].fillna(defaults[column])
        table[column] = filled.astype("int64") if column == "seed" else filled
    for offset, column in enumerate(missing, start=1):
        table.insert(
            list(table.columns).index("mode") + offset if "mode" in table.columns else len(table.columns),
            column,
            defaults[column],
        )
    return table


def swept_seed(folder: Path) -> int | None:
    """The seed a sweep folder's manifest records it was built with (None: no readable manifest, or no seed in it):
    the seed of its rows from before the seed axis."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        seed = read_json_object(manifest_path, "a manifest", "").get("seed")
    except InputError:  # said by whichever reader needs the manifest itself
        return None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def refuse_newer_tables(manifest_path: Path) -> None:
    """An InputError where the folder's manifest records a tables version above this one's (an unreadable manifest or
    none at all: an older folder, read as such)."""
    if not manifest_path.is_file():
        return
    try:
        manifest = read_json_object(manifest_path, "a manifest", "")
    except InputError:  # said by whichever reader needs the manifest itself
        return
    recorded = manifest.get(TABLES_VERSION_KEY)
    if isinstance(recorded, int) and recorded > TABLES_VERSION:
        raise InputError(
            f"'{manifest_path.parent}' was written by a newer roundoff-analyzer (tables version {recorded}; this one "
            f"reads up to {TABLES_VERSION}): upgrade roundoff-analyzer to read it"
        )
