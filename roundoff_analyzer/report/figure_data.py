"""What the report's figures show, as names and tables (no drawing, so no matplotlib): the figures' file names and
the errors they plot, and the backward profile's steps marked by their run's status. The markdown reads these too;
figures.py draws from them."""

from __future__ import annotations

import math

import pandas as pd

from ..axes.grid import CONFIG_COLUMNS
from ..measuring.outcomes import Status
from .along_training_findings import Trend
from .findings import SETUP_COLUMNS

METRIC_NAMES = {
    "sol_rel_err": "solution",
    "grad_y0_rel_err": "gradient w.r.t. y0",
    "grad_params_rel_err": "parameter gradient",
}
# Figure file name -> the error it plots.
ERROR_FIGURES = {
    "error_solution": "sol_rel_err",
    "error_grad_y0": "grad_y0_rel_err",
    "error_grad_params": "grad_params_rel_err",
}
ADJOINT_FIGURE = "adjoint_range"  # file names adjoint_range_n<n_timesteps>
TRAINING_FIGURE = "along_training"

# The columns that name one configuration in both the profile and the results.
# A run's columns but its checkpoint: its status is "failed" where it failed at any checkpoint (one model per table).
_RUN_KEYS = tuple(c for c in CONFIG_COLUMNS if c not in ("model", "checkpoint"))


def with_run_status(profile: pd.DataFrame, results: pd.DataFrame | None) -> pd.DataFrame:
    """The profile with its run's `status` beside each row ("failed" where a run of it failed at any checkpoint)."""
    if results is None:
        return profile.assign(status=Status.FAILED)
    keys = [k for k in _RUN_KEYS if k in profile and k in results]
    failed = results.assign(failed=results["status"] == Status.FAILED).groupby(keys)["failed"].any().reset_index()
    merged = profile.merge(failed, on=keys, how="left")
    return merged.assign(
        status=merged["failed"].map({True: Status.FAILED, False: Status.OK}).fillna(Status.FAILED)
    ).drop(columns="failed")


def worst_seed(rows: pd.DataFrame, badness: pd.Series) -> tuple[pd.DataFrame, int]:
    """Where the rows hold several initialisations (the seed axis): each configuration's rows of one seed, the one
    whose `badness` peaks highest (a missing value, a failed run's, counts as the worst), so that a line through
    n_timesteps or steps is drawn through one seed's points, the worst at each, as the verdict judges; and how many
    seeds there were (1: the rows as they are)."""
    if "seed" not in rows or rows["seed"].nunique() <= 1:
        return rows, 1
    keys = [c for c in CONFIG_COLUMNS if c in rows and c != "seed"]
    scored = rows.assign(badness=badness.astype(float).fillna(math.inf))
    peaks = scored.groupby([*keys, "seed"], dropna=False, sort=False)["badness"].max().reset_index()
    worst = peaks.sort_values("badness", ascending=False, kind="stable").drop_duplicates(keys)
    return rows.merge(worst[[*keys, "seed"]], on=[*keys, "seed"]), int(rows["seed"].nunique())


def worst_seed_words(n_seeds: int) -> str:
    """A figure title's note on what its points are where the sweep ran several initialisations."""
    return f" (each point the worst of {n_seeds} initialisations)" if n_seeds > 1 else ""


def non_finite_steps(profile: pd.DataFrame) -> pd.Series:
    """Backward steps whose value is non-finite, or too large for the low dtype (a wider adjoint survives that)."""
    held = profile["max_abs_low"].fillna(profile["max_abs"])
    return ~profile["finite"].astype(bool) | ~held.map(math.isfinite)


def trend_label(trend: Trend, varying: set[str]) -> str:
    """dtype library scaling, with method, mode and train folder where the sweep has more than one of them."""
    named = dict(zip(SETUP_COLUMNS, trend.setup))
    parts = [named["dtype"], named["library"], named["scaling"]]
    parts += [named[c] for c in ("method", "mode") if c in varying]
    return " ".join(parts + ([f"({trend.series})"] if "series" in varying and trend.series else []))


def varying_columns(found: list[Trend]) -> set[str]:
    columns = {c for i, c in enumerate(SETUP_COLUMNS) if len({t.setup[i] for t in found}) > 1}
    return columns | ({"series"} if len({t.series for t in found}) > 1 else set())


def adjoint_timesteps(profile: pd.DataFrame | None, results: pd.DataFrame) -> list[int]:
    """The n_timesteps whose adjoint range is drawn: the largest, and each where a run failed."""
    if profile is None or profile[profile["phase"] == "backward"].empty:
        return []
    drawn = set(profile.loc[profile["phase"] == "backward", "n_timesteps"].astype(int))
    failed = set(results.loc[results["status"] == Status.FAILED, "n_timesteps"].astype(int)) & drawn
    return sorted(failed | {max(drawn)})
