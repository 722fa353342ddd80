"""The model's contract, checked before anything runs: its step evaluated once (forward only, one Euler step per solve,
the native solver) in float64 for the reference and in every precision the grid uses, so that a step that cannot run
is one line now, not a failed row per configuration, and a reference that cannot run is never taken for a failure of
the low dtype; a step that trains a tensor outside its model, whose gradient no row would measure, is refused too
(outside_tensors.py). What the float64 evaluation saw of the solves (their spans and sizes) is the problem's shape: the
memory bounds and the rows' span read it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..axes.arithmetics import ARITHMETICS, ArithmeticRequest
from ..axes.dtypes import DTYPES
from ..axes.grid import Configuration
from ..axes.libraries import LIBRARIES
from ..axes.loss_placements import LOSS_PLACEMENTS, LossPlacement
from ..axes.methods import METHODS
from ..axes.models.inputs import floating_inputs
from ..axes.modes import MODES, PreparedRun, ProblemCopies, cast_run
from ..axes.modes.base import run_device
from ..core.errors import InputError, one_line
from ..core.user_code import quit_line
from .batch_size import BatchSize, step_batch_size
from .draws import GROWS_WITH_STEPS, DrawRun, same_draws
from .narrow_constants import NarrowConstants
from .narrow_origins import NarrowOrigins
from .one_run import step_forward
from .outside_tensors import OutsideTensors, refusal
from .run_spec import RunSpec
from .solve_calls import ConfiguredOdeint
from .torchdiffeq_routing import RoutedSolves, routed_solves, routed_words

# The check's solver: what it evaluates is the user's code in each precision, not a method's accuracy.
_CHECK_LIBRARY, _CHECK_METHOD, _CHECK_STEPS = "native", "euler", 1
_CONTRACT = "contract check"  # the check's solves draw in an order of their own (draws.py)


@dataclass(frozen=True)
class ProblemShape:
    """What the step's solves are: the span and tuple parts of the one of record, how many there are, and the largest
    state."""

    t0: float
    t1: float
    state_values: int  # elements of the largest state any solve holds: a trajectory holds N + 1 of them
    part_sizes: tuple[int, ...] | None = None  # the solve of record's tuple parts (None: a single tensor)
    n_solves: int = 1
    # Which solve is the one of record, in the step's order (0: the first), and why: the Problem named it, or it spans
    # longest.
    solve_of_record: int = 0
    solve_of_record_named: bool = False
    # Places in the user's code where the float64 evaluation computed with narrower values (narrow_constants.py).
    narrow_in_float64: tuple[str, ...] = ()
    # Why no place could be looked for where none is named: the watch saw none of the user's operations.
    narrow_unwatched: str | None = None
    # What the step drew in its float64 evaluation (draws.py's record: every run is given the same); None: nothing.
    draws: dict | None = None
    # The points of one batch, and where they were read (batch_size.py); None: not known, batch_size_from says why.
    batch_size: int | None = None
    batch_size_from: str | None = None
    # What the step's own odeint calls named (method, rtol, atol, the options' keys), which the sweep's solves ignore.
    solver_arguments: dict | None = None
    routed: tuple[RoutedSolves, ...] = ()  # the solves that came through torchdiffeq's names, by name

    def describe(self) -> str:
        """What the contract check saw of a training step, in words for the plan's lines."""
        parts = f" in {len(self.part_sizes)} parts" if self.part_sizes else ""
        solves = f"{self.n_solves} solve{'s' if self.n_solves > 1 else ''}"
        if self.routed:
            solves += f" ({routed_words(self.routed)}, routed to the library under test)"
        record = record_words(self.n_solves, self.solve_of_record, self.solve_of_record_named)
        return (
            f"training step: {solves} per step, the {record} from t = {self.t0:.4g} to "
            f"{self.t1:.4g}, each in n_timesteps equal steps; the largest state holds {self.state_values:,} "
            f"values{parts}"
        )

    @classmethod
    def of(cls, copies: ProblemCopies) -> ProblemShape:
        """A trajectory problem's shape, known without running it: one solve of y0 on [0, 1]."""
        trajectory = copies.trajectory
        assert trajectory is not None, "a step's shape is found by evaluating it (check_contract)"
        return cls(0.0, 1.0, trajectory.y0.numel())


