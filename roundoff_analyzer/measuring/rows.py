"""A configuration's outcome as table rows: its row of the results table, its per-parameter errors and its per-step
profile. Pure functions of the runs and their reference, each building its columns complete, so that a row is never
changed once the `Measurement` holding it exists."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from ..axes.arithmetics import tensor_scaling
from ..axes.dtypes import DtypeSpec
from ..axes.grid import Configuration
from ..axes.methods import AdaptiveRK, Method
from ..axes.models.inputs import input_names
from ..axes.modes import ProblemCopies
from ..axes.roundings import ROUNDINGS
from ..solvers import SolveReport
from . import failures, metrics
from .columns import ERROR_METRICS, REFERENCE_NORM_COLUMNS, SIG_DIGITS, STEP_COLUMNS
from .environment_columns import environment_columns
from .failures import Failure
from .one_run import RunOutcome
from .outcomes import FailureClass, Status
from .run_inputs import SweepShared
from .significance import quantities, significant_digits
from .yardsticks import YARDSTICK_COLUMNS

Row = dict[str, Any]


@dataclass(frozen=True)
class Measurement:
    """One configuration's rows, built complete: its results row and its rows of the three side tables."""

    row: Row
    parameter_errors: list[Row]
    profile: list[Row]
    modules: list[Row] = field(default_factory=list)  # per module and phase, where asked for (module_hooks.py)
    parts: list[Row] = field(default_factory=list)  # per submodule or tuple part, where there are several


def base_row(config: Configuration, dtype: DtypeSpec, shared: SweepShared) -> Row:
    """Every column of the results table: the configuration's, its environment's, and None for what is measured."""
    row: Row = config.as_dict()
    row.update(t0=shared.shape.t0, t1=shared.shape.t1)
    row.update(status=Status.OK, failure_class=None, failure_type=None, failure_message=None, skip_reason=None)
    for name in ERROR_METRICS:
        row.update({name: None, f"{name}_over_u": None, f"{name}_spread": None})
    row.update(
        unit_roundoff=dtype.unit_roundoff,
        dtype_max=dtype.max,
        overflow_step=None,
        overflow_phase=None,
        max_abs_adjoint=None,
        reference_max_abs_adjoint=None,
        adjoint_zero_share=None,
        reference_adjoint_zero_share=None,
        final_scale=None,
        scale_retries=None,
        deterministic=None,
        n_repeats=0,
        time_forward_s=None,
        time_backward_s=None,
        peak_memory_bytes=None,
        fp8_scaling=None,
        **dict.fromkeys(SIG_DIGITS),
    )
    row.update(dict.fromkeys(YARDSTICK_COLUMNS))
    row.update(dict.fromkeys(STEP_COLUMNS))
    row.update(dict.fromkeys(REFERENCE_NORM_COLUMNS))
    row["backward_mode"] = None
    row["tableau"] = None
    row["train_iteration"] = shared.train_iteration
    row.update(environment_columns(shared.device))
    row["fp8_scaling"] = tensor_scaling(dtype, config.arithmetic, shared.fp8_scaling)
    return row


def failure_columns(failure: Failure) -> Row:
    return {
        "status": Status.FAILED,
        "failure_class": failure.failure_class,
        "failure_type": failure.failure_type,
        "failure_message": failure.message,
        "overflow_step": failure.step,
        "overflow_phase": failure.phase,
    }


def step_columns(method: Method, outcome: RunOutcome, reference: RunOutcome) -> Row:
    run, ref = outcome.report, reference.report
    columns: Row = {
        "nfe": run.n_function_evals,
        "reference_nfe": ref.n_function_evals,
        "accepted_steps": run.accepted_steps,
        "rejected_steps": run.rejected_steps,
        "reference_accepted_steps": ref.accepted_steps,
        "reference_rejected_steps": ref.rejected_steps,
    }
    if isinstance(method, AdaptiveRK):
        columns.update(rtol=method.rtol, atol=method.atol, max_steps=method.max_steps)
    return columns


