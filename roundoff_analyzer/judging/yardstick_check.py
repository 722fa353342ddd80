"""The check's yardsticks: did the float64 references the errors are measured against stay what they were?

A run's errors are its distance from its float64 reference, so a change that also moved the reference (a solver
library that now rounds every solve, whatever its dtype) moves the errors too, most often down: the check would call
a broken reference an improvement. Each reference's own distance from the fine reference, `disc_*`, tells: between two
sweeps of one setup it does not move (float64 on both sides; between AVX-512 and scalar kernels it moved by at most
6.2e-6 of itself, the fine reference's numbers by 1.4e-5: docs/ci.md), so a `disc_*` that moved by more than
REFERENCE_FACTOR names the reference as what changed, and the errors measured against it are not compared. The fine
reference's own error and its observed order of convergence (`fine_ref_*`, one per sweep) are compared the same way:
where they moved, every `disc_*` did.

A reference that moved with the fine reference (a head computed in float16 in every precision, float64's included)
can keep its distance from it: so each reference's own norms are compared too (`reference_*_norm`, measured in the
same configurations on both sides), with a relative tolerance, not bit equality: recomputed on another CPU, a float64
solve differs in its last bits.
"""

from __future__ import annotations

import math

import pandas as pd

from ..measuring.columns import REFERENCE_NORM_COLUMNS
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
# How far a float64 reference's norm may move, relative to the larger, before the reference counts as moved. Between
# AVX-512 and scalar kernels the CI grid's norms moved by at most 1.2e-8 (the inputs are made in float32); a model file
# whose head rounds to float16 in every precision moved a tiny field's norms by 1.2e-6 to 4.9e-5, the largest of each
# configuration's four by 6.2e-6 or more (docs/ci.md): 25 times the one, a twentieth of the other.
NORM_RTOL = 3e-7


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


def norm_changes(record: dict, number) -> list[tuple[str, float, float]]:
    """The reference norms of one configuration (a merged record with `_new` and `_baseline` columns) that moved by
    more than NORM_RTOL of the larger: (column, baseline, new). A norm finite on one side only moved."""
    found = []
    for column in REFERENCE_NORM_COLUMNS:
        before, after = number(record.get(f"{column}_baseline")), number(record.get(f"{column}_new"))
        if before is None or after is None:
            continue
        if math.isfinite(before) and math.isfinite(after):
            if abs(after - before) > NORM_RTOL * max(abs(before), abs(after)):
                found.append((column, before, after))
        elif math.isfinite(before) or math.isfinite(after):
            found.append((column, before, after))
    return found


def unrecorded_norms(new: pd.DataFrame, baseline: pd.DataFrame) -> str | None:
    """A line where the new results recorded their references' norms and the baseline did not (a table from before
    them): its references are then compared by their distance from the fine reference alone, where it has one."""
    if not _recorded(new) or _recorded(baseline):
        return None
    compared = "their distances from the fine reference (disc_*)" if any(c in baseline for c in DISC_COLUMNS) else ""
    return (
        "the baseline did not record its float64 references' norms (written before roundoff-analyzer recorded "
        f"them): {'only ' + compared + ' were compared' if compared else 'the references were not compared'}; "
        "sweep the baseline again to compare them"
    )


def _recorded(table: pd.DataFrame) -> bool:
    return any(column in table and table[column].notna().any() for column in REFERENCE_NORM_COLUMNS)


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
    """One line for a fine reference that moved, one per library whose float64 references moved (`changed`: the
    configurations whose `disc_*` or reference norms moved, with their library, method, n_timesteps and checkpoint),
    with where their discretisation error now grows, and one where the baseline recorded no reference norms."""
    lines = []
    fine = fine_reference_changes(new, baseline)
    if fine:
        lines.append(
            f"the fine reference changed ({'; '.join(fine)}): every discretisation error is measured against it, "
            "so each configuration's float64 reference is judged against another yardstick"
        )
    for library, rows in changed.groupby("library", sort=False):
        grows = growing_with_n(new, str(library))
        # Configurations of one method, n_timesteps and checkpoint share one reference (measuring/references.py).
        shared = len(rows.drop_duplicates(["method", "n_timesteps", "checkpoint"]))
        lines.append(
            f"the float64 reference of {library} changed in {len(rows)} configuration{'s' if len(rows) != 1 else ''}"
            + (f" ({shared} reference{'s' if shared != 1 else ''})" if shared != len(rows) else "")
            + (f"; its discretisation error now grows with n_timesteps ({'; '.join(grows)})" if grows else "")
            + ": the errors measured against it are not compared with the baseline's; "
            "a change that moves the reference fails the check until the baseline is swept again"
        )
    unrecorded = unrecorded_norms(new, baseline)
    return lines + ([unrecorded] if unrecorded else [])


def _one(table: pd.DataFrame, column: str) -> float | None:
    """A sweep-wide column's value (the largest, should rows differ); None where the table lacks it."""
    if column not in table or table[column].isna().all():
        return None
    return float(table[column].max())
