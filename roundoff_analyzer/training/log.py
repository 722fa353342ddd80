"""The training log: one row per setup and iteration (iteration 0: the initial weights' validation loss only).

Columns: `setup`, `iteration`, `loss` (the training loss of that iteration's batch, before its update),
`val_loss` (where computed: at every saved iteration and the last), `skipped` (the step was not taken:
its gradient was not finite), `failure` (why), `scale` (the loss or adjoint scale that counted),
`iter_time_s` (the step: forward, backward and the optimizer's update), `time_s` (the setup's training time so far),
`weights` and `update` (where the setup's weights live and how a step is rounded into them),
`lost_update_fraction` (the fraction of weight entries whose update was nonzero but left the stored weight unchanged;
empty for float32 master weights), `grad_norm` (the unscaled gradient's norm before clipping) and `clipped`
(the gradient was clipped to `clip_grad_norm`). A log written before a column existed reads as its default.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from ..storage.results import atomic_write_parquet
from ..storage.table_schemas import TableSchema, read_table

LOG_SCHEMA = pa.schema(
    [
        pa.field("setup", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("loss", pa.float64()),
        pa.field("val_loss", pa.float64()),
        pa.field("skipped", pa.bool_()),
        pa.field("failure", pa.string()),
        pa.field("scale", pa.float64()),
        pa.field("iter_time_s", pa.float64()),
        pa.field("time_s", pa.float64()),
        pa.field("weights", pa.string()),
        pa.field("update", pa.string()),
        pa.field("lost_update_fraction", pa.float64()),
        pa.field("grad_norm", pa.float64()),
        pa.field("clipped", pa.bool_()),
    ]
)
COLUMNS = tuple(LOG_SCHEMA.names)
LOG_TABLE = TableSchema("a training log", LOG_SCHEMA, COLUMNS[:9], ("setup", "iteration", "skipped"))
# What a log from before a column existed trained with.
DEFAULTS = {
    "weights": "float32",
    "update": "nearest",
    "lost_update_fraction": None,
    "grad_norm": None,
    "clipped": False,
}


def row(
    setup: str,
    iteration: int,
    loss=None,
    val_loss=None,
    skipped=False,
    failure=None,
    scale=None,
    iter_time_s=None,
    time_s=0.0,
    **later,
) -> dict:
    """One row; `later`: the columns added since (weights, update, lost_update_fraction, grad_norm, clipped)."""
    return dict(
        setup=setup,
        iteration=iteration,
        loss=loss,
        val_loss=val_loss,
        skipped=skipped,
        failure=failure,
        scale=scale,
        iter_time_s=iter_time_s,
        time_s=time_s,
        **{**DEFAULTS, **later},
    )


def write_log(rows: list[dict], path: Path) -> None:
    atomic_write_parquet(pa.Table.from_pylist([{**DEFAULTS, **r} for r in rows], schema=LOG_SCHEMA), path)


def read_log(path: Path) -> pd.DataFrame:
    table = read_table(path, LOG_TABLE)
    for column, default in DEFAULTS.items():
        if column not in table.columns:
            table[column] = default
    return table


def as_columns(rows: list[dict]) -> dict[str, list]:
    """Rows as plain column lists (what a resume state, loaded with weights_only, can hold)."""
    return {column: [r.get(column, DEFAULTS.get(column)) for r in rows] for column in COLUMNS}


def from_columns(columns: dict[str, list]) -> list[dict]:
    return [{**DEFAULTS, **dict(zip(columns, values))} for values in zip(*columns.values())]