def record_words(n_solves: int, index: int, named: bool) -> str:
    """Which solve is the one of record, in words: `first solve`, or `solve of record (15 of 15, the longest span;
    Problem(solve_of_record=k) names another)`."""
    if n_solves == 1 or (index == 0 and not named):
        return "first solve"
    why = "named by the Problem's solve_of_record" if named else "the longest span"
    return f"solve of record ({index + 1} of {n_solves}, {why}; Problem(solve_of_record=k) names another)"


@dataclass(frozen=True)
class Precision:
    """One way the grid runs the step: a dtype, mode, arithmetic and rounding, and where the loss is formed."""

    dtype: str
    mode: str
    arithmetic: str
    rounding: str
    loss_in: str

    def describe(self) -> str:
        extra = "" if (self.arithmetic, self.rounding) == ("hardware", "nearest") else f" {self.arithmetic}"
        return f"{self.dtype} {self.mode}{extra} (loss in {self.loss_in})"


def precisions_of(configurations: Iterable[Configuration]) -> list[Precision]:
    """The grid's precisions, each once, in the grid's order."""
    found = {Precision(c.dtype, c.mode, c.arithmetic, c.rounding, c.loss_in): None for c in configurations}
    return list(found)


def check_contract(name: str, copies: ProblemCopies) -> ProblemShape:
    """Evaluate the step in float64 (the reference's precision) and in float32 (the model's own); a failure is an
    InputError naming the precision. Returns the shape the float64 evaluation saw. Where a low precision of the grid
    raises, its configurations fail as rows (that is what they measure): `low_precision_failures` says which."""
    placement = LOSS_PLACEMENTS.get("float32")
    roles = {
        torch.float64: "the reference's, which every configuration is compared with",
        torch.float32: "the model's own",
    }
    seen, draws, named = {}, None, dict[str, object]()
    narrow, origins = NarrowConstants(), NarrowOrigins()
    for dtype, role in roles.items():
        try:
            if dtype == torch.float64:
                with origins, narrow:
                    seen[dtype], draws, named = _same_twice(name, copies, placement)
            else:
                seen[dtype] = evaluate(copies, cast_run(copies, dtype), placement, dtype)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's step failed: say where, in one line
            # A float32 tensor the step made meeting a float64 one: where, and why it is float32.
            where = f"; {origins.failed}" if dtype == torch.float64 and origins.failed else ""
            raise InputError(
                f"model {name}: its step fails in {dtype_name(dtype)} ({role}): {one_line(exc)}{where}"
            ) from None
    solves = seen[torch.float64]
    chosen = getattr(copies.problem, "solve_of_record", None)
    record = of_record(name, chosen, solves)
    first = solves[record]
    sizes = tuple(first.part_sizes) if first.part_sizes is not None else None
    largest = max(s.states[0].numel() for s in solves)
    batch = problem_batch(copies, first.state_shapes)
    return ProblemShape(
        t0=first.t0,
        t1=first.t1,
        state_values=largest,
        part_sizes=sizes,
        n_solves=len(solves),
        solve_of_record=record,
        solve_of_record_named=chosen is not None,
        narrow_in_float64=narrow.lines(),
        narrow_unwatched=narrow.unwatched(_users_functions(copies)),
        draws=draws,
        batch_size=batch.size,
        batch_size_from=batch.source,
        solver_arguments=named or None,
        routed=routed_solves(s.origin for s in solves),
    )


def _users_functions(copies: ProblemCopies) -> list[Callable]:
    problem = copies.problem
    return [f for f in (getattr(problem, "step", None), getattr(problem, "loss", None)) if f is not None]


def of_record(name: str, named: object, solves: list) -> int:
    """The index of the solve of record among a step's `solves`: the one `named` (negative: from the last), else the
    one of the longest span, the first of those (an encoder's short segments are not what the loss reads). A name that
    is no solve's is an InputError."""
    count = len(solves)
    if named is None:
        spans = [abs(s.t1 - s.t0) for s in solves]
        return spans.index(max(spans))
    if isinstance(named, bool) or not isinstance(named, int) or not -count <= named < count:
        raise InputError(
            f"model {name}: solve_of_record={named!r} names no solve: its step makes {count} "
            f"solve{'s' if count > 1 else ''} (0 to {count - 1} in the order it makes them, or -1 for the last)"
        )
    return named % count