def parameter_names(copies: ProblemCopies) -> list[str]:
    """The names of a run's gradients, in RunOutcome.grads' order: y0 where the batch is differentiated (a trajectory
    problem's; ProblemCopies.differentiates_batch), then each trainable parameter."""
    inputs = input_names(copies.batch, "y0") if copies.differentiates_batch else []
    return inputs + [n for n, p in copies.model.named_parameters() if p.requires_grad]


def run_columns(
    config: Configuration, dtype: DtypeSpec, outcomes: list[RunOutcome], references: list[RunOutcome], names: list[str]
) -> Row:
    """The measured columns of a configuration's repeats, each against the reference of its draw of the step's random
    numbers: errors (mean and spread), scale, adjoint, times, memory, significant digits where rounding is random, and
    the failure, the last repeat's or an underflow found here."""
    last, reference = outcomes[-1], references[len(outcomes) - 1]
    per_repeat = [_errors(o, r) for o, r in zip(outcomes, references, strict=False)]
    columns: Row = {}
    for name in ERROR_METRICS:
        mean, spread = metrics.mean_and_spread([e[name] for e in per_repeat])
        columns[name], columns[f"{name}_spread"] = mean, spread
        columns[f"{name}_over_u"] = metrics.over_u(mean, dtype.unit_roundoff)
    columns.update(
        n_repeats=len(outcomes),
        deterministic=all(_bitwise_equal(outcomes[0], o) for o in outcomes[1:]) if len(outcomes) > 1 else None,
        final_scale=last.final_scale,
        scale_retries=last.retries,
        max_abs_adjoint=last.report.max_abs_adjoint,
        reference_max_abs_adjoint=reference.report.max_abs_adjoint,
        adjoint_zero_share=last.report.max_zero_share,
        reference_adjoint_zero_share=reference.report.max_zero_share,
        time_forward_s=_median([o.forward_s for o in outcomes]),
        time_backward_s=_median([o.backward_s for o in outcomes]),
        peak_memory_bytes=max((o.peak_memory_bytes for o in outcomes if o.peak_memory_bytes is not None), default=None),
        backward_mode=_backward_mode(outcomes),
        **reference_norms(references[0]),
    )
    if ROUNDINGS.get(config.rounding).random:
        columns.update(_significant_digits(outcomes))
    failure = last.failure
    if failure is None and last.grads:
        failure = _underflow(last, reference, names, per_repeat[-1]["grad_params_rel_err"])
    if failure is not None:
        columns.update(failure_columns(failure))
    return columns


def _backward_mode(outcomes: list[RunOutcome]) -> str | None:
    """The native solver's backward in the repeats ("stages" or "states", SolveReport.checkpoint); None for another
    solver. Repeats that ran different ones (an "auto" budget met by one and not another) give both, "stages+states":
    the row's time and memory then mix the two, and the report says so."""
    modes = {o.report.checkpoint for o in outcomes if o.report.checkpoint is not None}
    return "+".join(sorted(modes, reverse=True)) or None


def reference_norms(reference: RunOutcome) -> Row:
    """The float64 reference's norms (of the first draw's, where the step draws random numbers): its solution, loss,
    gradient w.r.t. the inputs and parameter gradient. Shared references give their configurations the same values."""
    inputs = metrics.joined(reference.input_grads) if reference.grads else None
    values = (
        reference.trajectory,
        reference.loss,
        inputs,
        _params(reference) if reference.grads else None,
    )
    return {
        column: None if value is None else metrics.norm(value) for column, value in zip(REFERENCE_NORM_COLUMNS, values)
    }


def parameter_error_rows(names: list[str], last: RunOutcome, reference: RunOutcome, dtype: DtypeSpec) -> list[Row]:
    """Each gradient's error against the reference's (y0's included), where the last run's gradients are finite; empty
    (no gradient) where neither run's gradient holds a nonzero value: the loss does not depend on it, and an error of
    0 would say it was measured exact."""
    rows: list[Row] = []
    if last.grads and metrics.all_finite(last.grads):
        for name, grad, ref in zip(names, last.grads, reference.grads):
            if grad is not None and ref is not None:
                none = not (bool(grad.any()) or bool(ref.any()))
                error = None if none else metrics.rel_err(grad, ref)
                over_u = None if error is None else error / dtype.unit_roundoff
                rows.append({"parameter": name, "grad_rel_err": error, "grad_rel_err_over_u": over_u})
    return rows


