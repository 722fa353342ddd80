"""One configuration: run it (and its float64 reference, once), compare, and turn the outcome into rows."""
from __future__ import annotations

import signal
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch

from ..axes.arithmetics import ARITHMETICS, ArithmeticRequest, tensor_scaling
from ..axes.dtypes import DTYPES, DtypeSpec
from ..axes.grid import Configuration
from ..axes.keep_float32 import keep_skip_reason, kept_in_float32
from ..axes.libraries import LIBRARIES, SolverLibrary
from ..axes.libraries.steps import CountedDynamics
from ..axes.loss_placements import DEFAULT_LOSS_IN, LOSS_PLACEMENTS, LossPlacement
from ..axes.methods import METHODS, Method, tableau_of
from ..axes.modes import MODES, PreparedRun, ProblemCopies, cast_run
from ..axes.roundings import ROUNDINGS
from ..axes.scalings import SCALINGS, Scaling, ScalerSettings
from ..core.devices import measured
from ..core.errors import InputError
from ..core.user_code import quit_line
from ..solvers import SolveReport
from . import failures, metrics
from .cpu_memory import cpu_peak_memory
from .environment_columns import environment_columns
from .failures import Failure
from .module_hooks import ModuleObserver
from .memory import configuration_oom
from .significance import quantities, significant_digits
from .torch_state import restored_torch_state
from .yardsticks import CONTEXT_COLUMNS, Yardsticks, context_columns

ERROR_METRICS = ("sol_rel_err", "final_rel_err", "loss_rel_err", "grad_y0_rel_err", "grad_params_rel_err")
# Significant digits estimated from stochastically rounded repeats, one per error metric.
SIG_DIGITS = tuple(f"sig_digits_{name.removesuffix('_rel_err')}" for name in ERROR_METRICS)


@dataclass
class RunOutcome:
    trajectory: torch.Tensor | None = None
    loss: torch.Tensor | None = None
    grads: list[torch.Tensor | None] = field(default_factory=list)  # y0 first, then each parameter
    final_scale: float | None = None
    retries: int | None = None
    backward_passes: int | None = None  # a loss scaler may run several to find its scale
    forward_s: float | None = None
    backward_s: float | None = None
    peak_memory_bytes: int | None = None
    report: SolveReport = field(default_factory=SolveReport)
    failure: Failure | None = None


def time_grid(n_timesteps: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, n_timesteps + 1, dtype=dtype, device=device)


