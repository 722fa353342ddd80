"""Results on disk: a manifest, one Parquet shard per finished configuration, and the combined tables.

A shard holds one configuration's row with its per-parameter errors and range profile nested in
it, so that writing it (temporary file, then rename) is one atomic step. The combined tables are
always rebuilt from the shards: `results.parquet` (one row per configuration),
`param_errors.parquet` and `profile.parquet` (long tables keyed by the configuration columns).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputError, one_line
from .grid import AXIS_DEFAULTS, CONFIG_COLUMNS, Configuration
from .measure import ERROR_METRICS, SIG_DIGITS, STEP_COLUMNS, Measurement
from .yardsticks import CONTEXT_COLUMNS, INTEGER_CONTEXT_COLUMNS

MANIFEST = "manifest.json"
RESULTS = "results.parquet"
PARAM_ERRORS = "param_errors.parquet"
PROFILE = "profile.parquet"
SHARDS = "shards"

_CONFIG_FIELDS = [
    pa.field("model", pa.string()), pa.field("library", pa.string()), pa.field("method", pa.string()),
    pa.field("n_timesteps", pa.int64()), pa.field("dtype", pa.string()), pa.field("scaling", pa.string()),
    pa.field("mode", pa.string()), pa.field("arithmetic", pa.string()), pa.field("rounding", pa.string()),
]  # fmt: skip

RESULT_SCHEMA = pa.schema(
    _CONFIG_FIELDS
    + [pa.field(name, pa.string()) for name in ("status", "failure_class", "failure_type", "failure_message", "skip_reason")]
    + [pa.field(f"{name}{suffix}", pa.float64()) for name in ERROR_METRICS for suffix in ("", "_over_u", "_spread")]
    + [
        pa.field("unit_roundoff", pa.float64()), pa.field("dtype_max", pa.float64()),
        pa.field("overflow_step", pa.int64()), pa.field("overflow_phase", pa.string()),
        pa.field("max_abs_adjoint", pa.float64()), pa.field("reference_max_abs_adjoint", pa.float64()),
        pa.field("adjoint_zero_share", pa.float64()), pa.field("reference_adjoint_zero_share", pa.float64()),
        pa.field("final_scale", pa.float64()), pa.field("scale_retries", pa.int64()),
        pa.field("deterministic", pa.bool_()), pa.field("n_repeats", pa.int64()),
        pa.field("time_forward_s", pa.float64()), pa.field("time_backward_s", pa.float64()),
        pa.field("peak_memory_bytes", pa.int64()),
        pa.field("fp8_scaling", pa.bool_()), *(pa.field(name, pa.float64()) for name in SIG_DIGITS),
    ]
    + [pa.field(name, pa.int64() if name in INTEGER_CONTEXT_COLUMNS else pa.float64()) for name in CONTEXT_COLUMNS]
    + [pa.field(name, pa.float64() if name in ("rtol", "atol") else pa.int64()) for name in STEP_COLUMNS]
)  # fmt: skip

PARAM_FIELDS = [pa.field("parameter", pa.string()), pa.field("grad_rel_err", pa.float64()), pa.field("grad_rel_err_over_u", pa.float64())]
PROFILE_FIELDS = [
    pa.field("phase", pa.string()), pa.field("step", pa.int64()), pa.field("max_abs", pa.float64()),
    pa.field("reference_max_abs", pa.float64()), pa.field("max_abs_low", pa.float64()),
    pa.field("zero_share", pa.float64()), pa.field("reference_zero_share", pa.float64()), pa.field("finite", pa.bool_()),
]  # fmt: skip
SHARD_SCHEMA = RESULT_SCHEMA.append(pa.field("parameter_errors", pa.list_(pa.struct(PARAM_FIELDS)))).append(
    pa.field("profile", pa.list_(pa.struct(PROFILE_FIELDS)))
)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


class ResultStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.shards = self.root / SHARDS

    def check(self, fingerprint: dict[str, Any], force: bool = False) -> None:
        """Refuse a file where the folder should be, and a folder holding a different sweep unless `force`; writes nothing."""
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"output folder '{self.root}' is a file; give --out a folder path")
        existing = self.read_manifest()
        if existing is not None and existing.get("fingerprint") != fingerprint and not force:
            differs = sorted(k for k in fingerprint if existing.get("fingerprint", {}).get(k) != fingerprint[k])
            raise InputError(
                f"output folder '{self.root}' holds a different sweep (differs in: {', '.join(differs) or 'everything'}); "
                "use another --out, or --force to replace it"
            )

    def open(self, manifest: dict[str, Any], force: bool = False) -> None:
        """Create the folder, or reopen it for the same sweep; a different sweep there is refused unless `force`."""
        self.check(manifest["fingerprint"], force)
        existing = self.read_manifest()
        if existing is not None and existing.get("fingerprint") != manifest["fingerprint"]:
            for shard in self.shards.glob("*.parquet"):
                shard.unlink()
        self.shards.mkdir(parents=True, exist_ok=True)
        if existing is not None and existing.get("fingerprint") == manifest["fingerprint"]:
            manifest = {**manifest, "created_at": existing.get("created_at", manifest.get("created_at"))}
        self.write_manifest(manifest)

    def read_manifest(self) -> dict[str, Any] | None:
        path = self.root / MANIFEST
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_bytes(self.root / MANIFEST, json.dumps(manifest, indent=2, default=str).encode())

    def completed(self) -> set[str]:
        return {p.name[: -len(".parquet")] for p in self.shards.glob("*.parquet")} if self.shards.is_dir() else set()

    def write(self, config: Configuration, measurement: Measurement) -> None:
        row = {**measurement.row, "parameter_errors": measurement.parameter_errors, "profile": measurement.profile}
        atomic_write_parquet(pa.Table.from_pylist([row], schema=SHARD_SCHEMA), self.shards / f"{config.id}.parquet")

    def read_row(self, config: Configuration) -> dict[str, Any]:
        """One finished configuration's row, as `measure` produced it (for progress shown from shards written elsewhere)."""
        return pq.read_table(self.shards / f"{config.id}.parquet", columns=RESULT_SCHEMA.names).to_pylist()[0]

    def combine(self, order: Iterable[Configuration]) -> pd.DataFrame:
        """Rebuild the three combined tables from the shards, in grid order."""
        shards = [self.shards / f"{c.id}.parquet" for c in order]
        tables = [pq.read_table(p, schema=SHARD_SCHEMA) for p in shards if p.is_file()]
        combined = pa.concat_tables(tables) if tables else SHARD_SCHEMA.empty_table()
        atomic_write_parquet(combined.select(RESULT_SCHEMA.names), self.root / RESULTS)
        for column, fields, name in (("parameter_errors", PARAM_FIELDS, PARAM_ERRORS), ("profile", PROFILE_FIELDS, PROFILE)):
            atomic_write_parquet(_explode(combined, column, fields), self.root / name)
        return combined.select(RESULT_SCHEMA.names).to_pandas()