# The part a parameter belongs to when it is the model's own, not a submodule's.
MODEL_ITSELF = "(model)"


def submodule_of(parameter: str) -> str:
    """The top-level submodule a parameter belongs to (`encoder` of `encoder.rnn.weight_ih`)."""
    head, dot, _ = parameter.partition(".")
    return head if dot else MODEL_ITSELF


def part_error_rows(names: list[str], last: RunOutcome, reference: RunOutcome, dtype: DtypeSpec) -> list[Row]:
    """Errors of parts, where there is more than one: the parameter gradient of each top-level submodule (encoder,
    func, decoder), and the solution and final state of each part of a tuple state (the solve of record's)."""
    rows: list[Row] = []

    def add(metric: str, part: str, error: float) -> None:
        rows.append({"metric": metric, "part": part, "rel_err": error, "rel_err_over_u": error / dtype.unit_roundoff})

    if last.grads and metrics.all_finite(last.grads):
        groups: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for name, grad, ref in zip(names[last.n_inputs :], last.param_grads, reference.param_grads):
            own, theirs = groups.setdefault(submodule_of(name), ([], []))
            own.append(grad)
            theirs.append(ref)
        if len(groups) > 1:
            for part, (own, theirs) in groups.items():
                add("grad_params_rel_err", part, metrics.rel_err(metrics.flatten(own), metrics.flatten(theirs)))
    sizes = last.solves[last.of_record].part_sizes if len(last.solves) > last.of_record else None
    finite = last.trajectory is not None and metrics.all_finite([last.trajectory])
    if sizes and finite and last.trajectory is not None and reference.trajectory is not None:
        parts = zip(last.trajectory.split(sizes, dim=-1), reference.trajectory.split(sizes, dim=-1))
        for index, (own_part, reference_part) in enumerate(parts):
            add("sol_rel_err", f"state[{index}]", metrics.rel_err(own_part, reference_part))
            add("final_rel_err", f"state[{index}]", metrics.rel_err(own_part[-1], reference_part[-1]))
    return rows


def profile_rows(report: SolveReport, reference: SolveReport) -> list[Row]:
    """The largest value per step, forward and backward, beside the reference's."""
    rows: list[Row] = [
        {
            "phase": "forward",
            "step": k,
            "max_abs": m,
            "reference_max_abs": ref,
            "max_abs_low": None,
            "zero_share": None,
            "reference_zero_share": None,
            "finite": m == m and abs(m) != float("inf"),
        }
        for k, (m, ref) in enumerate(zip(report.forward_max_abs, reference.forward_max_abs))
    ]
    reference_backward = {r.backward_step: r for r in reference.backward}
    for record in report.backward:
        ref_record = reference_backward.get(record.backward_step)
        rows.append(
            {
                "phase": "backward",
                "step": record.backward_step,
                "max_abs": record.max_abs_adjoint,
                "reference_max_abs": ref_record.max_abs_adjoint if ref_record else None,
                "max_abs_low": record.max_abs_low_adjoint,
                "zero_share": record.low_adjoint_zero_share,
                "reference_zero_share": ref_record.low_adjoint_zero_share if ref_record else None,
                "finite": record.finite,
            }
        )
    return rows


def _errors(outcome: RunOutcome, reference: RunOutcome) -> dict[str, float | None]:
    errors: dict[str, float | None] = dict.fromkeys(ERROR_METRICS)
    if outcome.trajectory is not None and metrics.all_finite([outcome.trajectory]):
        assert reference.trajectory is not None  # the float64 reference ran where the run did
        errors["sol_rel_err"] = metrics.rel_err(outcome.trajectory, reference.trajectory)
        errors["final_rel_err"] = metrics.rel_err(outcome.trajectory[-1], reference.trajectory[-1])
    if outcome.loss is not None and metrics.all_finite([outcome.loss]):
        assert reference.loss is not None
        errors["loss_rel_err"] = metrics.rel_err(outcome.loss, reference.loss)
    if outcome.grads and metrics.all_finite(outcome.grads):
        inputs, reference_inputs = metrics.joined(outcome.input_grads), metrics.joined(reference.input_grads)
        if inputs is not None and reference_inputs is not None:
            errors["grad_y0_rel_err"] = metrics.rel_err(inputs, reference_inputs)
        errors["grad_params_rel_err"] = metrics.rel_err(_params(outcome), _params(reference))
    return errors


