"""One run of one configuration: forward solve, loss and backward, with any failure named.

Kept apart from the loop over a configuration's repeats (`measure.py`) because the training step and the tests run
exactly this too, one run at a time.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from ..axes.libraries import SolverLibrary
from ..axes.loss_placements import DEFAULT_LOSS_IN, LOSS_PLACEMENTS, LossPlacement
from ..axes.methods import Method
from ..axes.modes import PreparedRun, ProblemCopies
from ..axes.scalings import ScalerSettings, Scaling
from ..core.devices import measured
from ..core.errors import InputError
from ..core.user_code import quit_line
from ..solvers import DynamicAdjointScaler, SolveReport, StepRecord
from . import failures, metrics
from .failures import Failure
from .module_hooks import ModuleObserver
from .solve_calls import ConfiguredOdeint, SolveRecord
from .tape_estimate import TapeBudget


@dataclass
class RunOutcome:
    """What one run gave: its solution, loss and gradients (detached), the scaler's end, its times, and its failure."""

    trajectory: torch.Tensor | None = None  # the first solve's states at its output times (solve_calls.SolveRecord)
    loss: torch.Tensor | None = None
    grads: list[torch.Tensor] = field(default_factory=list)  # the batch's floating-point inputs first, then parameters
    n_inputs: int = 1  # how many of `grads` are the inputs' (a trajectory problem's: y0's)
    final_scale: float | None = None
    retries: int | None = None
    backward_passes: int | None = None  # a loss scaler may run several to find its scale
    forward_s: float | None = None
    backward_s: float | None = None
    peak_memory_bytes: int | None = None
    report: SolveReport = field(default_factory=SolveReport)
    failure: Failure | None = None
    solves: list[SolveRecord] = field(default_factory=list)  # every solve of the step, the first the trajectory's

    @property
    def input_grads(self) -> list[torch.Tensor]:
        return self.grads[: self.n_inputs]

    @property
    def param_grads(self) -> list[torch.Tensor]:
        return self.grads[self.n_inputs :]


def run_once(
    prepared: PreparedRun,
    copies: ProblemCopies,
    library: SolverLibrary,
    method: Method,
    scaling: Scaling,
    settings: ScalerSettings,
    n_timesteps: int,
    loss_dtype: torch.dtype,
    scale_hint: int | None = None,
    loss_in: LossPlacement | None = None,
    observer: ModuleObserver | None = None,
    recompute_field: bool = False,
) -> RunOutcome:
    """Forward (the problem's step, its solves by `library` and `method` in `n_timesteps` equal steps each), loss and
    backward of one run; any exception or non-finite value becomes `failure`. The grid's times are float64 where the
    loss is (the reference), else float32.
    `scale_hint`: where a searching loss scaler starts (the retries of a similar run); `loss_in`: where the loss is
    formed (default: outside the run's context, in `loss_dtype`); `observer`: told where the backward begins
    (per-module measurement); `recompute_field`: the field's activations computed again in the backward rather than
    kept (the same values, for one more evaluation each)."""
    leaves = prepared.leaves
    outcome = RunOutcome(n_inputs=len(prepared.inputs))
    loss_in = loss_in or LOSS_PLACEMENTS.get(DEFAULT_LOSS_IN)
    device = prepared.device
    adjoint_scaler = scaling.adjoint_scaler(settings)
    odeint = configured_odeint(
        prepared,
        library,
        method,
        n_timesteps,
        loss_dtype,
        loss_in,
        adjoint_scaler,
        outcome.report,
        observer,
        recompute_field,
    )
    try:
        with measured(device) as forward:
            try:
                loss = step_forward(prepared, copies, odeint, loss_in)
            finally:
                outcome.report.n_function_evals = odeint.calls
                outcome.solves = odeint.solves
        trajectory = odeint.solves[0].states
        outcome.trajectory, outcome.loss, outcome.forward_s = trajectory, loss.detach(), forward.seconds
        if not metrics.all_finite([s.states for s in odeint.solves]):
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
        outcome.backward_s = backward.seconds
        outcome.peak_memory_bytes = backward.peak_memory_bytes or forward.peak_memory_bytes
        # A parameter the loss does not reach has a zero gradient, whichever way the library reports it.
        outcome.grads = [
            torch.zeros_like(leaf) if g is None else g.detach().clone() for g, leaf in zip(result.grads, leaves)
        ]
        outcome.final_scale, outcome.retries = result.final_scale, result.retries
        outcome.backward_passes = result.passes
        # Keep the backward profile of the attempt that counted (a loss scaler may have retried).
        outcome.report.backward = _counted_attempt(outcome.report, n_timesteps, result.passes_after_counted())
        if observer is not None:
            observer.keep_backward_pass(result.passes_after_counted())
        if not metrics.all_finite(outcome.grads):
            outcome.failure = _gradient_overflow(outcome)
    except SystemExit as exc:  # the model's or a library's code tried to end the process: the sweep stops, in one line
        raise InputError(quit_line(f"{library.name} {method.name}: the solve, the model or its loss", exc)) from None
    except Exception as exc:  # noqa: BLE001 - every failure of one configuration becomes a row
        outcome.failure = failures.classify_exception(exc)
        if outcome.failure.final_scale is not None:
            outcome.final_scale, outcome.retries = outcome.failure.final_scale, outcome.failure.retries
            # An exhausted loss scaler's last attempt is the one that counted.
            outcome.report.backward = _counted_attempt(outcome.report, n_timesteps, 0)
    finally:
        for leaf in leaves:
            leaf.grad = None
    return outcome