def narrow_warning(shape: ProblemShape) -> str | None:
    """The plan's line where the float64 reference computes with narrower values, the first place named; or where
    no place could be looked for."""
    found = shape.narrow_in_float64
    if not found:
        return shape.narrow_unwatched
    more = f" (and {len(found) - 1} more places)" if len(found) > 1 else ""
    return (
        f"the float64 reference computes with float32 values of the model's own code, so it is less precise than "
        f"float64 there: {found[0]}{more}; give such values the dtype of the tensors they meet (`dtype=x.dtype`, "
        "`.to(x)`) rather than float32"
    )


def problem_batch(copies: ProblemCopies, state_shapes: tuple[tuple[int, ...], ...] | None = None) -> BatchSize:
    """The points of one batch and where they were read: a trajectory problem's y0's first dimension; a training
    step's as batch_size.py reads it from `state_shapes` (its first solve's state; found here by evaluating the step
    once where not given)."""
    trajectory = copies.trajectory
    if trajectory is not None:
        y0 = trajectory.y0
        return BatchSize(int(y0.shape[0]) if y0.dim() else 1, "the first dimension of y0")
    declared = getattr(copies.problem, "batch_size", None)
    if declared is None and state_shapes is None:
        solves = evaluate(copies, cast_run(copies, torch.float32), LOSS_PLACEMENTS.get("float32"), torch.float32)
        state_shapes = solves[0].state_shapes
    return step_batch_size(declared, copies.batch, state_shapes or ())


# Two float64 evaluations of one draw that differ by more than this (relative, in the loss) are two computations:
# float64's own nondeterminism (a GPU's atomic sums) is orders of magnitude below, any format's roundoff far above.
SAME_LOSS_RTOL = 1e-10


def _same_twice(name: str, copies: ProblemCopies, placement: LossPlacement) -> tuple[list, dict | None, dict]:
    """The float64 evaluation, made twice on draw 0 of the step's random numbers: its solves, what it drew and what
    its odeint calls named. A step
    that gives another loss the second time would be measured against a reference it does not reproduce, so that is
    an InputError naming the cause: the weights or buffers it changes, else what the sweep does not replay."""
    prepared = cast_run(copies, torch.float64)
    before = {key: value.clone() for key, value in prepared.model.state_dict().items()}
    with same_draws(copies, 0, _CONTRACT) as drawn, OutsideTensors(_known(prepared)) as outside:
        try:
            solves, loss, named = _evaluated(copies, prepared, placement, torch.float64)
        except InputError:
            raise
        except Exception:  # noqa: BLE001 - a trainable tensor outside the model is why, where the step uses one
            _refuse_outside(name, copies, prepared, outside.used(), "uses")
            raise
        drawn.complete = True
    _refuse_outside(name, copies, prepared, outside.reached(loss))
    loss = loss.detach()
    changed = [key for key, value in prepared.model.state_dict().items() if not torch.equal(value, before[key])]
    with same_draws(copies, 0, _CONTRACT) as again:
        _, loss_again, _ = _evaluated(copies, cast_run(copies, torch.float64), placement, torch.float64)
        loss_again = loss_again.detach()
        again.complete = True
    if not torch.allclose(loss, loss_again, rtol=SAME_LOSS_RTOL, atol=0.0, equal_nan=True):
        if changed:
            cause = (
                f"it changes the model's {', '.join(changed[:3])}{' …' if len(changed) > 3 else ''} at each call; "
                "keep them fixed within a step"
            )
        else:
            cause = (
                "it changes between calls by something the sweep does not give every run alike, a random generator of "
                "its own (numpy's default_rng, random.Random) or state kept outside the model; draw with torch's "
                "random functions or numpy's and Python's global generators, which every run is given alike"
            )
        raise InputError(
            f"model {name}: its step gives another loss when evaluated again in float64 on the same random draws "
            f"({float(loss):.17g}, then {float(loss_again):.17g}): {cause}"
        )
    draws = drawn.describe()
    if draws is not None and _draws_grow_with_steps(copies, placement, drawn):
        # Written only where it holds, so that the record of a step whose draws do not depend on the grid reads as
        # before (the fingerprint of its folder holds it).
        draws[GROWS_WITH_STEPS] = True
    return solves, draws, named