def _params(outcome: RunOutcome) -> torch.Tensor:
    return metrics.flatten([g for g in outcome.param_grads if g is not None])


def input_words(names: list[str]) -> str:
    """What the input gradient is of, in a failure's words: y0 for a trajectory problem, else the batch's inputs."""
    return "y0" if names == ["y0"] else "the batch's inputs"


def _underflow(
    outcome: RunOutcome, reference: RunOutcome, names: list[str], params_error: float | None
) -> Failure | None:
    """Finite gradients that collapsed: as a whole, parameter by parameter, or a low-precision adjoint
    that went to zero where the reference's did not."""
    n_inputs = outcome.n_inputs
    pairs = {
        f"gradient w.r.t. {input_words(names[:n_inputs])}": (
            metrics.joined(outcome.input_grads),
            metrics.joined(reference.input_grads),
        ),
        "parameter gradient": (_params(outcome), _params(reference)),
    }
    for quantity, (value, ref) in pairs.items():
        if value is None or ref is None:
            continue
        value_norm, reference_norm = metrics.norm(value), metrics.norm(ref)
        if metrics.collapsed(value_norm, reference_norm):
            return failures.underflow(quantity, value_norm, reference_norm)
    # One float32 path can keep the total norm up while every parameter behind a low-precision op lost its gradient.
    lost = [
        name
        for name, g, ref in zip(names[n_inputs:], outcome.param_grads, reference.param_grads)
        if metrics.collapsed(metrics.norm(g), metrics.norm(ref))
    ]
    if lost:
        shown = f"{', '.join(lost[:4])}{' ...' if len(lost) > 4 else ''}"
        return failures.Failure(
            FailureClass.UNDERFLOW,
            "Collapsed",
            f"{len(lost)} of {len(names) - n_inputs} parameter gradients collapsed to (nearly) zero: {shown}",
        )
    zero_share, reference_zero_share = outcome.report.max_zero_share, reference.report.max_zero_share
    if metrics.zeroed(zero_share, reference_zero_share) and params_error is not None and params_error > 0.5:
        return failures.Failure(
            FailureClass.UNDERFLOW,
            "Collapsed",
            f"{zero_share:.0%} of the low-precision adjoint was exactly zero (reference {reference_zero_share:.0%}); "
            f"parameter gradient error {params_error:.2g}",
        )
    return None


def _bitwise_equal(a: RunOutcome, b: RunOutcome) -> bool:
    def same(x: torch.Tensor | None, y: torch.Tensor | None) -> bool:
        if x is None or y is None:
            return x is y
        return x.dtype == y.dtype and torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))

    return (
        same(a.trajectory, b.trajectory)
        and len(a.grads) == len(b.grads)
        and all(same(x, y) for x, y in zip(a.grads, b.grads))
    )


def _significant_digits(outcomes: list[RunOutcome]) -> dict[str, float | None]:
    finished = [o for o in outcomes if o.failure is None and o.grads and metrics.all_finite(o.grads)]
    if len(finished) < 2:
        return {}
    samples = [_quantities(o) for o in finished]
    digits: dict[str, float | None] = {}
    for column, key in zip(SIG_DIGITS, samples[0]):
        values = [s[key] for s in samples]
        present = [v for v in values if v is not None]
        digits[column] = significant_digits(present) if len(present) == len(values) else None
    return digits


def _quantities(outcome: RunOutcome) -> dict[str, torch.Tensor | None]:
    assert outcome.trajectory is not None and outcome.loss is not None  # a finished run has both
    return quantities(outcome.trajectory, outcome.loss, outcome.grads, outcome.n_inputs)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