def configured_odeint(
    prepared: PreparedRun,
    library: SolverLibrary,
    method: Method,
    n_timesteps: int,
    loss_dtype: torch.dtype,
    loss_in: LossPlacement,
    scaler: DynamicAdjointScaler | None,
    report: SolveReport,
    observer: ModuleObserver | None = None,
    recompute_field: bool = False,
) -> ConfiguredOdeint:
    """The `odeint` a run hands its step: inside the run's context where the step is not, its output then cast to
    `loss_dtype`; the grid's times float64 where the loss is (the reference), else float32."""
    outside = not loss_in.step_in_context
    return ConfiguredOdeint(
        library,
        method,
        n_timesteps,
        torch.float64 if loss_dtype == torch.float64 else torch.float32,
        scaler,
        report,
        context=prepared.context if outside else None,
        output_dtype=loss_dtype if outside else None,
        model=prepared.model,
        observer=observer,
        budget=None if method.adaptive else TapeBudget.for_run(prepared.device, n_timesteps, method.n_stages),
        recompute=recompute_field,
    )


def step_forward(
    prepared: PreparedRun, copies: ProblemCopies, odeint: ConfiguredOdeint, loss_in: LossPlacement
) -> torch.Tensor:
    """The problem's step on the run's model and batch, inside the run's context where the placement puts it: the
    loss, checked to be a scalar."""
    observer = odeint.observer if loss_in.step_in_context else None
    # A watched step's uses of weights outside their modules' calls are counted inside the run's precision.
    with (
        prepared.context() if loss_in.step_in_context else nullcontext(),
        observer.watching_weights() if observer is not None else nullcontext(),
    ):
        loss = copies.problem.step(prepared.model, prepared.batch, odeint)
    if not odeint.solves:
        raise TypeError("the step called no odeint: a sweep measures the solves of the odeint it hands the step")
    return checked_loss(loss)


def checked_loss(loss: object) -> torch.Tensor:
    """The step's loss, which must be a scalar tensor (a TypeError names what it was instead)."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else f"a {type(loss).__name__}"
        raise TypeError(f"the loss must be a scalar tensor, got {got}")
    return loss.reshape(())


def _counted_attempt(report: SolveReport, n_timesteps: int, passes_after: int) -> list[StepRecord]:
    """The per-step backward records of the backward pass that counted, in step order: the other passes were a loss
    scaler's search, `passes_after` of them after the one that counted."""
    per_pass = n_timesteps
    end = len(report.backward) - passes_after * per_pass
    return sorted(report.backward[max(end - per_pass, 0) : max(end, 0)], key=lambda r: r.backward_step)


def _gradient_overflow(outcome: RunOutcome) -> Failure:
    # The message names the quantity, not the parameters, so that runs failing for one cause group together.
    y0_finite, params_finite = metrics.all_finite(outcome.input_grads), metrics.all_finite(outcome.param_grads)
    if not (y0_finite or params_finite):
        quantity = "gradient w.r.t. y0 and parameter gradient"
    else:
        quantity = "gradient w.r.t. y0" if not y0_finite else "parameter gradient"
    step = outcome.report.backward_overflow_step
    if step is None:
        # Every step's adjoint stayed finite: the overflow is where the parameter gradient is summed over
        # the steps (under autocast, in the low dtype, on autocast's one cached copy of each weight).
        quantity += "; every step's adjoint stayed finite, the sum of the parameter gradient over the steps overflowed"
    return failures.overflow(quantity, "backward", step)