def run_once(
    prepared: PreparedRun,
    copies: ProblemCopies,
    library: SolverLibrary,
    method: Method,
    scaling: Scaling,
    settings: ScalerSettings,
    t: torch.Tensor,
    loss_dtype: torch.dtype,
    scale_hint: int | None = None,
    loss_in: LossPlacement | None = None,
    observer: ModuleObserver | None = None,
) -> RunOutcome:
    """Forward, loss and backward of one run; any exception or non-finite value becomes `failure`.
    `scale_hint`: where a searching loss scaler starts (the retries of a similar run); `loss_in`: where the loss is
    formed (default: outside the run's context, in `loss_dtype`); `observer`: told where the backward begins
    (per-module measurement)."""
    outcome = RunOutcome()
    loss_in = loss_in or LOSS_PLACEMENTS.get(DEFAULT_LOSS_IN)
    device = prepared.y0.device
    adjoint_scaler = scaling.adjoint_scaler(settings)
    leaves = prepared.leaves
    counted = CountedDynamics(prepared.func)
    try:
        with measured(device) as forward:
            with prepared.context():
                trajectory = library.solve(counted, prepared.y0, t, method, adjoint_scaler, outcome.report)
            outcome.report.n_function_evals = counted.calls
            loss = loss_in.form(copies.problem.loss, trajectory, prepared.context, loss_dtype)
        outcome.trajectory, outcome.loss, outcome.forward_s = trajectory.detach(), loss.detach(), forward.seconds
        outcome.report.record_forward(trajectory)
        if not metrics.all_finite([trajectory]):
            outcome.failure = failures.overflow("solution", "forward", outcome.report.forward_overflow_step)
            return outcome
        if not metrics.all_finite([loss]):
            # Named with where it was formed: a loss that overflows only inside autocast is the placement's doing.
            outcome.failure = failures.overflow(f"loss (formed {loss_in.where})", "forward", None)
            return outcome
        if observer is not None:
            observer.begin_backward()
        with measured(device) as backward:
            result = scaling.backward(loss, leaves, adjoint_scaler, settings, hint=scale_hint)
        outcome.backward_s, outcome.peak_memory_bytes = backward.seconds, backward.peak_memory_bytes or forward.peak_memory_bytes
        # A parameter the loss does not reach has a zero gradient, whichever way the library reports it.
        outcome.grads = [torch.zeros_like(leaf) if g is None else g.detach().clone() for g, leaf in zip(result.grads, leaves)]
        outcome.final_scale, outcome.retries, outcome.backward_passes = result.final_scale, result.retries, result.passes
        # Keep the backward profile of the attempt that counted (a loss scaler may have retried).
        outcome.report.backward = sorted(outcome.report.backward[-(t.numel() - 1):], key=lambda r: r.backward_step)
        if not metrics.all_finite(outcome.grads):
            outcome.failure = _gradient_overflow(outcome)
    except SystemExit as exc:  # the model's or a library's code tried to end the process: the sweep stops, in one line
        raise InputError(quit_line(f"{library.name} {method.name}: the solve, the model or its loss", exc)) from None
    except Exception as exc:  # noqa: BLE001 - every failure of one configuration becomes a row
        outcome.failure = failures.classify_exception(exc)
        if outcome.report.n_function_evals is None:  # the forward failed: what it had evaluated until then
            outcome.report.n_function_evals = counted.calls
        if outcome.failure.final_scale is not None:
            outcome.final_scale, outcome.retries = outcome.failure.final_scale, outcome.failure.retries
            # An exhausted loss scaler's last attempt is the one that counted, as for one that succeeded.
            outcome.report.backward = sorted(outcome.report.backward[-(t.numel() - 1):], key=lambda r: r.backward_step)
    finally:
        for leaf in leaves:
            leaf.grad = None
    return outcome


def _gradient_overflow(outcome: RunOutcome) -> Failure:
    # The message names the quantity, not the parameters, so that runs failing for one cause group together.
    y0_finite, params_finite = metrics.all_finite(outcome.grads[:1]), metrics.all_finite(outcome.grads[1:])
    quantity = "gradient w.r.t. y0 and parameter gradient" if not (y0_finite or params_finite) else (
        "gradient w.r.t. y0" if not y0_finite else "parameter gradient"
    )
    step = outcome.report.backward_overflow_step
    if step is None:
        # Every step's adjoint stayed finite: the overflow is where the parameter gradient is summed over
        # the steps (under autocast, in the low dtype, on autocast's one cached copy of each weight).
        quantity += "; every step's adjoint stayed finite, the sum of the parameter gradient over the steps overflowed"
    return failures.overflow(quantity, "backward", step)


class ReferenceCache:
    """float64 solves of one problem (one checkpoint's weights), one per (library, method, n_timesteps), computed on first use."""

    def __init__(self, copies: ProblemCopies, settings: ScalerSettings) -> None:
        self.copies = copies
        self.settings = settings
        self._cache: dict[tuple[str, str, int], RunOutcome] = {}
        self.n_solves = 0
        self.seconds = 0.0

    def get(self, library: SolverLibrary, method: Method, n_timesteps: int) -> RunOutcome:
        key = (library.name, method.name, n_timesteps)
        if key not in self._cache:
            start = time.perf_counter()
            prepared = cast_run(self.copies, torch.float64)
            t = time_grid(n_timesteps, torch.float64, prepared.y0.device)
            outcome = run_once(prepared, self.copies, library, method, SCALINGS.get("none"), self.settings, t, torch.float64)
            if outcome.failure is not None:
                raise failures.ReferenceFailed(outcome.failure)
            self._cache[key] = outcome
            self.n_solves += 1
            self.seconds += time.perf_counter() - start
        return self._cache[key]


