"""One row per setup, from the training log alone (pure functions of the tables): its final training and validation
loss, against the first setup's, its time per iteration, its mean lost-update fraction and how often it clipped;
peak memory and the bytes of weights and optimizer state come from the setups' own runs, and the time against the
first setup's from the iterations timed interleaved after training (training/timing.py)."""

from __future__ import annotations

import statistics

import pandas as pd

from ..storage.training_summary import SETUP_KEYS
from .setups import SETUP_DEFAULTS


def relative_to(value: float | None, reference: float | None) -> float | None:
    """(value - reference) / |reference|; None where either is missing or the reference is 0."""
    if value is None or reference is None or pd.isna(value) or pd.isna(reference) or reference == 0:
        return None
    return (value - reference) / abs(reference)


def _mean(values: pd.Series) -> float | None:
    present = values.dropna()
    return float(present.mean()) if not present.empty else None


def setup_summary(
    log: pd.DataFrame, setups: list[dict], runs: dict, timings: dict[str, list[float]] | None = None
) -> pd.DataFrame:
    """`setups`: the manifest's setup objects, the reference first; a setup without log rows is left out. `runs`:
    label -> what its run measured (`peak_memory_bytes`, `weight_bytes`, `optimizer_state_bytes`). `timings`: label ->
    its seconds per iteration in each interleaved round; the time ratio of a setup without them, or of any setup where
    the first has none, is left empty."""
    timings = timings or {}
    rows = []
    for setup in setups:
        own = log[log["setup"] == setup["label"]].sort_values("iteration")
        steps = own[own["iteration"] > 0]
        if steps.empty:
            continue
        last = steps.iloc[-1]
        validated = own[own["val_loss"].notna()]
        rows.append(
            {
                "setup": setup["label"],
                **{key: setup[key] for key in SETUP_KEYS},
                **{key: setup.get(key, default) for key, default in SETUP_DEFAULTS.items()},
                "iterations": int(last["iteration"]),
                "final_loss": float(last["loss"]) if pd.notna(last["loss"]) else None,
                "final_val_loss": float(validated.iloc[-1]["val_loss"]) if not validated.empty else None,
                "val_loss_iteration": int(validated.iloc[-1]["iteration"]) if not validated.empty else None,
                "skipped_steps": int(steps["skipped"].sum()),
                "time_per_iter_s": float(steps["iter_time_s"].mean()),
                "peak_memory_bytes": _measured(runs, setup["label"], "peak_memory_bytes"),
                "lost_update_fraction": _mean(steps["lost_update_fraction"]),
                "weight_bytes": _measured(runs, setup["label"], "weight_bytes"),
                "optimizer_state_bytes": _measured(runs, setup["label"], "optimizer_state_bytes"),
                "clipped_steps": int(steps["clipped"].fillna(False).astype(bool).sum()),
                "interleaved_iter_s": statistics.median(timed) if (timed := timings.get(setup["label"])) else None,
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    reference = table.iloc[0]
    table["val_loss_rel_to_reference"] = [relative_to(v, reference["final_val_loss"]) for v in table["final_val_loss"]]
    table["loss_rel_to_reference"] = [relative_to(v, reference["final_loss"]) for v in table["final_loss"]]
    ratios = [_round_ratios(timings.get(label), timings.get(reference["setup"])) for label in table["setup"]]
    table["time_rel_to_reference"] = [statistics.median(r) if r else None for r in ratios]
    table["time_rel_min"] = [min(r) if r else None for r in ratios]
    table["time_rel_max"] = [max(r) if r else None for r in ratios]
    table["timing_rounds"] = pd.array([len(r) if r else None for r in ratios], dtype="Int64")
    table["memory_rel_to_reference"] = [
        m / reference["peak_memory_bytes"]
        if pd.notna(m) and pd.notna(reference["peak_memory_bytes"]) and reference["peak_memory_bytes"]
        else None
        for m in table["peak_memory_bytes"]
    ]
    for column in ("peak_memory_bytes", "weight_bytes", "optimizer_state_bytes"):
        table[column] = table[column].astype("Int64")
    return table


def _round_ratios(own: list[float] | None, reference: list[float] | None) -> list[float]:
    """A setup's time over the first setup's, round by round: each pair was measured moments apart, under one load."""
    if not own or not reference:
        return []
    return [mine / first for mine, first in zip(own, reference) if first > 0]


def _measured(runs: dict, label: str, what: str) -> int | None:
    run = runs.get(label)
    return getattr(run, what, None) if run is not None else None
