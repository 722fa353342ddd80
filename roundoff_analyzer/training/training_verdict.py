"""The verdict of a training, per setup against the first (pure functions of the summary and the log): within 2% of
its final validation loss or not, the first validated iteration where it departs beyond 2%, and the bytes of weights
and optimizer state it saves; and which of the setups with weights in a low format held."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from .summary import relative_to

# The yardstick for "comparable accuracy": a final validation loss within 2% of the reference's.
COMPARABLE = 0.02


@dataclass(frozen=True)
class SetupVerdict:
    setup: str
    holds: bool | None  # None: no validation loss to compare
    val_loss_rel: float | None
    departs_at: int | None  # the first validated iteration beyond COMPARABLE of the reference's; None: never
    lost_update_fraction: float | None
    stored_bytes: int | None  # weights + optimizer state
    stored_bytes_rel: float | None  # against the reference's


def departs_at(log: pd.DataFrame, setup: str, reference: str) -> int | None:
    """The first iteration where both validation losses were computed and `setup`'s is beyond
    COMPARABLE of `reference`'s."""
    validated = log[log["val_loss"].notna() & log["setup"].isin([setup, reference])]
    table = validated.pivot_table(index="iteration", columns="setup", values="val_loss", aggfunc="first").sort_index()
    if setup not in table or reference not in table:
        return None
    for iteration, values in table.iterrows():
        rel = relative_to(values[setup], values[reference])
        if rel is not None and abs(rel) > COMPARABLE:
            return int(iteration)
    return None


def stored_bytes(row) -> int | None:
    weights, state = getattr(row, "weight_bytes", math.nan), getattr(row, "optimizer_state_bytes", math.nan)
    return int(weights) + int(state) if pd.notna(weights) and pd.notna(state) else None


def setup_verdicts(summary: pd.DataFrame, log: pd.DataFrame) -> list[SetupVerdict]:
    """One verdict per setup after the first (the reference)."""
    if summary.empty:
        return []
    reference = summary.iloc[0]
    reference_bytes = stored_bytes(reference)
    verdicts = []
    for row in summary.iloc[1:].itertuples(index=False):
        rel = row.val_loss_rel_to_reference
        own_bytes = stored_bytes(row)
        verdicts.append(
            SetupVerdict(
                row.setup,
                None if pd.isna(rel) else bool(abs(rel) <= COMPARABLE),
                None if pd.isna(rel) else float(rel),
                departs_at(log, row.setup, reference["setup"]),
                None if pd.isna(row.lost_update_fraction) else float(row.lost_update_fraction),
                own_bytes,
                own_bytes / reference_bytes if own_bytes is not None and reference_bytes else None,
            )
        )
    return verdicts


def best_low_weights(summary: pd.DataFrame, verdicts: list[SetupVerdict]) -> pd.Series | None:
    """Of the setups with weights in a low format that held, the one storing the fewest
    bytes (then the closest loss)."""
    held = {v.setup: v for v in verdicts if v.holds}
    candidates = summary[summary["setup"].isin(held) & (summary["weights"] != "float32")]
    if candidates.empty:
        return None
    order = sorted(
        candidates.itertuples(index=True),
        key=lambda r: _fewest_bytes_then_closest(held[r.setup]),
    )
    return summary.loc[order[0].Index]


def _fewest_bytes_then_closest(verdict: SetupVerdict) -> tuple[int, float]:
    assert verdict.val_loss_rel is not None  # it held: its validation loss was compared
    return verdict.stored_bytes or 0, abs(verdict.val_loss_rel)
