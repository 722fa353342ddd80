"""The closed sets of a run's outcome: its `status` and, for a failure, its `failure_class`. String-valued, so a
table, a manifest and a folder written before these types read the same."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


class FailureClass(StrEnum):
    OVERFLOW = "overflow"
    UNDERFLOW = "underflow"
    SCALER_EXHAUSTED = "scaler_exhausted"
    DTYPE_MISMATCH = "dtype_mismatch"
    TORCHSCRIPT_DTYPE_MISMATCH = "torchscript_dtype_mismatch"
    GRADSCALER_FP16_UNSCALE = "gradscaler_fp16_unscale"
    UNSUPPORTED = "unsupported"
    OOM = "oom"
    TIMEOUT = "timeout"
    ERROR = "error"
    STEP_BUDGET_EXHAUSTED = "step_budget_exhausted"
    STEP_SIZE_UNDERFLOW = "step_size_underflow"
