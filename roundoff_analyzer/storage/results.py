"""Results on disk: a manifest, one Parquet shard per finished configuration, and the combined tables.

A shard holds one configuration's row with its per-parameter errors and range profile nested in
it, so that writing it (temporary file, then rename) is one atomic step. The combined tables are
always rebuilt from the shards: `results.parquet` (one row per configuration),
`param_errors.parquet` and `profile.parquet` (long tables keyed by the configuration columns).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..axes.grid import AXIS_DEFAULTS, CONFIG_COLUMNS, Configuration
from ..core.environment import os_error_line
from ..core.errors import InputError
from ..core.json_files import parse_json
from ..core.safe_files import ABANDONED_SHARD_TEMPORARY_S, atomic_write, refuse_links, remove_abandoned_temporaries
from ..measuring.columns import ERROR_METRICS, KEPT_SHARE_COLUMNS, SIG_DIGITS, STEP_COLUMNS
from ..measuring.environment_columns import ENVIRONMENT_COLUMNS
from ..measuring.rows import Measurement
from ..measuring.yardstick_files import YARDSTICKS
from ..measuring.yardsticks import CONTEXT_COLUMNS, INTEGER_CONTEXT_COLUMNS
from .folder_kind import refuse_foreign_folder, refuse_unwritable
from .folder_lock import LOCK, FolderLock
from .shard_integrity import (
    HASH_SUFFIX,
    SET_ASIDE,
    content_hash,
    fingerprint_digest,
    hash_path,
    hash_problem,
    set_aside,
    shard_problem,
    vouching_shard,
    with_fingerprint,
)
from .table_schemas import TableSchema, read_table

if TYPE_CHECKING:  # pandas is the parent's: a worker process writes shards with pyarrow alone
    import pandas as pd

MANIFEST = "manifest.json"
TRAIN_MANIFEST = "train_manifest.json"  # a training's folder (training/folder.py): never a sweep's, even with --force
RESULTS = "results.parquet"
PARAM_ERRORS = "param_errors.parquet"
PROFILE = "profile.parquet"
MODULES = "modules.parquet"
PART_ERRORS = "part_errors.parquet"
SHARDS = "shards"
SHARD_HASHES = "shard_hashes"  # in the manifest: every shard's content hash is recorded beside it

# The axes' columns, typed as Configuration types its fields (its annotations are strings: `from __future__`).
_ARROW_TYPES = {"str": pa.string(), "int": pa.int64()}
_CONFIG_FIELDS = [pa.field(f.name, _ARROW_TYPES[str(f.type)]) for f in dataclass_fields(Configuration)]

RESULT_SCHEMA = pa.schema(
    _CONFIG_FIELDS
    + [
        pa.field(name, pa.string())
        for name in ("status", "failure_class", "failure_type", "failure_message", "skip_reason")
    ]
    + [pa.field(f"{name}{suffix}", pa.float64()) for name in ERROR_METRICS for suffix in ("", "_over_u", "_spread")]
    + [
        pa.field("unit_roundoff", pa.float64()),
        pa.field("dtype_max", pa.float64()),
        pa.field("overflow_step", pa.int64()),
        pa.field("overflow_phase", pa.string()),
        pa.field("max_abs_adjoint", pa.float64()),
        pa.field("reference_max_abs_adjoint", pa.float64()),
        pa.field("adjoint_zero_share", pa.float64()),
        pa.field("reference_adjoint_zero_share", pa.float64()),
        pa.field("final_scale", pa.float64()),
        pa.field("scale_retries", pa.int64()),
        pa.field("deterministic", pa.bool_()),
        pa.field("n_repeats", pa.int64()),
        pa.field("time_forward_s", pa.float64()),
        pa.field("time_backward_s", pa.float64()),
        pa.field("peak_memory_bytes", pa.int64()),
        pa.field("fp8_scaling", pa.bool_()),
        *(pa.field(name, pa.float64()) for name in SIG_DIGITS),
    ]
    + [pa.field(name, pa.int64() if name in INTEGER_CONTEXT_COLUMNS else pa.float64()) for name in CONTEXT_COLUMNS]
    + [pa.field(name, pa.float64() if name in ("rtol", "atol") else pa.int64()) for name in STEP_COLUMNS]
    + [
        pa.field("train_iteration", pa.int64())
    ]  # of the row's checkpoint, from the file beside its weights (null: unknown)
    + [pa.field("tableau", pa.string())]  # the rule the library ran for the row's method (rk4: rk4_classical or rk4_38)
    # The span of the model's (first) solve: [0, 1] for a trajectory problem, the step's own times otherwise.
    + [pa.field("t0", pa.float64()), pa.field("t1", pa.float64())]
    + [
        pa.field(name, pa.string()) for name in ENVIRONMENT_COLUMNS
    ]  # where the row was measured (null: before they were recorded)
    + [pa.field(name, pa.float64()) for name in KEPT_SHARE_COLUMNS]  # where modules were kept in float32
)

PARAM_FIELDS = [
    pa.field("parameter", pa.string()),
    pa.field("grad_rel_err", pa.float64()),
    pa.field("grad_rel_err_over_u", pa.float64()),
]
PROFILE_FIELDS = [
    pa.field("phase", pa.string()),
    pa.field("step", pa.int64()),
    pa.field("max_abs", pa.float64()),
    pa.field("reference_max_abs", pa.float64()),
    pa.field("max_abs_low", pa.float64()),
    pa.field("zero_share", pa.float64()),
    pa.field("reference_zero_share", pa.float64()),
    pa.field("finite", pa.bool_()),
]
# Per module of the vector field and phase (measuring/module_hooks.py), where the sweep was asked for them.
MODULE_FIELDS = [
    pa.field("module", pa.string()),
    pa.field("phase", pa.string()),
    pa.field("n_calls", pa.int64()),
    pa.field("kept_float32", pa.bool_()),
    pa.field("max_abs", pa.float64()),
    pa.field("max_abs_over_dtype_max", pa.float64()),
    pa.field("min_abs", pa.float64()),
    pa.field("below_normal_share", pa.float64()),
    pa.field("local_rel_err", pa.float64()),
    pa.field("first_nonfinite_step", pa.int64()),
    pa.field("first_nonfinite_call", pa.int64()),
    pa.field("produced_nonfinite", pa.bool_()),
    pa.field("n_calls_outside", pa.int64()),  # operations on its weights outside its own call, among n_calls
    pa.field("n_calls_unused", pa.int64()),  # forward calls whose output the loss does not depend on
    pa.field("measurement", pa.string()),  # "complete", or which recomputations failed and why
]
# Per part, where a quantity has several (measuring/rows.py, part_error_rows): the parameter gradient of each top-level
# submodule, the solution and final state of each part of a tuple state.
PART_FIELDS = [
    pa.field("metric", pa.string()),
    pa.field("part", pa.string()),
    pa.field("rel_err", pa.float64()),
    pa.field("rel_err_over_u", pa.float64()),
]
SHARD_SCHEMA = (
    RESULT_SCHEMA.append(pa.field("parameter_errors", pa.list_(pa.struct(PARAM_FIELDS))))
    .append(pa.field("profile", pa.list_(pa.struct(PROFILE_FIELDS))))
    .append(pa.field("modules", pa.list_(pa.struct(MODULE_FIELDS))))
    .append(pa.field("parts", pa.list_(pa.struct(PART_FIELDS))))
)

# What every version of the tables held; columns added later may be missing from an older folder's.
_KEYS = tuple(c for c in CONFIG_COLUMNS if c not in AXIS_DEFAULTS)
# The first versions wrote every results column up to the peak memory (reports/baselines/otflow-ci holds such a table).
_FIRST_RESULT_COLUMNS = tuple(
    c for c in RESULT_SCHEMA.names[: RESULT_SCHEMA.get_field_index("fp8_scaling")] if c not in AXIS_DEFAULTS
)
RESULTS_TABLE = TableSchema("a results table", RESULT_SCHEMA, _FIRST_RESULT_COLUMNS, (*_KEYS, "status"))
PARAM_ERRORS_TABLE = TableSchema(
    "a parameter errors table",
    pa.schema(_CONFIG_FIELDS + PARAM_FIELDS),
    (*_KEYS, *(f.name for f in PARAM_FIELDS)),
    (*_KEYS, "parameter"),
)
PROFILE_TABLE = TableSchema(
    "a range profile table",
    pa.schema(_CONFIG_FIELDS + PROFILE_FIELDS),
    (*_KEYS, *(f.name for f in PROFILE_FIELDS)),
    (*_KEYS, "phase", "step"),
)
MODULES_TABLE = TableSchema(
    "a per-module table",
    pa.schema(_CONFIG_FIELDS + MODULE_FIELDS),
    (*_KEYS, "module", "phase", "max_abs", "local_rel_err", "first_nonfinite_step"),
    (*_KEYS, "module", "phase"),
)
PART_ERRORS_TABLE = TableSchema(
    "a per-part errors table",
    pa.schema(_CONFIG_FIELDS + PART_FIELDS),
    (*_KEYS, *(f.name for f in PART_FIELDS)),
    (*_KEYS, "metric", "part"),
)


# Everything a sweep writes or deletes in its folder: none of these may be a link out of it.
WRITTEN_ENTRIES = (
    MANIFEST,
    RESULTS,
    PARAM_ERRORS,
    PROFILE,
    MODULES,
    PART_ERRORS,
    SHARDS,
    SET_ASIDE,
    LOCK,
    YARDSTICKS,
    "slurm",
    "figures",
    "report.md",
)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda file: file.write(data))


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    atomic_write(path, lambda file: pq.write_table(table, file))


def refuse_other_kind(root: Path, kind: str, other_manifest: str, other_kind: str) -> None:
    """Refuse a folder holding another kind's results, --force or not: --force replaces
    only a folder of its own kind."""
    if (Path(root) / other_manifest).is_file():
        raise InputError(
            f"output folder '{root}' holds {other_kind} ({other_manifest}), not {kind}; --force replaces only "
            f"{kind}: use another --out"
        )


def refuse_file_path(root: Path) -> None:
    """Refuse an output folder path that is a file, or lies under one."""
    if root.exists() and not root.is_dir():
        raise InputError(f"output folder '{root}' is a file; give --out a folder path")
    blocking = next((p for p in root.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise InputError(
            f"cannot create the output folder '{root}': a part of the path is a file, not a folder ({blocking})"
        )


# What a sweep may have written before its manifest (a lock, an empty shards folder), or beside a manifest that no
# longer reads (the shards and the tables say what they are): a folder holding only these is taken as one the sweep
# created. Not the report and figures/: those names are also a user's own, unless a shard vouches for the folder.
_BEFORE_MANIFEST = (LOCK, SHARDS, SET_ASIDE, YARDSTICKS, "slurm", RESULTS, PARAM_ERRORS, PROFILE)


def _manifest_json(root: Path) -> tuple[object, str | None]:
    """The folder's `manifest.json` as JSON (None where there is none or it does not parse), and why it is no manifest
    (None where it holds an object, or is missing)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None, None
    try:
        manifest = parse_json(path.read_text())
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except ValueError:
        return None, "not JSON"
    except OSError as exc:
        return None, f"unreadable: {os_error_line(exc)}"
    if not isinstance(manifest, dict):
        return manifest, f"a JSON {type(manifest).__name__}, not an object"
    return manifest, None


