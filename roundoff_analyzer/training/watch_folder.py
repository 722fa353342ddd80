"""A watch's folder: `watch.json` says which watch wrote it (its fingerprint: the setup, the model's parameters, the
step's name), `watch.parquet` holds one row per watched iteration. Rows are appended by writing the whole table again
through a temporary file renamed into place, so a reader never sees half a row; a folder of another watch, a sweep, a
training or the user's own files is refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from ..core.errors import InputError
from ..core.json_files import read_json_object
from ..core.safe_files import refuse_links
from ..core.text import printable
from ..storage.folder_kind import refuse_foreign_folder, refuse_unwritable
from ..storage.folder_refusals import refuse_file_path
from ..storage.results import atomic_write_bytes, atomic_write_parquet
from ..storage.table_schemas import TableSchema, read_table

KIND = "roundoff-watch"
WATCH_MANIFEST = "watch.json"
WATCH_TABLE = "watch.parquet"
WATCH_REPORT = "watch_report.md"
FIGURES = "figures"
# Everything a watch writes in its folder: none of these may be a link out of it.
WRITTEN_ENTRIES = (WATCH_MANIFEST, WATCH_TABLE, WATCH_REPORT, FIGURES)

WATCH_SCHEMA = TableSchema(
    "a watch's table",
    pa.schema(
        [
            ("iteration", pa.int64()),
            ("dtype", pa.string()),
            ("library", pa.string()),
            ("method", pa.string()),
            ("n_timesteps", pa.int64()),
            ("scaling", pa.string()),
            ("status", pa.string()),
            ("failure_class", pa.string()),
            ("failure_message", pa.string()),
            ("loss", pa.float64()),
            ("reference_loss", pa.float64()),
            ("unit_roundoff", pa.float64()),
            ("sol_rel_err", pa.float64()),
            ("final_rel_err", pa.float64()),
            ("loss_rel_err", pa.float64()),
            ("grad_y0_rel_err", pa.float64()),
            ("grad_params_rel_err", pa.float64()),
            ("grad_params_rel_err_over_u", pa.float64()),
            ("grad_noise_rel", pa.float64()),
            ("grad_noise_batches", pa.int64()),
            ("grad_noise_uncertainty", pa.float64()),
            ("roundoff_to_noise", pa.float64()),
            ("largest_magnitude", pa.float64()),
            ("dtype_max", pa.float64()),
            ("overflow_margin", pa.float64()),
            ("loss_scale", pa.float64()),
            ("final_scale", pa.float64()),
            ("warning", pa.string()),
            ("seconds", pa.float64()),
        ]
    ),
    required=("iteration", "dtype", "status", "roundoff_to_noise", "overflow_margin"),
    not_null=("iteration",),
)


def check_watch_folder(root: Path, fingerprint: dict[str, Any]) -> bool:
    """Refuse a folder this watch may not write (a file, unwritable, the user's, another watch's); True where it holds
    this watch's earlier rows (a resumed run appends to them). Writes nothing."""
    root = Path(root)
    refuse_file_path(root)
    refuse_unwritable(root)
    if not root.is_dir():
        return False
    refuse_foreign_folder(root, "a watch", lambda folder: (folder / WATCH_MANIFEST).is_file(), ())
    refuse_links(root, WRITTEN_ENTRIES)
    if not (root / WATCH_MANIFEST).is_file():
        return False
    manifest = read_watch_manifest(root)
    if manifest.get("fingerprint") != fingerprint:
        differs = _differs(manifest.get("fingerprint"), fingerprint)
        raise InputError(
            f"output folder '{printable(root)}' holds another watch's rows ({differs}); give this watch another out="
        )
    return True


def _differs(found: Any, wanted: dict[str, Any]) -> str:
    if not isinstance(found, dict):
        return "its watch.json has no fingerprint"
    names = [key for key in wanted if found.get(key) != wanted[key]]
    return "its " + ", ".join(names) + (" differs" if len(names) == 1 else " differ")


def read_watch_manifest(root: Path) -> dict[str, Any]:
    manifest = read_json_object(Path(root) / WATCH_MANIFEST, "a watch's manifest", "give the watch another out=")
    if manifest.get("kind") != KIND:
        raise InputError(f"'{Path(root) / WATCH_MANIFEST}' is not a watch's manifest (its kind is not {KIND!r})")
    return manifest


def write_watch_manifest(root: Path, manifest: dict[str, Any]) -> None:
    Path(root).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(root) / WATCH_MANIFEST, (json.dumps({"kind": KIND, **manifest}, indent=2) + "\n").encode())


def read_watch_table(root: Path) -> pd.DataFrame:
    path = Path(root) / WATCH_TABLE
    if not path.is_file():
        return pd.DataFrame({name: pd.Series(dtype=object) for name in WATCH_SCHEMA.schema.names})
    return read_table(path, WATCH_SCHEMA)


def append_watch_row(root: Path, row: dict[str, Any]) -> None:
    """`row` after the folder's rows from earlier iterations: a run resumed from an earlier iteration replaces the
    rows it measures again."""
    table = read_watch_table(root)
    kept = table[table["iteration"] < row["iteration"]] if len(table) else table
    rows = [*kept.to_dict("records"), {name: row.get(name) for name in WATCH_SCHEMA.schema.names}]
    frame = pd.DataFrame(rows, columns=WATCH_SCHEMA.schema.names)
    atomic_write_parquet(
        pa.Table.from_pandas(frame, schema=WATCH_SCHEMA.schema, preserve_index=False), Path(root) / WATCH_TABLE
    )
