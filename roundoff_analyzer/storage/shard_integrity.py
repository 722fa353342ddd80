"""Which shards in a results folder count: those written by this sweep and readable whole.

Every shard carries the digest of the sweep's fingerprint in its Parquet metadata. A shard without it,
with another one, that does not read back, or that holds another configuration than its name says
was not written by this sweep (a foreign sweep, a crash, a full disk): it is moved to `set_aside/`,
never deleted, and its configuration runs again.

The digest in the metadata is no secret, so a shard edited by hand with its metadata kept would still
pass: each shard's content hash (SHA-256 of its bytes) is therefore recorded beside it when it is written
(`shards/<id>.sha256`), and a shard whose bytes do not match it is set aside as well. Shards of a folder
written before hashes were recorded are hashed once, as they are, when the folder is next opened.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..axes.grid import CONFIG_COLUMNS

FINGERPRINT_KEY = b"roundoff.fingerprint"
# The settings a row depends on beyond the sweep's fingerprint (a time limit, the user's code), as JSON: a shard written
# with others is set aside, so that a resume never reuses a row the present command would compute differently.
SETTINGS_KEY = b"roundoff.settings"
SET_ASIDE = "set_aside"


def fingerprint_digest(fingerprint: Any) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()


def settings_json(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def with_fingerprint(table: pa.Table, digest: str | None, settings: dict[str, Any] | None = None) -> pa.Table:
    metadata = {**(table.schema.metadata or {})}
    if digest is not None:
        metadata[FINGERPRINT_KEY] = digest.encode()
    if settings is not None:
        metadata[SETTINGS_KEY] = settings_json(settings).encode()
    return table.replace_schema_metadata(metadata)


def _changed_settings(stored: bytes, settings: dict[str, Any]) -> list[str]:
    """The settings a shard was written with that differ from `settings` (every one, where the record is unreadable)."""
    try:
        found = json.loads(stored)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return sorted(settings)
    return sorted(
        key
        for key in {*found, *settings}
        if json.dumps(found.get(key), sort_keys=True) != json.dumps(settings.get(key), sort_keys=True, default=str)
    )


def shard_problem(
    path: Path,
    schema: pa.Schema,
    digests: Collection[str] | None,
    expected_id: str,
    identify,
    settings: dict[str, Any] | None = None,
) -> str | None:
    """Why the shard at `path` does not count (None when it does): it counts where it carries one of `digests` (this
    sweep's fingerprint in each version's form; None: not checked). `identify(row)` gives the configuration id of a row.
    A shard from a version that did not record its settings counts (its fingerprint says it is this sweep's)."""
    if path.is_symlink() or not path.is_file():
        return "not a plain file"
    try:
        table = pq.read_table(path, schema=schema)
        metadata = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - anything pyarrow cannot read back is damaged, whatever it raises
        return "damaged (it does not read back whole)"
    if digests is not None and metadata.get(FINGERPRINT_KEY, b"").decode(errors="replace") not in digests:
        return "written by another sweep (its fingerprint differs)"
    if settings is not None and SETTINGS_KEY in metadata:
        changed = _changed_settings(metadata[SETTINGS_KEY], settings)
        if changed:
            return f"written with other settings (changed: {', '.join(changed)})"
    if table.num_rows != 1:
        return f"holds {table.num_rows} rows, not one"
    try:
        found = identify(table.select([f.name for f in schema if f.name in CONFIG_COLUMNS]).to_pylist()[0])
    except Exception:  # noqa: BLE001 - a row whose keys do not make a configuration is damaged
        return "damaged (its configuration columns are unreadable)"
    if found != expected_id:
        return "holds another configuration than its name says"
    return None


HASH_SUFFIX = ".sha256"


def hash_path(shard: Path) -> Path:
    return shard.with_suffix(HASH_SUFFIX)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_problem(shard: Path) -> str | None:
    """Why the shard's bytes are not those written (None when they are)."""
    try:
        recorded = hash_path(shard).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return "without the content hash recorded when it was written"
    try:
        data = shard.read_bytes()
    except OSError:
        return "damaged (it does not read back whole)"
    if content_hash(data) != recorded:
        return "changed since it was written (its content hash differs)"
    return None


def vouching_shard(shards: Path) -> Path | None:
    """A shard in `shards` that a sweep wrote, whatever became of its folder's manifest: a plain file whose bytes match
    the content hash recorded beside it and whose Parquet metadata carries a sweep's fingerprint (None when there is
    none, `shards` being no folder or a link)."""
    if shards.is_symlink() or not shards.is_dir():
        return None
    for path in sorted(shards.glob("*.parquet")):
        if path.is_symlink() or not path.is_file() or hash_problem(path) is not None:
            continue
        try:
            metadata = pq.read_schema(path).metadata or {}
        except Exception:  # noqa: BLE001 - a file pyarrow cannot read vouches for nothing, whatever it raises
            continue
        if FINGERPRINT_KEY in metadata:
            return path
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
    hash_path(path).unlink(
        missing_ok=True
    )  # the tool's own record of a shard no longer in use (a link: the link itself)
    return target