@dataclass
class SweepContext:
    copies: ProblemCopies
    references: ReferenceCache
    device: torch.device
    settings: ScalerSettings
    repeats: int = 1
    timeout_s: float | None = None
    # rtol, atol and max_steps of adaptive methods.
    step_control: dict = field(default_factory=dict)
    yardsticks: Yardsticks | None = None  # None: no discretisation error or gradient noise beside the roundoff
    fp8_scaling: bool = True
    cpu_memory: bool = False  # on the CPU, one extra untimed run per configuration measures its peak memory
    train_iteration: int | None = None  # the training iteration of the checkpoint whose weights `copies` hold, where known
    per_module: bool = False  # one extra untimed run per configuration with every module watched (module_hooks.py)
    # The retries of the last run of each setup here: a searching loss scaler starts there (same result, fewer passes).
    scale_hints: dict = field(default_factory=dict)


@dataclass
class Measurement:
    row: dict
    parameter_errors: list[dict]
    profile: list[dict]
    modules: list[dict] = field(default_factory=list)  # per module and phase, where asked for (module_hooks.py)


def measure_configuration(config: Configuration, context: SweepContext) -> Measurement:
    library = LIBRARIES.get(config.library)
    method = METHODS.get(config.method)
    if method.adaptive:
        method = method.with_settings(**context.step_control)
    dtype = DTYPES.get(config.dtype)
    scaling = SCALINGS.get(config.scaling)
    mode = MODES.get(config.mode)
    arithmetic = ARITHMETICS.get(config.arithmetic)
    loss_in = LOSS_PLACEMENTS.get(config.loss_in)
    row = _empty_row(config, dtype)
    row["train_iteration"] = context.train_iteration
    row.update(environment_columns(context.device))
    row["fp8_scaling"] = tensor_scaling(dtype, config.arithmetic, context.fp8_scaling)

    skip = (scaling.skip_reason(library) or library.unsupported_method_reason(method) or arithmetic.skip_reason(dtype, config.rounding)
            or keep_skip_reason(config.keep_float32, config.mode, config.arithmetic, dtype))  # fmt: skip
    if skip:
        row.update(status="skipped", skip_reason=skip)
        return Measurement(row, [], [])
    row["tableau"] = tableau_of(library, method)
    reason = arithmetic.unsupported_reason(dtype, context.device)
    if reason:
        _record_failure(row, failures.unsupported(reason))
        return Measurement(row, [], [])

    too_large = configuration_oom(config.n_timesteps, context.copies.problem.y0, context.device)
    if too_large:
        _record_failure(row, too_large)
        return Measurement(row, [], [])
    try:
        reference = context.references.get(library, method, config.n_timesteps)
    except SystemExit as exc:
        raise InputError(quit_line(f"{library.name} {method.name}: the reference solve", exc)) from None
    except InputError:  # user code that quit (above, or in the reference's own run): the sweep stops
        raise
    except Exception as exc:  # noqa: BLE001 - a broken reference fails its configurations, not the sweep
        _record_failure(row, failures.classify_exception(exc))
        return Measurement(row, [], [])
    # Autocast modes run the problem's own float32 vector field: the kept modules' forwards are swapped for the runs only.
    with kept_in_float32(context.copies.problem.func, config.keep_float32):
        return _measure_runs(config, context, library, method, dtype, scaling, mode, arithmetic, loss_in, row, reference)


