"""The check's yardsticks: did the float64 references the errors are measured against stay what they were?

A run's errors are its distance from its float64 reference, so a change that also moved the reference (a solver
library that now rounds every solve, whatever its dtype) moves the errors too, most often down: the check would call
a broken reference an improvement. Each reference's own distance from the fine reference, `disc_*`, tells: between two
sweeps of one setup it does not move (float64 on both sides; between AVX-512 and scalar kernels it moved by at most
6.2e-6 of itself, the fine reference's numbers by 1.4e-5: docs/ci.md), so a `disc_*` that moved by more than
REFERENCE_FACTOR names the reference as what changed, and the errors measured against it are not compared. The fine
reference's own error and its observed order of convergence (`fine_ref_*`, one per sweep) are compared the same way:
where they moved, every `disc_*` did.
"""

from __future__ import annotations

import math

import pandas as pd

from ..measuring.yardsticks import DISC_METRICS, disc_column

# How far a float64 yardstick may move before it counts as changed: 70 times the largest movement between CPUs (a
# reference rounded to bfloat16 moved euler's disc_* by 0.24% at n = 4, where the discretisation error is largest).
REFERENCE_FACTOR = 1.001
DISC_COLUMNS = tuple(disc_column(m) for m in DISC_METRICS)
FINE_COLUMNS = (
    ("fine_ref_final_order", "observed order in the final state"),
    ("fine_ref_grad_y0_order", "observed order in the gradient w.r.t. y0"),
    ("fine_ref_grad_params_order", "observed order in the parameter gradient"),
    ("fine_ref_final_rel_err", "own error in the final state"),
    ("fine_ref_grad_y0_rel_err", "own error in the gradient w.r.t. y0"),
    ("fine_ref_grad_params_rel_err", "own error in the parameter gradient"),
)
YARDSTICK_COLUMNS = (*DISC_COLUMNS, *(column for column, _ in FINE_COLUMNS))


def moved(before: float | None, after: float | None) -> bool:
    """Whether a yardstick measured on both sides moved by more than REFERENCE_FACTOR either way."""
    if before is None or after is None or not (math.isfinite(before) and math.isfinite(after)):
        return False
    low, high = sorted((abs(before), abs(after)))
    return high > REFERENCE_FACTOR * low


def reference_changes(record: dict, number) -> list[tuple[str, float, float]]:
    """The `disc_*` of one configuration (a merged record with `_new` and `_baseline` columns) that moved: (column,
    baseline, new). `number` reads a cell as a float or None."""
    found = []
    for column in DISC_COLUMNS:
        before, after = number(record.get(f"{column}_baseline")), number(record.get(f"{column}_new"))
        if before is not None and after is not None and moved(before, after):
            found.append((column, before, after))
    return found


def fine_reference_changes(new: pd.DataFrame, baseline: pd.DataFrame) -> list[str]:
    """What moved in the fine reference between the two sweeps: 'observed order in the final state 3.98 -> 1.01'."""
    found = []
    for column, words in FINE_COLUMNS:
        before, after = (_one(t, column) for t in (baseline, new))
        if before is not None and after is not None and moved(before, after):
            found.append(f"{words} {before:.3g} -> {after:.3g}")
    return found


def growing_with_n(table: pd.DataFrame, library: str) -> list[str]:
    """Per method of `library` whose references' discretisation error (of the final state) grows with n_timesteps,
    which no convergent method's does: 'rk4: 2.1e-03 at n = 4, 6.6e-02 at n = 16'."""
    column = disc_column("final_rel_err")
    if column not in table:
        return []
    rows = table[(table["library"] == library) & table[column].notna()]
    found = []
    for method, runs in rows.groupby("method", sort=False):
        by_n = runs.groupby("n_timesteps")[column].max().sort_index()
        if len(by_n) > 1 and by_n.iloc[-1] > by_n.iloc[0]:
            steps = ", ".join(f"{value:.2g} at n = {n}" for n, value in by_n.items())
            found.append(f"{method}: {steps}")
    return found


def yardstick_lines(new: pd.DataFrame, baseline: pd.DataFrame, changed: pd.DataFrame) -> list[str]:
    """One line for a fine reference that moved, and one per library whose float64 references moved (`changed`: the
    configurations whose `disc_*` moved, with their library), with where their discretisation error now grows."""
    lines = []
    fine = fine_reference_changes(new, baseline)
    if fine:
        lines.append(
            f"the fine reference changed ({'; '.join(fine)}): every discretisation error is measured against it, "
            "so each configuration's float64 reference is judged against another yardstick"
        )
    for library, rows in changed.groupby("library", sort=False):
        grows = growing_with_n(new, str(library))
        lines.append(
            f"the float64 reference of {library} changed in {len(rows)} configuration{'s' if len(rows) != 1 else ''}"
            + (f"; its discretisation error now grows with n_timesteps ({'; '.join(grows)})" if grows else "")
            + ": the errors measured against it are not compared with the baseline's; "
            "a change that moves the reference is a regression until the baseline is swept again"
        )
    return lines


def _one(table: pd.DataFrame, column: str) -> float | None:
    """A sweep-wide column's value (the largest, should rows differ); None where the table lacks it."""
    if column not in table or table[column].isna().all():
        return None
    return float(table[column].max())
