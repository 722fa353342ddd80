"""Failure classes, the `failure_class` column's values: what failed and why, from the exception or from the numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..core.errors import ScalerExhausted, StepBudgetExhausted
from .outcomes import FailureClass


@dataclass(frozen=True)
class FailureKind:
    """One failure class: when a run is given it (docs/failures.md's "when" column), what to do about it (its "what
    to do" column), and the (header, column) pairs a failure group's table in the report adds for it. The report's own
    cause and remedy, worded with a group's numbers, are report/causes.py's; the rules that recognise a class from an
    exception are `classify_exception` below (their order matters), and from the numbers `overflow`, `saturated`,
    `underflow`."""

    name: FailureClass
    when: str
    remedy: str
    table_columns: tuple[tuple[str, str], ...] = ()


FAILURE_KINDS: dict[FailureClass, FailureKind] = {
    kind.name: kind
    for kind in (
        FailureKind(
            FailureClass.OVERFLOW,
            when=(
                "a non-finite solution (forward), loss, or gradient (backward). For gradients, `overflow_step` says "
                "where: for the native solver, the first backward step whose adjoint or parameter-gradient share was "
                "non-finite; for torchdiffeq, the first backward step whose state adjoint was non-finite (its "
                "backward is autograd's, which shows no per-step parameter-gradient share). Backward steps are "
                "counted as the backward walk counts them: 0 is the last time step. Where every step's adjoint stayed"
                " finite but a parameter gradient did not, the message places the overflow as far as the run's "
                "records and its mode's arithmetic show it: under `autocast` each step's share of a weight's gradient"
                " (its reduction over the batch) is computed in float16 and the shares are summed on autocast's one "
                "float16 copy of the weight, so either can have overflowed and the message says both; under "
                "`autocast-nocache` the shares are summed in float32, which finite float16 shares cannot overflow, so"
                " the message says one step's share overflowed (with bfloat16, whose range is float32's, both again)."
                " An E4M3 run that saturated a value fails here too ([emulation](emulation.md))"
            ),
            remedy="scale the loss (`grad`) or the adjoint (`dynamic`), or use bfloat16, whose range is float32's",
            table_columns=(
                ("phase", "overflow_phase"),
                ("step", "overflow_step"),
                ("largest finite adjoint", "max_abs_adjoint"),
                ("reference largest adjoint", "reference_max_abs_adjoint"),
                ("dtype max", "dtype_max"),
            ),
        ),
        FailureKind(
            FailureClass.UNDERFLOW,
            when=(
                "finite gradients that collapsed: as a whole, or parameter by parameter (a norm under a tenth of the "
                "reference's), or a low-precision adjoint mostly exactly zero where the reference's was not"
            ),
            remedy="a loss or adjoint scale that lifts the gradients back into range",
            table_columns=(
                ("gradient w.r.t. y0 error", "grad_y0_rel_err"),
                ("parameter gradient error", "grad_params_rel_err"),
            ),
        ),
        FailureKind(
            FailureClass.SCALER_EXHAUSTED,
            when="`grad` or `dynamic` hit its retry bound (`--max-retries`); `final_scale` keeps the last scale",
            remedy="a smaller `--init-scale` or more retries; the run overflows even at tiny scales",
            table_columns=(("final scale", "final_scale"), ("retries", "scale_retries")),
        ),
        FailureKind(
            FailureClass.DTYPE_MISMATCH,
            when='an op saw two dtypes ("same dtype", "expected scalar type …")',
            remedy="cast the inputs, or run the op outside autocast",
        ),
        FailureKind(
            FailureClass.TORCHSCRIPT_DTYPE_MISMATCH,
            when="the same, raised inside the TorchScript interpreter (e.g. `-o jit=true` for OT-Flow)",
            remedy="script nothing in the low-precision path",
        ),
        FailureKind(
            FailureClass.GRADSCALER_FP16_UNSCALE,
            when="GradScaler refused to unscale float16 gradients (pure mode with `grad`)",
            remedy="keep float32 parameters (autocast mode) when scaling the loss",
        ),
        FailureKind(
            FailureClass.UNSUPPORTED,
            when=(
                "the device cannot run the dtype (checked before running), or the library cannot run it there (e.g. "
                "rampde under CPU autocast)"
            ),
            remedy="another device or dtype",
        ),
        FailureKind(
            FailureClass.OOM,
            when="out of memory",
            remedy="a smaller batch or grid",
        ),
        FailureKind(
            FailureClass.TIMEOUT,
            when="over `--timeout S` seconds for the configuration",
            remedy="a longer limit",
        ),
        FailureKind(
            FailureClass.STEP_BUDGET_EXHAUSTED,
            when=(
                "an adaptive method (`dopri5`, `tsit5`) attempted `--max-steps` steps, accepted and rejected "
                "together, without reaching the end of the grid; where the float64 reference itself ran out, its "
                "configurations fail with this class and a message starting `float64 reference:`"
            ),
            remedy="a larger `--max-steps` or looser `--rtol`/`--atol`",
        ),
        FailureKind(
            FailureClass.STEP_SIZE_UNDERFLOW,
            when=(
                "an adaptive method's step size shrank until `t + dt == t` (torchdiffeq: `underflow in dt 0.0`; "
                "torchode: `REACHED_DT_MIN`): with the state in a low dtype (mode `pure`) its error estimate carries "
                "the dtype's roundoff, so an `rtol` below the unit roundoff (torchdiffeq's default 1e-7 against "
                "float16's 4.9e-4) cannot be met; the message names the rtol, the dtype's unit roundoff and the "
                "remedy. A sweep warns before running when `--rtol` is below a pure dtype's unit roundoff, and the "
                "answer never recommends such a run"
            ),
            remedy="`--rtol` well above the unit roundoff, a float32 state (an autocast mode), or a fixed-grid method",
        ),
        FailureKind(
            FailureClass.ERROR,
            when="anything else; type and message are kept",
            remedy="read the message",
        ),
    )
}

FAILURE_CLASSES = tuple(FailureClass)


class ConfigurationTimeout(BaseException):
    """One configuration ran past its time limit. Raised wherever the run is when its alarm lands, so, like
    KeyboardInterrupt, not an Exception: an `except Exception` on the way (the model's, a library's, this package's
    own) would swallow it and the run would go on past its limit."""


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
        return Failure(FailureClass.SCALER_EXHAUSTED, kind, message, final_scale=exc.final_scale, retries=exc.retries)
    if isinstance(exc, StepBudgetExhausted):
        return Failure(FailureClass.STEP_BUDGET_EXHAUSTED, kind, message)
    if isinstance(exc, ConfigurationTimeout):
        return Failure(FailureClass.TIMEOUT, kind, message)
    if _STEP_SIZE_UNDERFLOW.search(text):
        return Failure(FailureClass.STEP_SIZE_UNDERFLOW, kind, f"the adaptive step size underflowed ({message})")
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or re.search(
        r"out of memory|can't allocate memory", text, re.I
    ):
        return Failure(FailureClass.OOM, kind, message)
    if isinstance(exc, ValueError) and "unscale FP16 gradients" in text:
        return Failure(FailureClass.GRADSCALER_FP16_UNSCALE, kind, message)
    if isinstance(exc, RuntimeError) and _DTYPE_MISMATCH.search(text):
        return Failure(
            FailureClass.TORCHSCRIPT_DTYPE_MISMATCH if _TORCHSCRIPT in text else FailureClass.DTYPE_MISMATCH,
            kind,
            message,
        )
    if isinstance(exc, NotImplementedError) or _UNSUPPORTED.search(text):
        return Failure(FailureClass.UNSUPPORTED, kind, message)
    return Failure(FailureClass.ERROR, kind, message)


def overflow(quantity: str, phase: str, step: int | None) -> Failure:
    where = f" at {phase} step {step}" if step is not None else ""
    return Failure(FailureClass.OVERFLOW, "NonFinite", f"non-finite {quantity}{where}", step=step, phase=phase)


def saturated(phase: str, count: int, limit: float) -> Failure:
    """A format without infinity (E4M3) clips what overflows to its max: nothing non-finite is left to see."""
    return Failure(
        FailureClass.OVERFLOW,
        "Saturated",
        f"{count} values beyond ±{limit:g} saturated in the {phase} pass (the format has no infinity)",
        phase=phase,
    )


def underflow(quantity: str, value_norm: float, reference_norm: float) -> Failure:
    return Failure(
        FailureClass.UNDERFLOW,
        "Collapsed",
        f"{quantity} collapsed: norm {value_norm:.3g} against {reference_norm:.3g} in the reference",
    )


def unsupported(reason: str) -> Failure:
    return Failure(FailureClass.UNSUPPORTED, "Unsupported", reason)


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
    return Failure(
        FailureClass.STEP_SIZE_UNDERFLOW, failure.failure_type, f"{failure.message}: {cause}; remedy: {remedy}"
    )