def _measure_runs(config, context, library, method, dtype, scaling, mode, arithmetic, loss_in, row, reference) -> Measurement:
    t = time_grid(config.n_timesteps, torch.float32, context.device)
    hint_key = (config.library, config.dtype, config.scaling, config.mode, config.arithmetic, config.rounding, config.loss_in, config.keep_float32)
    if hint_key not in context.scale_hints and getattr(scaling, "searches_scale", False) and config.n_timesteps > HINT_TIMESTEPS:
        context.scale_hints[hint_key] = _scale_hint(config, context, library, method, scaling, mode, arithmetic, dtype, loss_in)
    outcomes = []
    for repeat in range(context.repeats):
        # The try holds the whole limit: an alarm between arming and the run, or as it is disarmed, is a timeout too.
        try:
            with restored_torch_state(), _time_limit(context.timeout_s):
                prepared = arithmetic.prepare(mode, context.copies, dtype, ArithmeticRequest(config.rounding, context.fp8_scaling, repeat))
                outcome = run_once(prepared, context.copies, library, method, scaling, context.settings, t, torch.float32,
                                   scale_hint=context.scale_hints.get(hint_key), loss_in=loss_in)  # fmt: skip
                if outcome.retries is not None:
                    context.scale_hints[hint_key] = outcome.retries
                silent = prepared.silent_overflow() if outcome.failure is None and prepared.silent_overflow else None
                if silent is not None:
                    outcome.failure = failures.saturated(*silent, dtype.max)
        except failures.ConfigurationTimeout as exc:
            outcome = RunOutcome(failure=failures.classify_exception(exc))
        outcomes.append(outcome)
        if outcome.failure is not None:
            break
    if context.cpu_memory and context.device.type == "cpu" and outcomes[-1].failure is None:
        # The profiler slows every op, so the peak comes from a run of its own, not from the timed ones.
        with cpu_peak_memory() as peak:
            prepared = arithmetic.prepare(mode, context.copies, dtype, ArithmeticRequest(config.rounding, context.fp8_scaling, 0))
            run_once(prepared, context.copies, library, method, scaling, context.settings, t, torch.float32, scale_hint=outcomes[-1].retries,
                     loss_in=loss_in)  # fmt: skip
        outcomes[-1].peak_memory_bytes = peak.bytes
    last = outcomes[-1].failure
    if last is not None and last.failure_class == failures.STEP_SIZE_UNDERFLOW and method.adaptive:
        outcomes[-1].failure = failures.step_size_underflow(last, method.rtol, dtype.name, dtype.unit_roundoff)
    row.update(_step_columns(method, outcomes[-1], reference))
    measurement = _summarise(row, config, dtype, outcomes, reference, context.copies)
    if context.per_module:
        measurement.modules = _module_rows(config, context, library, method, dtype, scaling, mode, arithmetic, loss_in, t, outcomes[-1].retries)
    if context.yardsticks is not None:
        errors = {name: row[name] for name in ERROR_METRICS}
        row.update(context_columns(outcomes[-1], reference, context.yardsticks.fine(), context.yardsticks.noise(), config.n_timesteps, errors))
    return measurement


def _module_rows(config, context, library, method, dtype, scaling, mode, arithmetic, loss_in, t, scale_hint) -> list[dict]:
    """Every module watched over one more run, untimed (the hooks and the float64 re-runs slow it down)."""
    observer = None
    try:
        with restored_torch_state(), _time_limit(context.timeout_s):
            prepared = arithmetic.prepare(mode, context.copies, dtype, ArithmeticRequest(config.rounding, context.fp8_scaling, 0))
            observer = ModuleObserver(prepared.func, t, dtype.max, dtype.smallest_normal, prepared.context)
            with observer.attached():
                run_once(prepared, context.copies, library, method, scaling, context.settings, t, torch.float32, scale_hint=scale_hint,
                         loss_in=loss_in, observer=observer)  # fmt: skip
    except failures.ConfigurationTimeout:
        pass  # what was seen until the limit still says where the values went
    return observer.rows() if observer is not None else []


# A setup's first run with a searching loss scaler takes its starting point from the same setup at this
# n_timesteps: the search there costs a fraction of one pass at a large n, and k rarely differs by more than one.
HINT_TIMESTEPS = 8


def _scale_hint(config, context, library, method, scaling, mode, arithmetic, dtype, loss_in) -> int | None:
    """The retries of the same setup at HINT_TIMESTEPS, or None where that run fails: where the loss scaler's search
    of a larger run starts. Its numbers are not kept; the hint changes how long the search takes, never its result."""
    try:
        with restored_torch_state(), _time_limit(context.timeout_s):
            prepared = arithmetic.prepare(mode, context.copies, dtype, ArithmeticRequest(config.rounding, context.fp8_scaling, 0))
            t = time_grid(HINT_TIMESTEPS, torch.float32, context.device)
            outcome = run_once(prepared, context.copies, library, method, scaling, context.settings, t, torch.float32, loss_in=loss_in)
    except failures.ConfigurationTimeout:
        return None
    return outcome.retries if outcome.failure is None else None