def _explode(table: pa.Table, column: str, fields: list[pa.Field]) -> pa.Table:
    rows = []
    keys = table.select(list(CONFIG_COLUMNS)).to_pylist()
    for key, nested in zip(keys, table.column(column).to_pylist()):
        rows.extend({**key, **item} for item in nested or [])
    return pa.Table.from_pylist(rows, schema=pa.schema(_CONFIG_FIELDS + fields))


def load_results(path: str | Path) -> pd.DataFrame:
    """The results table of a sweep folder, or of a Parquet file given directly."""
    path = Path(path)
    target = path / RESULTS if path.is_dir() else path
    if not target.is_file():
        raise InputError(f"no results at '{path}': expected a sweep folder holding {RESULTS}, or a .parquet file")
    return read_parquet(target)


def read_parquet(path: Path) -> pd.DataFrame:
    """A Parquet table; an unreadable file is bad input, said in one line."""
    try:
        table = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is bad input here
        raise InputError(f"cannot read '{path}' as Parquet: {one_line(exc)}") from None
    return with_axis_defaults(table)


def with_axis_defaults(table: pd.DataFrame) -> pd.DataFrame:
    """Tables written before the arithmetic axis: every run was hardware arithmetic rounding to nearest."""
    missing = [c for c in AXIS_DEFAULTS if c not in table.columns]
    if "dtype" not in table.columns or not missing:
        return table
    table = table.copy()
    for offset, column in enumerate(missing, start=1):
        table.insert(list(table.columns).index("mode") + offset if "mode" in table.columns else len(table.columns), column, AXIS_DEFAULTS[column])
    return table
