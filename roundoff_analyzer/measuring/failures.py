"""Failure classes, the `failure_class` column's values: what failed and why, from the exception or from the numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..core.errors import ScalerExhausted, StepBudgetExhausted
from .outcomes import FailureClass

OVERFLOW = FailureClass.OVERFLOW
UNDERFLOW = FailureClass.UNDERFLOW
SCALER_EXHAUSTED = FailureClass.SCALER_EXHAUSTED
DTYPE_MISMATCH = FailureClass.DTYPE_MISMATCH
TORCHSCRIPT_DTYPE_MISMATCH = FailureClass.TORCHSCRIPT_DTYPE_MISMATCH
GRADSCALER_FP16_UNSCALE = FailureClass.GRADSCALER_FP16_UNSCALE
UNSUPPORTED = FailureClass.UNSUPPORTED
OOM = FailureClass.OOM
TIMEOUT = FailureClass.TIMEOUT
ERROR = FailureClass.ERROR
STEP_BUDGET_EXHAUSTED = FailureClass.STEP_BUDGET_EXHAUSTED
STEP_SIZE_UNDERFLOW = FailureClass.STEP_SIZE_UNDERFLOW

FAILURE_CLASSES = tuple(FailureClass)


class ConfigurationTimeout(Exception):
    """One configuration ran past its time limit."""


class ReferenceFailed(RuntimeError):
    """The float64 reference of a configuration failed: its configurations have nothing to compare with and are
    skipped with the reference's failure (measure.py), never judged as failures of the low dtype."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"the float64 reference failed ({failure.failure_class}): {failure.message}")
        self.failure = failure


@dataclass(frozen=True)
class Failure:
    failure_class: str
    failure_type: str
    message: str
    step: int | None = None
    phase: str | None = None  # "forward" or "backward", where a step is known
    final_scale: float | None = None
    retries: int | None = None


_DTYPE_MISMATCH = re.compile(
    r"same dtype|expected scalar type|expected .* dtype .* but (got|found)|dtype mismatch", re.I
)
_TORCHSCRIPT = "TorchScript interpreter"
# An adaptive solver whose step size shrank until t + dt == t: torchdiffeq asserts "underflow in dt", torchode stops
# with REACHED_DT_MIN.
_STEP_SIZE_UNDERFLOW = re.compile(r"underflow in dt|REACHED_DT_MIN", re.I)
_UNSUPPORTED = re.compile(
    r"not implemented for '(Half|BFloat16)'|not supported for (Half|BFloat16|float16|bfloat16)", re.I
)


def headline(exc: BaseException) -> str:
    """The line of the message that says what went wrong (TorchScript puts it last, after a trace)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if _TORCHSCRIPT in lines[0]:
        named = [line for line in lines if re.match(r"^\w*(Error|Exception):", line)]
        return named[-1] if named else lines[-1]
    return lines[0]


def classify_exception(exc: BaseException) -> Failure:
    message = headline(exc)
    kind = type(exc).__name__
    text = str(exc)
    if isinstance(exc, ScalerExhausted):
        return Failure(SCALER_EXHAUSTED, kind, message, final_scale=exc.final_scale, retries=exc.retries)
    if isinstance(exc, StepBudgetExhausted):
        return Failure(STEP_BUDGET_EXHAUSTED, kind, message)
    if isinstance(exc, ConfigurationTimeout):
        return Failure(TIMEOUT, kind, message)
    if _STEP_SIZE_UNDERFLOW.search(text):
        return Failure(STEP_SIZE_UNDERFLOW, kind, f"the adaptive step size underflowed ({message})")
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or re.search(
        r"out of memory|can't allocate memory", text, re.I
    ):
        return Failure(OOM, kind, message)
    if isinstance(exc, ValueError) and "unscale FP16 gradients" in text:
        return Failure(GRADSCALER_FP16_UNSCALE, kind, message)
    if isinstance(exc, RuntimeError) and _DTYPE_MISMATCH.search(text):
        return Failure(TORCHSCRIPT_DTYPE_MISMATCH if _TORCHSCRIPT in text else DTYPE_MISMATCH, kind, message)
    if isinstance(exc, NotImplementedError) or _UNSUPPORTED.search(text):
        return Failure(UNSUPPORTED, kind, message)
    return Failure(ERROR, kind, message)


def overflow(quantity: str, phase: str, step: int | None) -> Failure:
    where = f" at {phase} step {step}" if step is not None else ""
    return Failure(OVERFLOW, "NonFinite", f"non-finite {quantity}{where}", step=step, phase=phase)


def saturated(phase: str, count: int, limit: float) -> Failure:
    """A format without infinity (E4M3) clips what overflows to its max: nothing non-finite is left to see."""
    return Failure(
        OVERFLOW,
        "Saturated",
        f"{count} values beyond ±{limit:g} saturated in the {phase} pass (the format has no infinity)",
        phase=phase,
    )


def underflow(quantity: str, value_norm: float, reference_norm: float) -> Failure:
    return Failure(
        UNDERFLOW,
        "Collapsed",
        f"{quantity} collapsed: norm {value_norm:.3g} against {reference_norm:.3g} in the reference",
    )


def unsupported(reason: str) -> Failure:
    return Failure(UNSUPPORTED, "Unsupported", reason)


def step_size_underflow(failure: Failure, rtol: float, dtype: str, unit_roundoff: float) -> Failure:
    """The underflow's message with its cause and remedy, where the run's rtol and dtype are known."""
    cause = (
        f"rtol {rtol:.2g} below {dtype}'s unit roundoff {unit_roundoff:.2g}: no step of the state in {dtype} can be "
        "that accurate, so the controller shrank the step until t + dt == t"
        if rtol < unit_roundoff
        else f"the error estimate in {dtype} did not fall below rtol {rtol:.2g} at any representable step"
    )
    remedy = (
        f"an rtol well above {unit_roundoff:.2g} "
        f"(the error estimate is itself computed in {dtype} and carries its roundoff), "
        "a state in float32 (an autocast mode), or a fixed grid"
    )
    return Failure(STEP_SIZE_UNDERFLOW, failure.failure_type, f"{failure.message}: {cause}; remedy: {remedy}")
