"""The files of a sweep folder and the schemas of its tables: the results (one row per configuration), its shards
(the row with its side tables nested), and the long side tables keyed by the configuration columns."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields

import pyarrow as pa

from ..axes.grid import AXIS_DEFAULTS, CONFIG_COLUMNS, Configuration
from ..measuring.columns import ERROR_METRICS, KEPT_SHARE_COLUMNS, REFERENCE_NORM_COLUMNS, SIG_DIGITS, STEP_COLUMNS
from ..measuring.environment_columns import ENVIRONMENT_COLUMNS
from ..measuring.yardsticks import INTEGER_YARDSTICK_COLUMNS, YARDSTICK_COLUMNS
from .table_schemas import TableSchema

MANIFEST = "manifest.json"
TRAIN_MANIFEST = "train_manifest.json"  # a training's folder (training/folder.py): never a sweep's, even with --force
RESULTS = "results.parquet"
PARAM_ERRORS = "param_errors.parquet"
PROFILE = "profile.parquet"
MODULES = "modules.parquet"
PART_ERRORS = "part_errors.parquet"
TIMING = "timing.parquet"
SHARDS = "shards"
SHARD_HASHES = "shard_hashes"  # in the manifest: every shard's content hash is recorded beside it
# In the manifest: the version of the tables' layout. A folder without one is older and reads through older_tables.py;
# one with a higher version was written by a newer roundoff-analyzer and is refused rather than misread. A change to
# the tables' columns raises it, with its reader of the folders before it in older_tables.py. Version 2 added the
# float64 reference's norms (REFERENCE_NORM_COLUMNS); version 3 the native solver's `backward_mode` and the seed axis
# (`seed` among the configuration's columns: rows of several seeds, which a reader without it would take for one
# configuration written twice).
TABLES_VERSION_KEY, TABLES_VERSION = "tables_version", 3

# The axes' columns, typed as Configuration types its fields (its annotations are strings: `from __future__`).
_ARROW_TYPES = {"str": pa.string(), "int": pa.int64()}
CONFIG_FIELDS = [pa.field(f.name, _ARROW_TYPES[str(f.type)]) for f in dataclass_fields(Configuration)]

RESULT_SCHEMA = pa.schema(
    CONFIG_FIELDS
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
    + [pa.field(name, pa.int64() if name in INTEGER_YARDSTICK_COLUMNS else pa.float64()) for name in YARDSTICK_COLUMNS]
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
    + [pa.field(name, pa.float64()) for name in REFERENCE_NORM_COLUMNS]  # the float64 reference's norms (version 2)
    # The native solver's backward as it ran (version 3): "stages" (through the forward's stored stage graphs) or
    # "states" (each step recomputed from its stored state); null for another library and where unrecorded.
    + [pa.field("backward_mode", pa.string())]
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
    pa.field("local_rel_err_normal_range", pa.float64()),  # over the calls whose values reach the normal range
    pa.field("n_calls_below_normal", pa.int64()),  # calls whose every nonzero value lay below the smallest normal
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
# Per setup the answer compares and round of the timing pass run after the sweep (execution/timing_pass.py): forward +
# backward timed again, the setups interleaved (A B C A B C ...), the load average as each round began.
TIMING_FIELDS = [
    pa.field("repeat", pa.int64()),
    pa.field("time_forward_s", pa.float64()),
    pa.field("time_backward_s", pa.float64()),
    pa.field("peak_memory_bytes", pa.int64()),  # where the device measures it in a timed run (CUDA); else null
    pa.field("load_average_1m", pa.float64()),  # os.getloadavg()'s first as the round began; null where unknown
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
    pa.schema(CONFIG_FIELDS + PARAM_FIELDS),
    (*_KEYS, *(f.name for f in PARAM_FIELDS)),
    (*_KEYS, "parameter"),
)
PROFILE_TABLE = TableSchema(
    "a range profile table",
    pa.schema(CONFIG_FIELDS + PROFILE_FIELDS),
    (*_KEYS, *(f.name for f in PROFILE_FIELDS)),
    (*_KEYS, "phase", "step"),
)
MODULES_TABLE = TableSchema(
    "a per-module table",
    pa.schema(CONFIG_FIELDS + MODULE_FIELDS),
    (*_KEYS, "module", "phase", "max_abs", "local_rel_err", "first_nonfinite_step"),
    (*_KEYS, "module", "phase"),
)
TIMING_TABLE = TableSchema(
    "a timing table",
    pa.schema(CONFIG_FIELDS + TIMING_FIELDS),
    (*_KEYS, "repeat", "time_forward_s", "time_backward_s"),
    (*_KEYS, "repeat"),
)
PART_ERRORS_TABLE = TableSchema(
    "a per-part errors table",
    pa.schema(CONFIG_FIELDS + PART_FIELDS),
    (*_KEYS, *(f.name for f in PART_FIELDS)),
    (*_KEYS, "metric", "part"),
)