def _draws_grow_with_steps(copies: ProblemCopies, placement: LossPlacement, drawn: DrawRun) -> bool:
    """Whether the step draws more with two Euler steps per solve than with one (`drawn`, on the same draw): a vector
    field that draws at each evaluation, whose solve on a finer grid is another random ODE (no fine reference)."""
    with same_draws(copies, 0, (_CONTRACT, 2 * _CHECK_STEPS)) as finer:
        _evaluated(copies, cast_run(copies, torch.float64), placement, torch.float64, 2 * _CHECK_STEPS)
        finer.complete = True
    return not drawn.drew_as_much(finer)


def _known(prepared: PreparedRun) -> list[torch.Tensor]:
    """What a run's gradients are measured for: the batch's tensors and the model's parameters (a frozen one too, which
    a step may unfreeze)."""
    return [*floating_inputs(prepared.batch), *prepared.model.parameters()]


def _refuse_outside(
    name: str, copies: ProblemCopies, prepared: PreparedRun, tensors: list[torch.Tensor], verb: str = "trains"
) -> None:
    """Refuse a step that trains (where its evaluation failed: uses) tensors outside the model (outside_tensors.py)."""
    if tensors:
        raise refusal(f"model {name}", tensors, prepared.model, copies.model, _users_functions(copies), verb)


def low_precision_failures(copies: ProblemCopies, precisions: list[Precision], fp8_scaling: bool) -> list[str]:
    """A line for each low precision of the grid in which the step raises: its configurations will fail as rows."""
    lines = []
    for precision in precisions:
        if DTYPES.get(precision.dtype).torch_dtype not in (torch.float32, torch.float64):
            reason = _failure(copies, precision, fp8_scaling)
            if reason is not None:
                lines.append(f"the step raises in {precision.describe()}: {reason}; those configurations will fail")
    return lines


def _failure(copies: ProblemCopies, precision: Precision, fp8_scaling: bool) -> str | None:
    dtype = DTYPES.get(precision.dtype)
    arithmetic = ARITHMETICS.get(precision.arithmetic)
    device = run_device(copies.model, copies.batch)
    if arithmetic.skip_reason(dtype, precision.rounding) or arithmetic.unsupported_reason(dtype, device):
        return None  # those configurations are skipped, or fail as unsupported, without running the step
    request = ArithmeticRequest(precision.rounding, fp8_scaling)
    try:
        prepared = arithmetic.prepare(MODES.get(precision.mode), copies, dtype, request)
        evaluate(copies, prepared, LOSS_PLACEMENTS.get(precision.loss_in), torch.float32)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's step failed in this precision
        return one_line(exc)
    return None


def evaluate(copies: ProblemCopies, prepared: PreparedRun, loss_in: LossPlacement, loss_dtype: torch.dtype) -> list:
    """The step's forward on the run's model and batch, one Euler step per solve; its solves' records."""
    return _evaluated(copies, prepared, loss_in, loss_dtype)[0]


def _evaluated(
    copies: ProblemCopies,
    prepared: PreparedRun,
    loss_in: LossPlacement,
    loss_dtype: torch.dtype,
    n_timesteps: int = _CHECK_STEPS,
) -> tuple[list, torch.Tensor, dict]:
    library, method = LIBRARIES.get(_CHECK_LIBRARY), METHODS.get(_CHECK_METHOD)
    run = RunSpec(prepared, copies, library, method, n_timesteps, loss_dtype, loss_in)
    odeint = ConfiguredOdeint(run)
    try:
        loss = step_forward(run, odeint)
    except SystemExit as exc:
        raise InputError(quit_line("the model's step", exc)) from None
    return odeint.solves, loss, odeint.named


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def evaluate_once(copies: ProblemCopies) -> Callable[[], object]:
    """One float32 evaluation of the model, without gradients: the vector field at (0, y0) for a trajectory problem,
    the step with one Euler step per solve otherwise (what the thread count is chosen from)."""
    trajectory = copies.trajectory
    if trajectory is not None:
        y0 = trajectory.y0

        def field() -> object:
            with torch.no_grad():
                return trajectory.func(torch.zeros((), dtype=y0.dtype, device=y0.device), y0)

        return field

    def step() -> object:
        with torch.no_grad():
            return evaluate(copies, cast_run(copies, torch.float32), LOSS_PLACEMENTS.get("float32"), torch.float32)

    return step