def refuse_foreign_sweep_folder(root: Path) -> None:
    """Refuse a non-empty folder that is no sweep's (see storage/folder_kind.py); a `manifest.json` of another tool
    counts as the user's file. A folder whose manifest is missing or damaged is a sweep's when one of its shards vouches
    for it (its bytes match their recorded content hash and carry a sweep's fingerprint): the sweep writes the manifest
    again, from the command, and the shards' fingerprints say which of them are that sweep's."""
    manifest, damage = _manifest_json(root)
    if isinstance(manifest, dict):
        ours = manifest.get("tool") == "roundoff-analyzer"
        refuse_foreign_folder(root, "a sweep", lambda _: ours, _BEFORE_MANIFEST)
        return
    if vouching_shard(Path(root) / SHARDS) is not None:
        return
    refuse_foreign_folder(
        root,
        "a sweep",
        lambda _: False,
        (*_BEFORE_MANIFEST, MANIFEST),
        unknown_because=None
        if damage is None
        else f"has a damaged {MANIFEST} ({damage}) and no shard whose bytes match their recorded content hash",
    )


class ResultStore:
    def __init__(self, root: Path, fingerprint: Any = None, settings: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.shards = self.root / SHARDS
        # The digest every shard written here carries, and every shard reused must carry (None: not checked).
        self.digest = None if fingerprint is None else fingerprint_digest(fingerprint)
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
        found = existing.get("fingerprint") if existing is not None else None
        if existing is not None and found != fingerprint and not force:
            found = found if isinstance(found, dict) else {}
            differs = sorted(k for k in fingerprint if found.get(k) != fingerprint[k])
            raise InputError(
                f"output folder '{self.root}' holds a different sweep "
                f"(differs in: {', '.join(differs) or 'everything'}); "
                "use another --out, or --force to replace it"
            )

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
        self.digest = fingerprint_digest(manifest["fingerprint"])
        self.settings = manifest.get("settings")
        remove_abandoned_temporaries(self.root)
        remove_abandoned_temporaries(self.shards, min_age_s=ABANDONED_SHARD_TEMPORARY_S)
        found_manifest, damage = _manifest_json(self.root)
        existing = found_manifest if isinstance(found_manifest, dict) else None
        if damage is not None:
            self.manifest_note = (
                f"{MANIFEST} was damaged ({damage}): written again from this command; the shards carry their sweep's "
                "fingerprint, so this sweep's are reused and any other is set aside"
            )
        found = existing.get("fingerprint") if existing is not None else None
        if existing is not None and found != manifest["fingerprint"] and not force:
            found = found if isinstance(found, dict) else {}
            differs = sorted(k for k in manifest["fingerprint"] if found.get(k) != manifest["fingerprint"][k])
            raise InputError(
                f"output folder '{self.root}' holds a different sweep "
                f"(differs in: {', '.join(differs) or 'everything'}); "
                "use another --out, or --force to replace it"
            )
        if existing is not None and found != manifest["fingerprint"] and self.shards.is_dir():
            for shard in [
                *self.shards.glob("*.parquet"),
                *self.shards.glob(f"*{HASH_SUFFIX}"),
                *(self.root / YARDSTICKS).glob("*.pt"),
            ]:
                shard.unlink()  # unlink removes a link itself; `shards` and `yardsticks` are no links (refused above)
        self.shards.mkdir(exist_ok=True)
        if existing is not None and found == manifest["fingerprint"]:
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
        manifest, _ = _manifest_json(self.root)
        return manifest if isinstance(manifest, dict) else None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Every manifest written from now on says that each shard's content hash is recorded beside it."""
        atomic_write_bytes(
            self.root / MANIFEST, json.dumps({**manifest, SHARD_HASHES: True}, indent=2, default=str).encode()
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
                path, SHARD_SCHEMA, self.digest, config_id, lambda key: Configuration(**key).id, self.settings
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
        self.before_write()
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
        # The hash first: a shard never stands without it, and a hash left without its shard (a
        # crash between) is overwritten.
        atomic_write_bytes(hash_path(path), content_hash(data).encode())
        atomic_write_bytes(path, data)

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


def _explode(table: pa.Table, column: str, fields: list[pa.Field]) -> pa.Table:
    rows: list[dict[str, Any]] = []
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


def read_parquet(path: Path, spec: TableSchema = RESULTS_TABLE) -> pd.DataFrame:
    """A table of a sweep folder, checked against its schema; an unreadable or foreign one is bad input, in one line."""
    table = with_axis_defaults(read_table(path, spec))
    return with_span(with_tableau(table)) if spec is RESULTS_TABLE else table


def with_span(table: pd.DataFrame) -> pd.DataFrame:
    """Rows written before the span was recorded: every model then was one solve on [0, 1]."""
    if "dtype" not in table.columns or all(c in table.columns and table[c].notna().all() for c in ("t0", "t1")):
        return table
    table = table.copy()
    for column, value in (("t0", 0.0), ("t1", 1.0)):
        table[column] = table[column].fillna(value) if column in table.columns else value
    return table


# Before rows recorded their tableau each library ran its own rule under a method name; only rk4 differed.
_RK4_BEFORE_RECORDED = {"torchdiffeq": "rk4_38", "torchdiffeq-adjoint": "rk4_38"}


def with_tableau(table: pd.DataFrame) -> pd.DataFrame:
    """Rows written before the `tableau` column (or shards from before it): the rule their library ran, as it ran it
    then (torchdiffeq's rk4 the 3/8 rule, every other library's the classical one). Skipped rows keep none."""
    if "method" not in table.columns or "library" not in table.columns:
        return table
    if "tableau" in table.columns and not table["tableau"].isna().any():
        return table
    import pandas as pd

    table = table.copy()
    recorded = table["tableau"] if "tableau" in table.columns else pd.Series(None, index=table.index, dtype=object)
    ran = table["status"] != "skipped" if "status" in table.columns else pd.Series(True, index=table.index)
    then = [
        (_RK4_BEFORE_RECORDED.get(library, "rk4_classical") if method == "rk4" else method) if r else None
        for library, method, r in zip(table["library"], table["method"], ran)
    ]
    table["tableau"] = recorded.where(recorded.notna(), pd.Series(then, index=table.index, dtype=object))
    return table


def with_axis_defaults(table: pd.DataFrame) -> pd.DataFrame:
    """Tables written before the arithmetic axis: every run was hardware arithmetic rounding to nearest; before the
    checkpoint axis (or in shards from before it), every run had the sweep's single set of weights."""
    missing = [c for c in AXIS_DEFAULTS if c not in table.columns]
    if "dtype" not in table.columns:
        return table
    unset = [c for c in AXIS_DEFAULTS if c in table.columns and table[c].isna().any()]
    if not missing and not unset:
        return table
    table = table.copy()
    for column in unset:
        table[column] = table[column].fillna(AXIS_DEFAULTS[column])
    for offset, column in enumerate(missing, start=1):
        table.insert(
            list(table.columns).index("mode") + offset if "mode" in table.columns else len(table.columns),
            column,
            AXIS_DEFAULTS[column],
        )
    return table
