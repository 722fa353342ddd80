"""The model's contract, checked before anything runs: its step evaluated once (forward only, one Euler step per solve,
the native solver) in float64 for the reference and in every precision the grid uses, so that a step that cannot run
is one line now, not a failed row per configuration, and a reference that cannot run is never taken for a failure of
the low dtype. What the float64 evaluation saw of the solves (their spans and sizes) is the problem's shape: the
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
from ..axes.modes import MODES, PreparedRun, ProblemCopies, cast_run
from ..axes.modes.base import run_device
from ..core.errors import InputError, one_line
from ..core.user_code import quit_line
from ..solvers import SolveReport
from .one_run import configured_odeint, step_forward
from .torchdiffeq_routing import RoutedSolves, routed_solves, routed_words

# The check's solver: what it evaluates is the user's code in each precision, not a method's accuracy.
_CHECK_LIBRARY, _CHECK_METHOD, _CHECK_STEPS = "native", "euler", 1


@dataclass(frozen=True)
class ProblemShape:
    """What the step's solves are: the first one's span and tuple parts, how many there are, and the largest state."""

    t0: float
    t1: float
    state_values: int  # elements of the largest state any solve holds: a trajectory holds N + 1 of them
    part_sizes: tuple[int, ...] | None = None  # the first solve's tuple parts (None: a single tensor)
    n_solves: int = 1
    routed: tuple[RoutedSolves, ...] = ()  # the solves that came through torchdiffeq's names, by name

    def describe(self) -> str:
        """What the contract check saw of a training step, in words for the plan's lines."""
        parts = f" in {len(self.part_sizes)} parts" if self.part_sizes else ""
        solves = f"{self.n_solves} solve{'s' if self.n_solves > 1 else ''}"
        if self.routed:
            solves += f" ({routed_words(self.routed)}, routed to the library under test)"
        return (
            f"training step: {solves} per step, the first from t = {self.t0:.4g} to {self.t1:.4g}, each in "
            f"n_timesteps equal steps; the largest state holds {self.state_values:,} values{parts}"
        )

    @classmethod
    def of(cls, copies: ProblemCopies) -> ProblemShape:
        """A trajectory problem's shape, known without running it: one solve of y0 on [0, 1]."""
        trajectory = copies.trajectory
        assert trajectory is not None, "a step's shape is found by evaluating it (check_contract)"
        return cls(0.0, 1.0, trajectory.y0.numel())


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
    seen = {}
    for dtype, role in roles.items():
        try:
            seen[dtype] = evaluate(copies, cast_run(copies, dtype), placement, dtype)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's step failed: say where, in one line
            raise InputError(f"model {name}: its step fails in {dtype_name(dtype)} ({role}): {one_line(exc)}") from None
    solves = seen[torch.float64]
    first = solves[0]
    sizes = tuple(first.part_sizes) if first.part_sizes is not None else None
    largest = max(s.states[0].numel() for s in solves)
    return ProblemShape(first.t0, first.t1, largest, sizes, len(solves), routed_solves(s.origin for s in solves))


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
    library, method = LIBRARIES.get(_CHECK_LIBRARY), METHODS.get(_CHECK_METHOD)
    odeint = configured_odeint(prepared, library, method, _CHECK_STEPS, loss_dtype, loss_in, None, SolveReport())
    try:
        step_forward(prepared, copies, odeint, loss_in)
    except SystemExit as exc:
        raise InputError(quit_line("the model's step", exc)) from None
    return odeint.solves


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
