"""The summary table of a training folder (`training_summary.parquet`): its schema, which the training writes it with
and a sweep's report reads it through (the along-training section), and the table with those types."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from .table_schemas import TableSchema

SETUP_KEYS = ("library", "method", "n_timesteps", "dtype", "scaling", "mode")


SUMMARY_SCHEMA = pa.schema(
    [pa.field("setup", pa.string())]
    + [pa.field(key, pa.int64() if key == "n_timesteps" else pa.string()) for key in SETUP_KEYS]
    + [pa.field(name, pa.int64()) for name in ("iterations",)]
    + [pa.field(name, pa.float64()) for name in ("final_loss", "final_val_loss")]
    + [pa.field(name, pa.int64()) for name in ("val_loss_iteration", "skipped_steps")]
    + [pa.field("time_per_iter_s", pa.float64()), pa.field("peak_memory_bytes", pa.int64())]
    + [
        pa.field(name, pa.float64())
        for name in (
            "val_loss_rel_to_reference",
            "loss_rel_to_reference",
            "time_rel_to_reference",
            "memory_rel_to_reference",
        )
    ]
    # Added with the weights axis: a summary written before reads them as float32 master weights
    # updated to nearest, measured nothing.
    + [pa.field(name, pa.string()) for name in ("weights", "update", "optimizer_state")]
    + [pa.field("lost_update_fraction", pa.float64())]
    + [pa.field(name, pa.int64()) for name in ("weight_bytes", "optimizer_state_bytes", "clipped_steps")]
    # Added with the interleaved timing (training/timing.py): a summary written before has its time ratio from the
    # training's own iterations, measured one setup after another.
    + [pa.field(name, pa.float64()) for name in ("interleaved_iter_s", "time_rel_min", "time_rel_max")]
    + [pa.field("timing_rounds", pa.int64())]
)
LATER_COLUMNS = {
    "weights": "float32",
    "update": "nearest",
    "optimizer_state": "float32",
    "lost_update_fraction": None,
    "weight_bytes": None,
    "optimizer_state_bytes": None,
    "clipped_steps": 0,
    "interleaved_iter_s": None,
    "time_rel_min": None,
    "time_rel_max": None,
    "timing_rounds": None,
}
SUMMARY_TABLE = TableSchema(
    "a training summary table",
    SUMMARY_SCHEMA,
    tuple(n for n in SUMMARY_SCHEMA.names if n not in LATER_COLUMNS),
    ("setup",),
)
# What a sweep's report reads from the summary of the training its checkpoints came from.
SUMMARY_FINDINGS_TABLE = TableSchema(
    "a training summary table", SUMMARY_SCHEMA, ("setup", "final_val_loss", "val_loss_rel_to_reference"), ("setup",)
)


def with_later_columns(summary: pd.DataFrame) -> pd.DataFrame:
    """A summary read from a folder, with the columns added since it was written at their defaults."""
    for column, default in LATER_COLUMNS.items():
        if column not in summary.columns:
            summary[column] = default
    return summary


def summary_table(summary: pd.DataFrame) -> pa.Table:
    """The summary with the types the contract promises, whatever pandas inferred (a column of None stays float)."""
    return pa.Table.from_pylist(
        summary.astype(object).where(summary.notna(), None).to_dict("records"), schema=SUMMARY_SCHEMA
    )
