"""One run of one configuration: forward solve, loss and backward, with any failure named.

Kept apart from the loop over a configuration's repeats (`measure.py`) because the training step and the tests run
exactly this too, one run at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace

import torch

from ..axes.scalings import ScalerSettings, Scaling
from ..core.devices import measured
from ..core.errors import InputError
from ..core.user_code import quit_line
from ..solvers import DynamicAdjointScaler, SolveReport, StepRecord
from ..solvers.overflow_stop import whole_passes
from ..solvers.scaler import AdjointScalerSlot
from . import failures, metrics
from .draws import DrawRecord, DrawRun, same_draws
from .failures import Failure
from .run_spec import RunSpec
from .solve_calls import ConfiguredOdeint, SolveRecord
from .torchdiffeq_routing import routed_to


@dataclass
class RunOutcome:
    """What one run gave: its solution, loss and gradients (detached), the scaler's end, its times, and its failure."""

    trajectory: torch.Tensor | None = None  # the solve of record's states at its output times (solve_calls.SolveRecord)
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
    solves: list[SolveRecord] = field(default_factory=list)  # every solve of the step
    of_record: int = 0  # which of `solves` is the trajectory's

    @property
    def input_grads(self) -> list[torch.Tensor]:
        return self.grads[: self.n_inputs]

    @property
    def param_grads(self) -> list[torch.Tensor]:
        return self.grads[self.n_inputs :]


def run_once(spec: RunSpec, scaling: Scaling, settings: ScalerSettings, scale_hint: int | None = None) -> RunOutcome:
    """Forward (the problem's step, its solves by the run's library and method in n_timesteps equal steps each), loss
    and backward of one run by `scaling`; any exception or non-finite value becomes `failure`. `scale_hint`: where a
    searching loss scaler starts (the retries of a similar run)."""
    record = spec.observer.draws if spec.observer is not None else None
    with _draws(spec, record) as drawn:
        scaler = scaling.adjoint_scaler(settings)
        outcome = Forward(spec, settings, scaler).backward(scaling, scale_hint, scaler)
        drawn.complete = outcome.failure is None
    return outcome


def runs_sharing_forward(
    spec: RunSpec, backwards: Sequence[tuple[Scaling, int | None]], settings: ScalerSettings
) -> list[RunOutcome]:
    """The runs of scalings that `share_forward` (each with its hint), as `run_once` gives them, from one forward: a
    scaling acts in the backward only (the native solver reads its adjoint scaler when its backward starts), so the
    forward is the same for each. Their backward passes follow in the order given, each but the last keeping the
    graph for the next. A watched run (`spec.observer`) runs alone."""
    assert spec.observer is None and not spec.recompute_field, "a shared forward is neither watched nor recomputed"
    with _draws(spec) as drawn:
        scalers = [scaling.adjoint_scaler(settings) for scaling, _ in backwards]
        slot = AdjointScalerSlot() if any(scaler is not None for scaler in scalers) else None
        forward = Forward(spec, settings, slot)
        outcomes = []
        for index, ((scaling, hint), scaler) in enumerate(zip(backwards, scalers, strict=True)):
            if slot is not None:
                slot.current = scaler
            outcomes.append(forward.backward(scaling, hint, scaler, keep_graph=index < len(backwards) - 1))
        drawn.complete = all(outcome.failure is None for outcome in outcomes)
    return outcomes


def _draws(spec: RunSpec, record: DrawRecord | None = None) -> AbstractContextManager[DrawRun]:
    """The step's random draws in a run: draw `spec.draw` of the run's solve, as every run of it is given (draws.py),
    kept in `record` (a watched run's, whose calls are re-run on them)."""
    if spec.draw is None:
        return nullcontext(DrawRun())
    return same_draws(spec.copies, spec.draw, (spec.library.name, spec.method.name, spec.n_timesteps), record)