def _empty_row(config: Configuration, dtype: DtypeSpec) -> dict:
    row = config.as_dict()
    row.update(status="ok", failure_class=None, failure_type=None, failure_message=None, skip_reason=None)
    for name in ERROR_METRICS:
        row.update({name: None, f"{name}_over_u": None, f"{name}_spread": None})
    row.update(
        unit_roundoff=dtype.unit_roundoff, dtype_max=dtype.max,
        overflow_step=None, overflow_phase=None, max_abs_adjoint=None, reference_max_abs_adjoint=None,
        adjoint_zero_share=None, reference_adjoint_zero_share=None,
        final_scale=None, scale_retries=None, deterministic=None, n_repeats=0,
        time_forward_s=None, time_backward_s=None, peak_memory_bytes=None,
        fp8_scaling=None, **dict.fromkeys(SIG_DIGITS),
    )  # fmt: skip
    row.update(dict.fromkeys(CONTEXT_COLUMNS))
    row.update(dict.fromkeys(STEP_COLUMNS))
    row["tableau"] = None
    return row


# What the forward solve cost, the run's beside its reference's; steps and tolerances for adaptive methods only.
STEP_COLUMNS = (
    "nfe", "reference_nfe", "accepted_steps", "rejected_steps", "reference_accepted_steps", "reference_rejected_steps",
    "rtol", "atol", "max_steps",
)  # fmt: skip


def _step_columns(method: Method, outcome: RunOutcome, reference: RunOutcome) -> dict:
    run, ref = outcome.report, reference.report
    columns = {
        "nfe": run.n_function_evals, "reference_nfe": ref.n_function_evals,
        "accepted_steps": run.accepted_steps, "rejected_steps": run.rejected_steps,
        "reference_accepted_steps": ref.accepted_steps, "reference_rejected_steps": ref.rejected_steps,
    }  # fmt: skip
    if method.adaptive:
        columns.update(rtol=method.rtol, atol=method.atol, max_steps=method.max_steps)
    return columns


def _record_failure(row: dict, failure: Failure) -> None:
    row.update(
        status="failed", failure_class=failure.failure_class, failure_type=failure.failure_type,
        failure_message=failure.message, overflow_step=failure.step, overflow_phase=failure.phase,
    )  # fmt: skip


def _errors(outcome: RunOutcome, reference: RunOutcome) -> dict[str, float | None]:
    errors: dict[str, float | None] = dict.fromkeys(ERROR_METRICS)
    if outcome.trajectory is not None and metrics.all_finite([outcome.trajectory]):
        errors["sol_rel_err"] = metrics.rel_err(outcome.trajectory, reference.trajectory)
        errors["final_rel_err"] = metrics.rel_err(outcome.trajectory[-1], reference.trajectory[-1])
    if outcome.loss is not None and metrics.all_finite([outcome.loss]):
        errors["loss_rel_err"] = metrics.rel_err(outcome.loss, reference.loss)
    if outcome.grads and metrics.all_finite(outcome.grads):
        errors["grad_y0_rel_err"] = metrics.rel_err(outcome.grads[0], reference.grads[0])
        errors["grad_params_rel_err"] = metrics.rel_err(_params(outcome), _params(reference))
    return errors


def _params(outcome: RunOutcome) -> torch.Tensor:
    return metrics.flatten([g for g in outcome.grads[1:] if g is not None])


def _underflow(outcome: RunOutcome, reference: RunOutcome, names: list[str], params_error: float) -> Failure | None:
    """Finite gradients that collapsed: as a whole, parameter by parameter, or a low-precision adjoint
    that went to zero where the reference's did not."""
    pairs = {"gradient w.r.t. y0": (outcome.grads[0], reference.grads[0]), "parameter gradient": (_params(outcome), _params(reference))}
    for quantity, (value, ref) in pairs.items():
        value_norm, reference_norm = metrics.norm(value), metrics.norm(ref)
        if metrics.collapsed(value_norm, reference_norm):
            return failures.underflow(quantity, value_norm, reference_norm)
    # One float32 path can keep the total norm up while every parameter behind a low-precision op lost its gradient.
    lost = [name for name, g, ref in zip(names[1:], outcome.grads[1:], reference.grads[1:]) if metrics.collapsed(metrics.norm(g), metrics.norm(ref))]
    if lost:
        return failures.Failure(
            failures.UNDERFLOW, "Collapsed",
            f"{len(lost)} of {len(names) - 1} parameter gradients collapsed to (nearly) zero: {', '.join(lost[:4])}{' ...' if len(lost) > 4 else ''}",
        )  # fmt: skip
    zero_share, reference_zero_share = outcome.report.max_zero_share, reference.report.max_zero_share
    if metrics.zeroed(zero_share, reference_zero_share) and params_error > 0.5:
        return failures.Failure(
            failures.UNDERFLOW, "Collapsed",
            f"{zero_share:.0%} of the low-precision adjoint was exactly zero (reference {reference_zero_share:.0%}); "
            f"parameter gradient error {params_error:.2g}",
        )  # fmt: skip
    return None


