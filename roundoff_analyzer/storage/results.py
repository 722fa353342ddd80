"""Results on disk: a manifest, one Parquet shard per finished configuration, and the combined tables.

A shard holds one configuration's row with its per-parameter errors and range profile nested in
it, so that writing it (temporary file, then rename) is one atomic step. The combined tables are
always rebuilt from the shards: `results.parquet` (one row per configuration),
`param_errors.parquet` and `profile.parquet` (long tables keyed by the configuration columns). Their schemas are
result_schemas.py's, what a sweep refuses to write into folder_refusals.py's, and how older tables read
older_tables.py's.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..axes.grid import CONFIG_COLUMNS, Configuration
from ..core.environment import os_error_line
from ..core.errors import InputError
from ..core.safe_files import ABANDONED_SHARD_TEMPORARY_S, atomic_write, refuse_links, remove_abandoned_temporaries
from ..measuring.rows import Measurement
from ..measuring.yardstick_files import YARDSTICKS
from ..planning.fingerprint import differing_keys, every_version, same_sweep
from .folder_kind import refuse_unwritable
from .folder_lock import FolderLock
from .folder_refusals import (
    WRITTEN_ENTRIES,
    manifest_json,
    refuse_file_path,
    refuse_foreign_sweep_folder,
    refuse_other_kind,
)
from .older_tables import refuse_newer_tables, swept_seed, with_axis_defaults, with_span, with_tableau
from .result_schemas import (
    CONFIG_FIELDS,
    MANIFEST,
    MODULE_FIELDS,
    MODULES,
    PARAM_ERRORS,
    PARAM_FIELDS,
    PART_ERRORS,
    PART_FIELDS,
    PROFILE,
    PROFILE_FIELDS,
    RESULT_SCHEMA,
    RESULTS,
    RESULTS_TABLE,
    SHARD_HASHES,
    SHARD_SCHEMA,
    SHARDS,
    TABLES_VERSION,
    TABLES_VERSION_KEY,
    TIMING,
    TIMING_FIELDS,
    TRAIN_MANIFEST,
)
from .shard_integrity import (
    HASH_SUFFIX,
    SET_ASIDE,
    content_hash,
    fingerprint_digest,
    hash_path,
    hash_problem,
    set_aside,
    shard_problem,
    with_fingerprint,
)
from .table_schemas import TableSchema, read_table

if TYPE_CHECKING:  # pandas is the parent's: a worker process writes shards with pyarrow alone
    import pandas as pd


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda file: file.write(data))


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    atomic_write(path, lambda file: pq.write_table(table, file))


class ResultStore:
    def __init__(self, root: Path, fingerprint: Any = None, settings: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.shards = self.root / SHARDS
        # The digest every shard written here carries, and those a shard reused may carry (None: not checked).
        self.digest, self.accepted = _digests(fingerprint)
        # What else the rows depend on (planning/manifest.py's row_settings); a shard written with others is set aside.
        self.settings = settings
        self.lock = FolderLock(self.root)
        self.before_write: Callable[[], None] = lambda: None  # a worker's: end the process if its sweep is gone
        self.set_aside: list[tuple[Path, str]] = []  # (where a shard went, why) since this store was made
        self.manifest_note: str | None = None  # a damaged manifest found when the folder was opened, in a line
        self._verified: dict[str, tuple[int, int]] = {}  # shard id -> (mtime_ns, size) when it was last read whole

    def check(self, fingerprint: dict[str, Any], force: bool = False) -> None:
        """Refuse a file where the folder should be, and a folder holding a different sweep unless `force`; writes
        nothing, so that bad input is found before anything is printed."""
        refuse_file_path(self.root)
        refuse_unwritable(self.root)
        refuse_other_kind(self.root, "a sweep", TRAIN_MANIFEST, "a training")
        refuse_foreign_sweep_folder(self.root)
        refuse_links(self.root, WRITTEN_ENTRIES)
        existing = self.read_manifest() if self.root.is_dir() else None
        if existing is not None and not force:
            _refuse_other_sweep(self.root, existing.get("fingerprint"), fingerprint)

    def open(self, manifest: dict[str, Any], force: bool = False) -> None:
        """Create the folder, or reopen it for the same sweep; a different sweep there is refused unless `force`.

        The folder is locked until `close()` (or this process's end): a second sweep on it is refused."""
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"output folder '{self.root}' is a file; give --out a folder path")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the output folder: {os_error_line(exc)}") from None
        refuse_links(self.root, WRITTEN_ENTRIES)
        refuse_other_kind(self.root, "a sweep", TRAIN_MANIFEST, "a training")
        refuse_foreign_sweep_folder(self.root)
        try:
            self.lock.acquire()
        except OSError as exc:
            raise InputError(f"cannot write in the output folder: {os_error_line(exc)}") from None
        try:
            self._open_locked(manifest, force)
        except OSError as exc:
            self.close()
            raise InputError(f"cannot write in the output folder: {os_error_line(exc)}") from None
        except BaseException:
            self.close()
            raise

    def _open_locked(self, manifest: dict[str, Any], force: bool) -> None:
        self.digest, self.accepted = _digests(manifest["fingerprint"])
        self.settings = manifest.get("settings")
        remove_abandoned_temporaries(self.root)
        remove_abandoned_temporaries(self.shards, min_age_s=ABANDONED_SHARD_TEMPORARY_S)
        found_manifest, damage = manifest_json(self.root)
        existing = found_manifest if isinstance(found_manifest, dict) else None
        if damage is not None:
            self.manifest_note = (
                f"{MANIFEST} was damaged ({damage}): written again from this command; the shards carry their sweep's "
                "fingerprint, so this sweep's are reused and any other is set aside"
            )
        same = existing is not None and same_sweep(existing.get("fingerprint"), manifest["fingerprint"])
        if existing is not None and not same and not force:
            _refuse_other_sweep(self.root, existing.get("fingerprint"), manifest["fingerprint"])
        if existing is not None and not same and self.shards.is_dir():
            for shard in [
                *self.shards.glob("*.parquet"),
                *self.shards.glob(f"*{HASH_SUFFIX}"),
                *(self.root / YARDSTICKS).glob("*.pt"),
            ]:
                shard.unlink()  # unlink removes a link itself; `shards` and `yardsticks` are no links (refused above)
        if existing is not None and not same:
            (self.root / TIMING).unlink(missing_ok=True)  # another sweep's setups, timed
        self.shards.mkdir(exist_ok=True)
        if existing is not None and same:
            manifest = {**manifest, "created_at": existing.get("created_at", manifest.get("created_at"))}
            if not existing.get(SHARD_HASHES):
                self._hash_unhashed_shards()
        self.write_manifest(manifest)

    def _hash_unhashed_shards(self) -> None:
        """A folder from before content hashes: its shards are hashed as they are, once;
        from then on they must match."""
        for shard in self.shards.glob("*.parquet"):
            if shard.is_file() and not shard.is_symlink() and not hash_path(shard).exists():
                atomic_write_bytes(hash_path(shard), content_hash(shard.read_bytes()).encode())

    def close(self) -> None:
        self.lock.release()

    def drop_yardsticks(self) -> None:
        """Remove the yardsticks' saved pieces, once every configuration is measured: only a resume reads them, and
        for a large model the noise's per-batch gradients alone are megabytes to gigabytes."""
        shutil.rmtree(self.root / YARDSTICKS, ignore_errors=True)  # a link there was refused when the folder opened

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest; None where there is none or it is damaged (the shards say what they are)."""
        manifest, _ = manifest_json(self.root)
        return manifest if isinstance(manifest, dict) else None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Every manifest written from now on says that each shard's content hash is recorded beside it, and which
        version of the tables' layout the folder holds."""
        atomic_write_bytes(
            self.root / MANIFEST,
            json.dumps(
                {**manifest, SHARD_HASHES: True, TABLES_VERSION_KEY: TABLES_VERSION}, indent=2, default=str
            ).encode(),
        )

    def completed(self) -> set[str]:
        """The configurations whose shard this sweep wrote and that reads back whole; any other shard is set aside."""
        if not self.shards.is_dir() or self.shards.is_symlink():
            return set()
        done = set()
        for path in sorted(self.shards.glob("*.parquet")):
            config_id = path.name[: -len(".parquet")]
            try:
                stat = path.lstat()
            except FileNotFoundError:
                continue
            if self._verified.get(config_id) == (stat.st_mtime_ns, stat.st_size):
                done.add(config_id)
                continue
            problem = shard_problem(
                path, SHARD_SCHEMA, self.accepted, config_id, lambda key: Configuration(**key).id, self.settings
            )
            problem = problem or hash_problem(path)
            if problem is None:
                self._verified[config_id] = (stat.st_mtime_ns, stat.st_size)
                done.add(config_id)
            else:
                self.set_aside.append((set_aside(self.root, path), problem))
        return done

    def set_aside_note(self) -> str | None:
        """One line on the shards set aside, or None."""
        if not self.set_aside:
            return None
        reasons: dict[str, int] = {}
        for _, reason in self.set_aside:
            reasons[reason] = reasons.get(reason, 0) + 1
        described = "; ".join(f"{n} {reason}" for reason, n in reasons.items())
        return (
            f"set aside {len(self.set_aside)} shard(s) into {self.root / SET_ASIDE} ({described}); "
            "their configurations run again"
        )

    def write(self, config: Configuration, measurement: Measurement) -> None:
        row = {
            **measurement.row,
            "parameter_errors": measurement.parameter_errors,
            "profile": measurement.profile,
            "modules": measurement.modules,
            "parts": measurement.parts,
        }
        unknown = sorted(set(row) - set(SHARD_SCHEMA.names))
        if unknown:
            # from_pylist would drop them silently: a column added to the rows but not to the schema would vanish.
            raise ValueError(f"the row has columns the results schema does not: {', '.join(unknown)}")
        table = with_fingerprint(pa.Table.from_pylist([row], schema=SHARD_SCHEMA), self.digest, self.settings)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
        path = self.shards / f"{config.id}.parquet"
        # Asked once the shard is made, just before it is written: a sweep that died while it was being made (its
        # profile serialised) gets nothing written after its death.
        self.before_write()
        # The hash first: a shard never stands without it, and a hash left without its shard (a
        # crash between) is overwritten.
        atomic_write_bytes(hash_path(path), content_hash(data).encode())
        atomic_write_bytes(path, data)
        # Written whole by this very store: `completed` need not read it back to believe it.
        stat = path.lstat()
        self._verified[config.id] = (stat.st_mtime_ns, stat.st_size)

    def write_timing(self, rows: list[dict[str, Any]], seconds: float, sweep_seconds: float) -> None:
        """The timing pass's rows (`TIMING_FIELDS` and the configuration's columns) as timing.parquet, and in the
        manifest its wall time (`timing_pass_s`) and the sweep's that its budget was set from (`timing_sweep_s`: from
        planning to the tables); no rows: no table (a stale one goes)."""
        if rows:
            schema = pa.schema(CONFIG_FIELDS + TIMING_FIELDS)
            atomic_write_parquet(pa.Table.from_pylist(rows, schema=schema), self.root / TIMING)
        else:
            (self.root / TIMING).unlink(missing_ok=True)
        manifest = self.read_manifest()
        if manifest is not None:
            timed = {"timing_pass_s": seconds, "timing_sweep_s": sweep_seconds} if rows else {}
            kept = {k: v for k, v in manifest.items() if k not in ("timing_pass_s", "timing_sweep_s")}
            self.write_manifest({**kept, **timed})

    def read_row(self, config: Configuration) -> dict[str, Any]:
        """One finished configuration's row, as `measure` produced it (for progress shown
        from shards written elsewhere)."""
        return pq.read_table(self.shards / f"{config.id}.parquet", columns=RESULT_SCHEMA.names).to_pylist()[0]

    def combine(self, order: Iterable[Configuration]) -> pd.DataFrame:
        """Rebuild the three combined tables from the shards, in grid order."""
        done = self.completed()
        tables = [pq.read_table(self.shards / f"{c.id}.parquet", schema=SHARD_SCHEMA) for c in order if c.id in done]
        combined = pa.concat_tables(tables) if tables else SHARD_SCHEMA.empty_table()
        atomic_write_parquet(combined.select(RESULT_SCHEMA.names), self.root / RESULTS)
        for column, fields, name in (
            ("parameter_errors", PARAM_FIELDS, PARAM_ERRORS),
            ("profile", PROFILE_FIELDS, PROFILE),
        ):
            atomic_write_parquet(_explode(combined, column, fields), self.root / name)
        # Only a sweep that has them writes these: without, no file (and a stale one goes).
        for column, fields, name in (("modules", MODULE_FIELDS, MODULES), ("parts", PART_FIELDS, PART_ERRORS)):
            rows = _explode(combined, column, fields)
            if rows.num_rows:
                atomic_write_parquet(rows, self.root / name)
            elif (self.root / name).is_file():
                (self.root / name).unlink()
        return with_tableau(combined.select(RESULT_SCHEMA.names).to_pandas())


