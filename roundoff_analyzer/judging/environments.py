"""Which environments a results table was measured in (measuring/environment_columns.py), as pure functions over it:
whether a folder mixes them, and what differs between a baseline's and a new sweep's."""

from __future__ import annotations

import pandas as pd

from ..measuring.environment_columns import ENVIRONMENT_COLUMNS

_IN_WORDS = {
    "torch_version": "torch",
    "device_name": "device",
    "compute_capability": "compute capability",
    "float32_matmul": "float32 matmul",
}


def environments(results: pd.DataFrame) -> dict[str, list[str]]:
    """Each environment column's distinct values, in order of first appearance; rows written before the columns
    existed (null) count as unknown and are left out."""
    found = {}
    for column in ENVIRONMENT_COLUMNS:
        if column in results.columns:
            values = [str(v) for v in results[column].dropna().unique()]
            if values:
                found[column] = values
    return found


def mixed_environments(results: pd.DataFrame) -> str | None:
    """One line when the rows were measured in more than one environment (None when they were not)."""
    mixed = {column: values for column, values in environments(results).items() if len(values) > 1}
    if not mixed:
        return None
    counts = {column: results[column].astype(str).value_counts() for column in mixed}
    described = "; ".join(
        f"{_IN_WORDS[column]} {' / '.join(f'{v} ({counts[column][v]} rows)' for v in values)}"
        for column, values in mixed.items()
    )
    return (
        f"these rows were measured in more than one environment ({described}): bits may differ between them, "
        f"so compare rows of one environment (the columns {', '.join(ENVIRONMENT_COLUMNS)} say which)"
    )


def environment_differences(baseline: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """What differs between the baseline's environment and the new rows' (empty where either is unknown)."""
    before, after = environments(baseline), environments(new)
    return [
        f"{_IN_WORDS[column]}: {' / '.join(before[column])} in the baseline, {' / '.join(after[column])} now"
        for column in ENVIRONMENT_COLUMNS
        if column in before and column in after and before[column] != after[column]
    ]


def float32_not_ieee(results: pd.DataFrame) -> str | None:
    """One line when float32 rows ran their matrix products in another arithmetic than IEEE float32 (TF32 allowed,
    or on a CPU a lower float32 matmul precision); None when none did, or where the rows do not say (written before
    the column)."""
    if "float32_matmul" not in results.columns or "dtype" not in results.columns:
        return None
    float32 = results[results["dtype"] == "float32"]
    other = float32[float32["float32_matmul"].notna() & (float32["float32_matmul"] != "ieee")]
    if other.empty:
        return None
    ran = " / ".join(str(v) for v in other["float32_matmul"].unique())
    return (
        f"{len(other)} of the {len(float32)} float32 rows ran their matrix products in {ran} (column float32_matmul), "
        "not in IEEE float32: their errors and times, and the answer's ratios against float32, are those of that "
        "arithmetic"
    )