class Forward:
    """A run's forward pass (solves, loss), done once on construction; `backward` completes a run from it, as often
    as the graph is kept. `solver_scaler`: what the solver scales its adjoint with (a run alone hands its scaler to
    the solver here; a shared forward hands the slot each backward fills)."""

    def __init__(
        self,
        spec: RunSpec,
        settings: ScalerSettings,
        solver_scaler: DynamicAdjointScaler | AdjointScalerSlot | None,
    ) -> None:
        self.spec, self.settings = spec, settings
        self.prepared, self.library, self.method = spec.prepared, spec.library, spec.method
        self.observer, self.device = spec.observer, spec.prepared.device
        # A probe of a loss scale may stop at its first non-finite step (solvers/overflow_stop.py) where that step is
        # sure to reach a leaf's gradient, the trajectory's y0; a watched run's observer counts whole passes.
        self.whole_passes = spec.observer is not None or spec.copies.trajectory is None
        self.report = SolveReport()
        self.shared = RunOutcome(n_inputs=len(spec.prepared.inputs), report=self.report)
        self.loss: torch.Tensor | None = None
        self.forward_peak: int | None = None
        self._run(solver_scaler)

    def _run(self, solver_scaler: DynamicAdjointScaler | AdjointScalerSlot | None) -> None:
        outcome, loss_in = self.shared, self.spec.loss_in
        odeint = ConfiguredOdeint(self.spec, solver_scaler, self.report)
        if self.observer is not None:
            self.observer.solving_with(RecomputedSolves(odeint))
        try:
            with measured(self.device) as forward:
                try:
                    loss = step_forward(self.spec, odeint)
                finally:
                    outcome.report.n_function_evals = odeint.calls
                    outcome.solves = odeint.solves
            trajectory, outcome.of_record = odeint.record.states, odeint.of_record
            outcome.trajectory, outcome.loss, outcome.forward_s = trajectory, loss.detach(), forward.seconds
            self.forward_peak = forward.peak_memory_bytes
            if not metrics.all_finite([s.states for s in odeint.solves]):
                outcome.failure = failures.overflow("solution", "forward", outcome.report.forward_overflow_step)
            elif not metrics.all_finite([loss]):
                # Named with where it was formed: a loss that overflows only inside autocast is the placement's doing.
                outcome.failure = failures.overflow(f"loss (formed {loss_in.where})", "forward", None)
            else:
                self.loss = loss
        except SystemExit as exc:  # the model's or a library's code tried to end the process: one line, the sweep stops
            raise InputError(quit_line(self._what_ran(), exc)) from None
        except Exception as exc:  # noqa: BLE001 - every failure of one configuration becomes a row
            outcome.failure = failures.classify_exception(exc)

    def backward(
        self,
        scaling: Scaling,
        hint: int | None,
        scaler: DynamicAdjointScaler | None,
        keep_graph: bool = False,
    ) -> RunOutcome:
        """The run completed by `scaling`'s backward pass from this forward (`scaler`: the one the solver uses, which
        for a run alone went to it at the forward); a failed forward is every run's failure."""
        outcome = replace(self.shared, report=replace(self.report, backward=[]))
        if self.loss is None:
            return outcome
        # The solver records this pass in the report it was handed at the forward; each run keeps its own pass.
        report = self.report
        report.backward = []
        leaves = self.prepared.leaves
        try:
            if self.observer is not None:
                self.observer.begin_backward()
            options = {"keep_graph": True} if keep_graph else {}
            with measured(self.device) as backward, whole_passes() if self.whole_passes else nullcontext():
                result = scaling.backward(self.loss, leaves, scaler, self.settings, hint=hint, **options)
            outcome.backward_s = backward.seconds
            outcome.peak_memory_bytes = backward.peak_memory_bytes or self.forward_peak
            # A parameter the loss does not reach has a zero gradient, whichever way the library reports it.
            outcome.grads = [
                torch.zeros_like(leaf) if g is None else g.detach().clone() for g, leaf in zip(result.grads, leaves)
            ]
            outcome.final_scale, outcome.retries = result.final_scale, result.retries
            outcome.backward_passes = result.passes
            # Keep the backward profile of the attempt that counted (a loss scaler may have retried).
            outcome.report.backward = _counted_attempt(report, result.passes_after_counted())
            if self.observer is not None:
                self.observer.keep_backward_pass(result.passes_after_counted())
            if not metrics.all_finite(outcome.grads):
                outcome.failure = _gradient_overflow(outcome, self.prepared.weight_gradient_dtypes)
        except SystemExit as exc:  # the model's or a library's code tried to end the process: one line, the sweep stops
            raise InputError(quit_line(self._what_ran(), exc)) from None
        except Exception as exc:  # noqa: BLE001 - every failure of one configuration becomes a row
            outcome.failure = failures.classify_exception(exc)
            if outcome.failure.final_scale is not None:
                outcome.final_scale, outcome.retries = outcome.failure.final_scale, outcome.failure.retries
                # An exhausted loss scaler's last attempt is the one that counted.
                outcome.report.backward = _counted_attempt(report, 0)
        finally:
            for leaf in leaves:
                leaf.grad = None
        return outcome

    def _what_ran(self) -> str:
        return f"{self.library.name} {self.method.name}: the solve, the model or its loss"