def _digests(fingerprint: Any) -> tuple[str | None, frozenset[str] | None]:
    """The digest of `fingerprint` (None: none given), and those of every version's form of it: a folder resumed from
    an earlier version holds shards carrying the digest of that version's form (planning/fingerprint.py)."""
    if fingerprint is None:
        return None, None
    return fingerprint_digest(fingerprint), frozenset(fingerprint_digest(form) for form in every_version(fingerprint))


def _refuse_other_sweep(root: Path, found: Any, wanted: dict[str, Any]) -> None:
    """Refuse a folder whose manifest holds the fingerprint `found` where `wanted` is another sweep's."""
    if same_sweep(found, wanted):
        return
    raise InputError(
        f"output folder '{root}' holds a different sweep "
        f"(differs in: {', '.join(differing_keys(found, wanted)) or 'everything'}); "
        "use another --out, or --force to replace it"
    )


def _explode(table: pa.Table, column: str, fields: list[pa.Field]) -> pa.Table:
    rows: list[dict[str, Any]] = []
    keys = table.select(list(CONFIG_COLUMNS)).to_pylist()
    for key, nested in zip(keys, table.column(column).to_pylist()):
        rows.extend({**key, **item} for item in nested or [])
    return pa.Table.from_pylist(rows, schema=pa.schema(CONFIG_FIELDS + fields))


def load_results(path: str | Path) -> pd.DataFrame:
    """The results table of a sweep folder, or of a Parquet file given directly."""
    path = Path(path)
    target = path / RESULTS if path.is_dir() else path
    if not target.is_file():
        raise InputError(f"no results at '{path}': expected a sweep folder holding {RESULTS}, or a .parquet file")
    if path.is_dir():
        refuse_newer_tables(path / MANIFEST)
    return read_parquet(target)


def read_parquet(path: Path, spec: TableSchema = RESULTS_TABLE) -> pd.DataFrame:
    """A table of a sweep folder, checked against its schema; an unreadable or foreign one is bad input, in one line."""
    table = with_axis_defaults(read_table(path, spec), swept_seed(path.parent))
    return with_span(with_tableau(table)) if spec is RESULTS_TABLE else table
