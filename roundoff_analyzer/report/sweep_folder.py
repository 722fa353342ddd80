"""A finished sweep folder read back for reporting: the results table, the manifest and the side tables."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from ..grid import CONFIG_COLUMNS
from ..results import MANIFEST, PARAM_ERRORS, PROFILE, RESULTS, load_results, read_parquet
from ..yardsticks import with_context_columns

# What the report cannot do without; the other columns are used where present.
REQUIRED_COLUMNS = (*CONFIG_COLUMNS, "status", "failure_class", "failure_type", "failure_message", "skip_reason")


@dataclass(frozen=True)
class SweepFolder:
    path: Path
    results: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    param_errors: pd.DataFrame | None = None
    profile: pd.DataFrame | None = None


def read_sweep_folder(path: str | Path) -> SweepFolder:
    """Everything the report reads; a folder that is not a sweep is an InputError, raised before anything is written."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"'{path}' is not a folder; give the folder a `roundoff sweep --out` wrote")
    if not (path / RESULTS).is_file():
        raise InputError(f"'{path}' holds no {RESULTS}; give the folder a finished `roundoff sweep --out` wrote")
    results = load_results(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in results.columns]
    if missing:
        raise InputError(f"'{path / RESULTS}' is not a roundoff results table (missing columns: {', '.join(missing)})")
    if results.empty:
        raise InputError(f"'{path / RESULTS}' holds no configurations; there is nothing to report")
    # A folder from before the discretisation error and the gradient noise were measured still reports, without them.
    results = with_context_columns(results)
    return SweepFolder(path, results, _manifest(path), _side_table(path / PARAM_ERRORS), _side_table(path / PROFILE))


def _manifest(folder: Path) -> dict[str, Any]:
    # The results alone still make a report; the overview then says less.
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return _of_expected_kinds(manifest) if isinstance(manifest, dict) else {}


_NUMBER = (int, float)
# What the report reads from a manifest, and of which kind; a folder from a stranger may hold anything else.
_MANIFEST_KINDS: dict[str, tuple[type, ...]] = {
    "created_at": (str,), "finished_at": (str,), "duration_s": _NUMBER, "repeats": (int,), "timeout_s": _NUMBER,
    "model": (dict,), "data": (str,), "data_source": (str,), "checkpoint": (dict, str), "checkpoints": (list,), "device": (str,),
    "device_description": (str,), "versions": (dict,), "scaler": (dict,), "grid": (dict,), "fingerprint": (dict,),
}  # fmt: skip


def _of_expected_kinds(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without values of the wrong kind (a number written as text, a list for a table): the overview
    then says less, instead of failing."""
    kept = {}
    for key, value in manifest.items():
        kinds = _MANIFEST_KINDS.get(key)
        if kinds is None or (isinstance(value, kinds) and not isinstance(value, bool)):
            kept[key] = value
    scaler = kept.get("scaler")
    if isinstance(scaler, dict):
        kept["scaler"] = {k: v for k, v in scaler.items() if isinstance(v, _NUMBER) and not isinstance(v, bool)}
    return kept


def _side_table(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    table = read_parquet(path)
    return table if not table.empty else None