def _bitwise_equal(a: RunOutcome, b: RunOutcome) -> bool:
    def same(x, y):
        if x is None or y is None:
            return x is y
        return x.dtype == y.dtype and torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))

    return same(a.trajectory, b.trajectory) and len(a.grads) == len(b.grads) and all(same(x, y) for x, y in zip(a.grads, b.grads))


def _summarise(row, config, dtype, outcomes, reference, copies) -> Measurement:
    last = outcomes[-1]
    per_repeat = [_errors(o, reference) for o in outcomes]
    for name in ERROR_METRICS:
        mean, spread = metrics.mean_and_spread([e[name] for e in per_repeat])
        row[name], row[f"{name}_spread"] = mean, spread
        row[f"{name}_over_u"] = metrics.over_u(mean, dtype.unit_roundoff)
    row.update(
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
    )
    if ROUNDINGS.get(config.rounding).random:
        row.update(_significant_digits(outcomes))
    names = ["y0"] + [name for name, p in copies.problem.func.named_parameters() if p.requires_grad]
    failure = last.failure
    if failure is None and last.grads:
        failure = _underflow(last, reference, names, per_repeat[-1]["grad_params_rel_err"])
    if failure is not None:
        _record_failure(row, failure)

    parameter_errors = []
    if last.grads and metrics.all_finite(last.grads):
        for name, grad, ref in zip(names, last.grads, reference.grads):
            if grad is not None and ref is not None:
                error = metrics.rel_err(grad, ref)
                parameter_errors.append({"parameter": name, "grad_rel_err": error, "grad_rel_err_over_u": error / dtype.unit_roundoff})
    return Measurement(row, parameter_errors, _profile(last.report, reference.report))


def _significant_digits(outcomes: list[RunOutcome]) -> dict[str, float | None]:
    finished = [o for o in outcomes if o.failure is None and o.grads and metrics.all_finite(o.grads)]
    if len(finished) < 2:
        return {}
    samples = [quantities(o.trajectory, o.loss, o.grads) for o in finished]
    return {column: significant_digits([s[key] for s in samples]) for column, key in zip(SIG_DIGITS, samples[0])}


def _profile(report: SolveReport, reference: SolveReport) -> list[dict]:
    rows = [
        {"phase": "forward", "step": k, "max_abs": m, "reference_max_abs": ref, "max_abs_low": None, "zero_share": None, "reference_zero_share": None, "finite": m == m and abs(m) != float("inf")}
        for k, (m, ref) in enumerate(zip(report.forward_max_abs, reference.forward_max_abs))
    ]
    reference_backward = {r.backward_step: r for r in reference.backward}
    for record in report.backward:
        ref = reference_backward.get(record.backward_step)
        rows.append({
            "phase": "backward", "step": record.backward_step, "max_abs": record.max_abs_adjoint,
            "reference_max_abs": ref.max_abs_adjoint if ref else None, "max_abs_low": record.max_abs_low_adjoint,
            "zero_share": record.low_adjoint_zero_share, "reference_zero_share": ref.low_adjoint_zero_share if ref else None,
            "finite": record.finite,
        })  # fmt: skip
    return rows


def _median(values):
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ConfigurationTimeout inside the run once `seconds` have passed (main thread, POSIX)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise failures.ConfigurationTimeout(f"configuration ran past its limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
