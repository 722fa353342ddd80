"""Roundoff along training: how each setup's errors move from checkpoint to checkpoint of a sweep over several.

Pure functions of the results table. A trend is one setup (library, method, dtype, scaling, mode) of one train
folder (the part of the checkpoint's name before its last `/`) at the sweep's largest n_timesteps, its error at
each checkpoint with a training iteration, in iteration order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..measuring.outcomes import Status
from .findings import SETUP_COLUMNS

# An error "grows" (or "falls") along training when it is at least this many times larger (smaller) at the last
# checkpoint than at the first; it "stays within" this factor when its largest and smallest value over all
# checkpoints are that close.
ALONG_TRAINING = 2.0
# The errors drawn and stated along training, by column; the table and the statements use the parameter gradient's.
TRAINING_METRICS = {
    "final_rel_err": "final state",
    "grad_y0_rel_err": "gradient w.r.t. y0",
    "grad_params_rel_err": "parameter gradient",
}
STATED_METRIC = "grad_params_rel_err"


def checkpoints_in(results: pd.DataFrame) -> list[str]:
    """The checkpoint names of a sweep over several, in the sweep's order; [] for a sweep of one set of weights."""
    if "checkpoint" not in results.columns:
        return []
    names = [name for name in results["checkpoint"].drop_duplicates() if isinstance(name, str) and name]
    return names if len(names) > 1 else []


def last_checkpoint(results: pd.DataFrame) -> str | None:
    """The checkpoint the rest of the report judges: the latest in training (the sweep's last when none says)."""
    names = checkpoints_in(results)
    if not names:
        return None
    iterations = _iterations(results)
    known = [n for n in names if iterations.get(n) is not None]
    return max(known, key=lambda n: (iterations[n], names.index(n))) if known else names[-1]


def _iterations(results: pd.DataFrame) -> dict[str, int | None]:
    if "train_iteration" not in results.columns:
        return {}
    first = results.drop_duplicates("checkpoint").set_index("checkpoint")["train_iteration"]
    return {name: (int(v) if pd.notna(v) else None) for name, v in first.items()}


def series_of(checkpoint: str) -> str:
    """The train folder a checkpoint came from, as its name says (`run/iter_0000100` -> `run`; a bare file: "")."""
    return checkpoint.rsplit("/", 1)[0] if "/" in checkpoint else ""


@dataclass(frozen=True)
class Trend:
    setup: tuple  # SETUP_COLUMNS values
    series: str
    n_timesteps: int
    metric: str
    checkpoints: tuple[str, ...]  # with an iteration, in iteration order
    iterations: tuple[int, ...]
    values: tuple[float | None, ...]  # None where the run failed or was skipped
    over_u: tuple[float | None, ...]
    failed: tuple[tuple[int, str], ...]  # (iteration, failure class)

    @property
    def measured(self) -> list[tuple[int, float]]:
        return [(i, v) for i, v in zip(self.iterations, self.values) if v is not None]

    @property
    def ratios(self) -> tuple[float | None, ...]:
        """Each checkpoint's error over the first checkpoint's (None where either is missing)."""
        first = self.values[0]
        return tuple(v / first if v is not None and first else None for v in self.values)


def trends(results: pd.DataFrame, metric: str = STATED_METRIC) -> list[Trend]:
    """One trend per setup and train folder with at least two checkpoints
    with an iteration, at the largest n_timesteps."""
    if not checkpoints_in(results) or "train_iteration" not in results.columns:
        return []
    runs = results[results["checkpoint"].astype(str).ne("") & results["train_iteration"].notna()]
    runs = runs[runs["status"] != Status.SKIPPED]
    if runs.empty:
        return []
    largest = int(runs["n_timesteps"].max())
    at_n = runs[runs["n_timesteps"] == largest].assign(series=lambda t: t["checkpoint"].map(series_of))
    found = []
    for key, group in at_n.groupby([*SETUP_COLUMNS, "series"], sort=False):
        group = group.sort_values(["train_iteration", "checkpoint"], kind="stable")
        if group["train_iteration"].nunique() < 2:
            continue
        ok = group["status"].eq(Status.OK) & group[metric].gt(0)
        values = tuple(float(v) if good else None for v, good in zip(group[metric], ok))
        over_u = tuple(float(v) if good else None for v, good in zip(group[f"{metric}_over_u"], ok))
        failed = tuple(
            (int(i), str(c))
            for i, c, s in zip(group["train_iteration"], group["failure_class"], group["status"])
            if s == Status.FAILED
        )
        found.append(
            Trend(
                tuple(key[:-1]),
                key[-1],
                largest,
                metric,
                tuple(group["checkpoint"]),
                tuple(int(i) for i in group["train_iteration"]),
                values,
                over_u,
                failed,
            )
        )
    return found


@dataclass(frozen=True)
class Movement:
    """What a trend does from its first to its last measured checkpoint."""

    kind: str  # "grows", "falls", "stays" (within ALONG_TRAINING over every checkpoint) or "varies"
    factor: float  # last over first for grows (first over last for falls); largest over smallest for stays and varies
    first: int  # iterations of the first and last measured checkpoints
    last: int
    steepest: tuple[int, int] | None  # the consecutive iterations between which it moved most in its direction


def movement(trend: Trend) -> Movement | None:
    """None with fewer than two measured checkpoints."""
    measured = trend.measured
    if len(measured) < 2:
        return None
    (first, a), (last, b) = measured[0], measured[-1]
    values = [v for _, v in measured]
    spread = max(values) / min(values)
    if b / a >= ALONG_TRAINING:
        return Movement("grows", b / a, first, last, _steepest(measured, rising=True))
    if a / b >= ALONG_TRAINING:
        return Movement("falls", a / b, first, last, _steepest(measured, rising=False))
    return Movement("stays" if spread < ALONG_TRAINING else "varies", spread, first, last, None)


def _steepest(measured: list[tuple[int, float]], rising: bool) -> tuple[int, int]:
    steps = [((i, j), (w / v) if rising else (v / w)) for (i, v), (j, w) in zip(measured, measured[1:])]
    return max(steps, key=lambda step: (step[1], -step[0][0]))[0]
