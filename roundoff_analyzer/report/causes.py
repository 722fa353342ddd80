"""Why a failure class happens and what to do about it, worded with the group's own numbers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from ..axes.dtypes import DTYPES
from ..measuring.outcomes import FailureClass
from . import formatting
from .findings import FailureGroup


@dataclass(frozen=True)
class Explanation:
    cause: str
    remedy: str


def explained_classes() -> set[FailureClass]:
    return {*_FIXED, *_EXPLAINERS}


def explain(group: FailureGroup, manifest: dict) -> Explanation:
    # A class this version does not know (a table written by a later one) is explained as an error.
    failure_class = next((known for known in FailureClass if known == group.failure_class), FailureClass.ERROR)
    if failure_class in _FIXED:
        return _FIXED[failure_class]
    return _EXPLAINERS[failure_class](group, manifest)


# Classes whose explanation needs none of the group's numbers.
_FIXED: dict[FailureClass, Explanation] = {
    FailureClass.DTYPE_MISMATCH: Explanation(
        "An operation received tensors of two different dtypes at once. Under autocast this happens when a tensor "
        "was cast by hand (inputs cast to the low dtype, or a `.half()` inside the model) while autocast ran in "
        "another dtype.",
        "Leave the casting to autocast: keep inputs and parameters in float32 (autocast mode) and remove explicit "
        "casts from the model.",
    ),
    FailureClass.TORCHSCRIPT_DTYPE_MISMATCH: Explanation(
        "An operation received tensors of two different dtypes inside the TorchScript interpreter: scripted "
        "functions are compiled ahead of time and autocast does not recast what reaches them.",
        "Script nothing in the model (plain Python functions), or cast the scripted function's inputs to one dtype "
        "explicitly.",
    ),
}


def _dtypes(rows: pd.DataFrame) -> str:
    return " and ".join(rows["dtype"].unique())


def _dtype_fact(name: str, fact: str) -> float | None:
    return getattr(DTYPES.get(name), fact) if name in DTYPES else None


def _overflow(group: FailureGroup, manifest: dict) -> Explanation:
    rows = group.rows
    dtypes = _dtypes(rows)
    largest = (
        formatting.listing(formatting.in_u(m) for m in rows["dtype_max"].dropna().unique())
        if "dtype_max" in rows
        else formatting.MISSING
    )
    phases = [p for p in rows.get("overflow_phase", pd.Series(dtype=object)).dropna().unique()]
    where = f" in the {' and '.join(phases)} pass" if phases else ""
    cause = f"A value{where} exceeded the largest finite {dtypes} number ({largest}) and became inf or NaN."
    reference = (
        rows["reference_max_abs_adjoint"].dropna() if "reference_max_abs_adjoint" in rows else pd.Series(dtype=float)
    )
    if not reference.empty and "dtype_max" in rows:
        span = formatting.value_range(reference, formatting.in_u)
        if (reference > rows.loc[reference.index, "dtype_max"]).any():
            cause += (
                f" The float64 reference's largest adjoint entry is {span}, beyond that limit: the exact adjoint "
                f"does not fit in {dtypes}."
            )
        else:
            cause += (
                f" The float64 reference's largest adjoint entry is {span}, within that limit: what left the range "
                "was a value computed from the adjoint (a product or sum inside the backward pass, or a parameter "
                "gradient)."
            )
    if phases == ["forward"]:
        remedy = (
            "Scaling the backward pass cannot help a forward overflow: the forward values themselves leave the range. "
            "Run the forward in a dtype with a wider range (bfloat16, float32) or rescale the model's state."
        )
    else:
        remedy = (
            "Scale the backward pass down: `grad` (loss scaling, which halves the scale after each non-finite "
            "gradient) or, with the native solver, `dynamic` (the adjoint is rescaled at every step)."
        )
        wide, narrow = "bfloat16", "float16"
        if narrow in set(rows["dtype"]) and wide in DTYPES:
            remedy += (
                f" Or use {wide}: its largest finite number is {formatting.in_u(_dtype_fact(wide, 'max'))}, at a "
                "larger "
                f"unit roundoff ({formatting.error(_dtype_fact(wide, 'unit_roundoff'))} against {narrow}'s "
                f"{formatting.error(_dtype_fact(narrow, 'unit_roundoff'))})."
            )
    return Explanation(cause, remedy)


def _underflow(group: FailureGroup, manifest: dict) -> Explanation:
    dtypes = list(group.rows["dtype"].unique())
    floors = [f"{d}: {formatting.in_u(_dtype_fact(d, 'smallest_subnormal'))}" for d in dtypes if d in DTYPES]
    cause = (
        "The gradients stayed finite but their norm collapsed against the float64 reference (the message gives both "
        "norms): what happens when gradient entries fall below the dtype's smallest subnormal "
        f"number{' (' + '; '.join(floors) + ')' if floors else ''} and are flushed to zero."
    )
    remedy = "Scale the backward pass up: `grad` loss scaling, or the native solver's `dynamic` adjoint scaling."
    return Explanation(cause, remedy)


def _scaler_exhausted(group: FailureGroup, manifest: dict) -> Explanation:
    rows = group.rows
    scales = (
        formatting.value_range(rows["final_scale"], formatting.in_u) if "final_scale" in rows else formatting.MISSING
    )
    retries = (
        formatting.value_range(rows["scale_retries"], formatting.integer)
        if "scale_retries" in rows
        else formatting.MISSING
    )
    cause = (
        f"The scaler halved its scale as often as it may ({retries} retries) and still saw non-finite values; "
        f"the final scale was {scales}."
    )
    bound = manifest.get("scaler", {}).get("max_retries")
    remedy = (
        f"The values overflow {_dtypes(rows)} at every scale the scaler tried: raise the bound "
        f"(`max_retries` in the sweep's `[scaler]` settings{f', {bound} in this sweep' if bound is not None else ''}) "
        "or use a dtype with a wider range (bfloat16)."
    )
    return Explanation(cause, remedy)


def _gradscaler_fp16_unscale(group: FailureGroup, manifest: dict) -> Explanation:
    modes = set(group.rows["mode"])
    which = (
        "in pure mode the parameters themselves are float16"
        if modes == {"pure"}
        else "an input or parameter was float16"
    )
    cause = f"`torch.amp.GradScaler` unscales float32 gradients only, and met a float16 gradient: {which}."
    remedy = (
        "Keep float32 master parameters and inputs (autocast mode) so that gradients are float32, or unscale by hand."
    )
    return Explanation(cause, remedy)


def _unsupported(group: FailureGroup, manifest: dict) -> Explanation:
    device = manifest.get("device_description") or manifest.get("device") or "this device"
    cause = (
        f"The device ({device}) or the solver library cannot run {_dtypes(group.rows)} as asked; the message says "
        "which refused and why."
    )
    remedy = (
        "Run where the dtype and the library's mixed precision are supported, or leave them out of the grid "
        "(--dtype, --library)."
    )
    return Explanation(cause, remedy)


def _step_budget_exhausted(group: FailureGroup, manifest: dict) -> Explanation:
    control = (manifest.get("fingerprint") or {}).get("step_control") or {}
    budget = f" ({control['max_steps']} steps)" if control.get("max_steps") else ""
    cause = (
        f"The adaptive solver's error estimate, computed in {_dtypes(group.rows)}, kept rejecting or shrinking "
        f"steps: it used its whole step budget{budget} before the end of the time grid."
    )
    remedy = (
        "Set --rtol and --atol well above the dtype's unit roundoff, raise --max-steps, or use a fixed-grid method."
    )
    return Explanation(cause, remedy)


def _step_size_underflow(group: FailureGroup, manifest: dict) -> Explanation:
    control = (manifest.get("fingerprint") or {}).get("step_control") or {}
    units = group.rows.drop_duplicates("dtype")
    resolves = (
        ", ".join(f"{d}'s {u:.2g}" for d, u in zip(units["dtype"], units["unit_roundoff"]))
        if "unit_roundoff" in units
        else ""
    )
    asked = (
        f"rtol {control['rtol']:g}, atol {control['atol']:g}" if control.get("rtol") is not None else "the tolerances"
    )
    cause = (
        f"The adaptive solver shrank its step until t + dt == t in {_dtypes(group.rows)}: {asked} against a unit "
        f"roundoff of {resolves or 'the dtype'}; a tolerance near or below it cannot be met by a state held in that "
        "dtype."
    )
    remedy = (
        "Set --rtol well above the dtype's unit roundoff (the error estimate is itself computed in the dtype and "
        "carries its roundoff), keep the state in float32 (an autocast mode), or use a fixed-grid method."
    )
    return Explanation(cause, remedy)


def _oom(group: FailureGroup, manifest: dict) -> Explanation:
    device = manifest.get("device_description") or manifest.get("device") or "the device"
    cause = f"The run needed more memory than {device} had."
    remedy = (
        "Use fewer n_timesteps or a smaller batch (`-o batch=…`); the native solver keeps only the N+1 states, "
        "in the low dtype, for its backward pass."
    )
    return Explanation(cause, remedy)


def _timeout(group: FailureGroup, manifest: dict) -> Explanation:
    limit = manifest.get("timeout_s")
    cause = f"The run took longer than the per-configuration limit{f' ({limit:g} s)' if limit else ''}."
    remedy = "Raise --timeout, or sweep fewer n_timesteps."
    return Explanation(cause, remedy)


def _error(group: FailureGroup, manifest: dict) -> Explanation:
    cause = (
        f"None of the known failure classes: the run raised {group.failure_type or 'an exception'} (see the message)."
    )
    remedy = (
        "Reproduce it alone by narrowing the sweep (--library, --method, --dtype, --scaling, --timesteps) and read the "
        "traceback; if the model is at fault, fix it there."
    )
    return Explanation(cause, remedy)


# Every failure class (measuring/outcomes.py) has its explanation here or in _FIXED (tests/test_failures.py checks).
_EXPLAINERS: dict[FailureClass, Callable[[FailureGroup, dict], Explanation]] = {
    FailureClass.OVERFLOW: _overflow,
    FailureClass.UNDERFLOW: _underflow,
    FailureClass.SCALER_EXHAUSTED: _scaler_exhausted,
    FailureClass.GRADSCALER_FP16_UNSCALE: _gradscaler_fp16_unscale,
    FailureClass.UNSUPPORTED: _unsupported,
    FailureClass.OOM: _oom,
    FailureClass.TIMEOUT: _timeout,
    FailureClass.STEP_BUDGET_EXHAUSTED: _step_budget_exhausted,
    FailureClass.STEP_SIZE_UNDERFLOW: _step_size_underflow,
    FailureClass.ERROR: _error,
}
