"""Which shards in a results folder count: those written by this sweep and readable whole.

Every shard carries the digest of the sweep's fingerprint in its Parquet metadata. A shard without it,
with another one, that does not read back, or that holds another configuration than its name says
was not written by this sweep (a foreign sweep, a crash, a full disk): it is moved to `set_aside/`,
never deleted, and its configuration runs again.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .grid import CONFIG_COLUMNS

FINGERPRINT_KEY = b"roundoff.fingerprint"
SET_ASIDE = "set_aside"


def fingerprint_digest(fingerprint: Any) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()


def with_fingerprint(table: pa.Table, digest: str | None) -> pa.Table:
    return table if digest is None else table.replace_schema_metadata({**(table.schema.metadata or {}), FINGERPRINT_KEY: digest.encode()})


def shard_problem(path: Path, schema: pa.Schema, digest: str | None, expected_id: str, identify) -> str | None:
    """Why the shard at `path` does not count (None when it does). `identify(row)` gives the configuration id of a row."""
    if path.is_symlink() or not path.is_file():
        return "not a plain file"
    try:
        table = pq.read_table(path, schema=schema)
        metadata = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - anything pyarrow cannot read back is damaged, whatever it raises
        return "damaged (it does not read back whole)"
    if digest is not None and metadata.get(FINGERPRINT_KEY, b"").decode(errors="replace") != digest:
        return "written by another sweep (its fingerprint differs)"
    if table.num_rows != 1:
        return f"holds {table.num_rows} rows, not one"
    try:
        found = identify(table.select([f.name for f in schema if f.name in CONFIG_COLUMNS]).to_pylist()[0])
    except Exception:  # noqa: BLE001 - a row whose keys do not make a configuration is damaged
        return "damaged (its configuration columns are unreadable)"
    if found != expected_id:
        return "holds another configuration than its name says"
    return None


def set_aside(root: Path, path: Path) -> Path:
    """Move `path` into `root/set_aside/` under a name not taken yet; returns where it went."""
    folder = root / SET_ASIDE
    folder.mkdir(exist_ok=True)
    target = folder / path.name
    n = 1
    while target.exists() or target.is_symlink():
        target = folder / f"{path.name}.{n}"
        n += 1
    path.rename(target)  # rename moves a link itself, never its target
    return target