@dataclass(frozen=True)
class RecomputedSolves:
    """A watched run's solves, for its modules' recomputations (module_hooks.RunSolves): a call that solved outside
    the run's solves (an ODEBlock, a whole model) is recomputed with every torchdiffeq call routed to the run's odeint,
    which answers with the configuration's solve (ConfiguredOdeint.recomputing)."""

    odeint: ConfiguredOdeint

    def solving(self) -> bool:
        return self.odeint.solving > 0

    @contextmanager
    def recomputing(self, module: torch.nn.Module | None, float64: bool, route: bool) -> Iterator[None]:
        with self.odeint.recomputing(module, float64), routed_to(self.odeint) if route else nullcontext():
            yield


def step_forward(spec: RunSpec, odeint: ConfiguredOdeint) -> torch.Tensor:
    """The problem's step on the run's model and batch, inside the run's context where its loss placement puts it:
    the loss, checked to be a scalar."""
    prepared, loss_in = spec.prepared, spec.loss_in
    observer = odeint.observer if loss_in.step_in_context else None
    # A watched step's uses of weights outside their modules' calls are counted inside the run's precision.
    with (
        prepared.context() if loss_in.step_in_context else nullcontext(),
        observer.watching_weights() if observer is not None else nullcontext(),
        routed_to(odeint),
    ):
        loss = spec.copies.problem.step(prepared.model, prepared.batch, odeint)
    if not odeint.solves:
        raise TypeError(
            "the step called no solver: a sweep measures the solves of the odeint it hands the step, and of "
            "torchdiffeq's odeint and odeint_adjoint wherever a module imported them"
        )
    return checked_loss(loss)


def checked_loss(loss: object) -> torch.Tensor:
    """The step's loss, which must be a scalar tensor (a TypeError names what it was instead)."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else f"a {type(loss).__name__}"
        raise TypeError(f"the loss must be a scalar tensor, got {got}")
    return loss.reshape(())


def _counted_attempt(report: SolveReport, passes_after: int) -> list[StepRecord]:
    """The per-step backward records of the backward pass that counted, in step order: the other passes were a loss
    scaler's search, `passes_after` of them after the one that counted. Each pass records its steps in increasing
    backward order, so a pass begins where the step does not increase; a probe stopped at an overflow has fewer."""
    starts = [
        i
        for i, record in enumerate(report.backward)
        if i == 0 or record.backward_step <= report.backward[i - 1].backward_step
    ]
    index = len(starts) - 1 - passes_after
    if index < 0:
        return []
    end = starts[index + 1] if index + 1 < len(starts) else len(report.backward)
    return sorted(report.backward[starts[index] : end], key=lambda r: r.backward_step)


def _gradient_overflow(
    outcome: RunOutcome, weight_gradient_dtypes: tuple[torch.dtype, torch.dtype] | None = None
) -> Failure:
    # The message names the quantity, not the parameters, so that runs failing for one cause group together.
    y0_finite, params_finite = metrics.all_finite(outcome.input_grads), metrics.all_finite(outcome.param_grads)
    if not (y0_finite or params_finite):
        quantity = "gradient w.r.t. y0 and parameter gradient"
    else:
        quantity = "gradient w.r.t. y0" if not y0_finite else "parameter gradient"
    step = outcome.report.backward_overflow_step
    if step is None:
        quantity += "; every step's adjoint stayed finite" + _where_weights_overflowed(weight_gradient_dtypes)
    return failures.overflow(quantity, "backward", step)


# More steps than any run makes: a sum of this many finite shares that stays below the sum's dtype's largest value
# cannot have overflowed.
_MANY_STEPS = 2**24


def _where_weights_overflowed(dtypes: tuple[torch.dtype, torch.dtype] | None) -> str:
    """Where a parameter gradient overflowed when every step's adjoint stayed finite, as far as the run's records and
    its mode's arithmetic show it: in one step's share of a weight's gradient (its reduction over the batch), or in
    the sum of the shares over the steps; both where the records do not tell them apart."""
    if dtypes is None:
        return (
            ": a weight's gradient overflowed within one step or in its sum over the steps (the run's records do not "
            "say which)"
        )
    share, total = (str(d).removeprefix("torch.") for d in dtypes)
    if torch.finfo(dtypes[1]).max > torch.finfo(dtypes[0]).max * _MANY_STEPS:
        return (
            f", and each step's share of a weight's gradient, computed in {share}, is summed over the steps in "
            f"{total}, which finite {share} shares cannot overflow: a weight's gradient overflowed within one step"
        )
    return (
        f": a weight's gradient overflowed within one step or in its sum over the steps, both in {share} (the run's "
        "records do not say which)"
    )
