"""The fine reference: the sweep's problem solved far more accurately than any grid of the sweep, once.

Roundoff means little without the discretisation error beside it: euler at n = 8 can be 10% off the ODE's
solution while float16 adds 1e-4. So each (library, method, n_timesteps) float64 reference is also compared
with one float64 solve by the classical RK4 on a grid that holds every output point of every n_timesteps of
the sweep and refines each gap between them to steps of at most 1 / (FINE_FACTOR · largest n_timesteps).
For a smooth problem RK4 at that grid is FINE_FACTOR⁴ = 256 times more accurate than RK4 at the sweep's finest
grid; but a right-hand side that is not smooth (OT-Flow's HJB penalty integrates an absolute value, whose kink
costs RK4 its order) converges more slowly and erratically, so the fine reference's own error is not assumed: the
solve is repeated with every step doubled and quadrupled (the half and the quarter density, grids nested in the fine
one), and the order and the fine solve's error are observed from their differences (fine_error.py), recorded in the
rows and the manifest.

The loss may read every state on the output grid, so its gradient depends on the grid: for each n_timesteps
the loss is taken on the fine trajectory sampled at that grid's points, and the gradient is one backward pass
of the native solver (states stored, steps recomputed; memory grows with the states only). n_timesteps whose
loss reads only states they share (a loss of the final state) share one backward pass.

A model given as its training step reads the states at its own output times, the same for every n_timesteps: its
fine reference is that step run once in float64, every solve in FINE_FACTOR · (largest n_timesteps) equal RK4 steps
across its span (at least MIN_FINE_STEPS), and it serves every n_timesteps. Output times that fall between two of
those steps are read off by linear interpolation, as the runs read theirs, which is second order: such a reference
converges at about order 2 however smooth the right-hand side is, so it counts them (`interpolated_times`) for the
report to name the cause of a low order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil

import torch

from ..axes.libraries import LIBRARIES
from ..axes.loss_placements import LOSS_PLACEMENTS
from ..axes.methods import METHODS
from ..axes.methods.rk4 import CLASSICAL
from ..axes.modes import ProblemCopies, cast_run
from ..solvers import native
from ..solvers.grid_output import equal_grid
from . import metrics
from .draws import same_draws
from .fine_error import RK4_ORDER, differences, own_error, shared_order
from .one_run import RunOutcome, step_forward
from .run_spec import RunSpec
from .solve_calls import ConfiguredOdeint

FINE_FACTOR = 4
# The fine reference's solver and rule: the native solver's classical RK4, in float64.
FINE_LIBRARY, FINE_TABLEAU = "native", CLASSICAL
# Even the smallest sweep gets a fine grid of at least this many steps on [0, 1].
MIN_FINE_STEPS = 64
# The fine reference is solved three times, each grid's steps those of the fine grid joined in twos and fours.
COARSENINGS = (1, 2, 4)


@dataclass
class FineSolution:
    """The fine reference seen through one n_timesteps: its solve of record's output states, the loss, and its
    gradients."""

    trajectory: torch.Tensor
    loss: torch.Tensor
    grads: list[torch.Tensor]  # the batch's inputs first (y0), then each trainable parameter, as RunOutcome.grads
    n_inputs: int = 1
    # Output times of the solves read between grid points (None: not known, a piece written before they were counted).
    interpolated_times: int | None = None


@dataclass
class FineReference:
    fine_steps: int  # steps of the fine grid on [0, 1]
    at: dict[int, FineSolution]  # n_timesteps -> the fine solution on that grid
    # The estimated relative error of the fine reference itself (final state, y0 and parameter gradients); NaN where
    # the three densities did not converge, so that nothing is resolved against it.
    estimated_error: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    # The order at which the three densities converged, per quantity (None: they agree to roundoff).
    observed_order: dict[str, float | None] = field(default_factory=dict)
    # Output times read between grid points by linear interpolation, the most of any density (None: not known).
    interpolated_times: int | None = None

    def describe(self) -> dict:
        return {
            "method": "rk4 (classical), native solver, float64",
            "fine_steps": self.fine_steps,
            "densities": [self.fine_steps // c for c in COARSENINGS],
            "estimated_rel_err": self.estimated_error,
            "observed_order": self.observed_order,
            "interpolated_times": self.interpolated_times,
            "seconds": round(self.seconds, 3),
        }


def fine_grid(timesteps: list[int], steps: int, coarsening: int = 1) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """A grid on [0, 1] through every point k/n of every n in `timesteps`, no step longer than 1/steps, whose gaps
    are cut in a multiple of the largest coarsening; with `coarsening`, that grid with its steps joined in that many
    (so the three densities' grids nest). Returns it (float64) and, per n, the indices of its n + 1 points in it."""
    outputs = sorted({Fraction(k, n) for n in timesteps for k in range(n + 1)})
    points: list[Fraction] = [outputs[0]]
    position = {outputs[0]: 0}
    widest = max(COARSENINGS)
    for a, b in zip(outputs, outputs[1:]):
        sub = ceil((b - a) * steps / widest) * widest // coarsening
        points += [a + (b - a) * Fraction(j, sub) for j in range(1, sub + 1)]
        position[b] = len(points) - 1
    t = torch.tensor([float(p) for p in points], dtype=torch.float64)
    index = {n: torch.tensor([position[Fraction(k, n)] for k in range(n + 1)]) for n in timesteps}
    return t, index


def fine_steps(timesteps: list[int]) -> int:
    """Steps per unit time of the fine grid; its self-check solves again with a half and a quarter of them."""
    return max(FINE_FACTOR * max(timesteps), MIN_FINE_STEPS)


# The quantities whose error the fine reference estimates, and how each is read from a solution; the gradients come
# from one adjoint solve.
GRADIENTS = ("grad_y0", "grad_params")
ESTIMATED = (
    ("final_state", lambda s: s.trajectory[-1]),
    ("grad_y0", lambda s: metrics.flatten(s.grads[: s.n_inputs])),
    ("grad_params", lambda s: metrics.flatten(s.grads[s.n_inputs :])),
)


def combine_fine(
    steps: int,
    fine: dict[int, FineSolution],
    half: dict[int, FineSolution],
    quarter: dict[int, FineSolution],
    seconds: float,
) -> FineReference:
    """The fine reference from its three solves (which may have run in different processes): its estimated error per
    quantity is the largest over the n_timesteps (NaN if any is unknown), with the order used there."""
    found: dict[str, list[tuple[float, float | None]]] = {name: [] for name, _ in ESTIMATED}
    for n in fine:
        at = {name: differences(pick(fine[n]), pick(half[n]), pick(quarter[n])) for name, pick in ESTIMATED}
        gradients = shared_order([at[name] for name in GRADIENTS])
        for name, difference in at.items():
            order = gradients if name in GRADIENTS else difference.order
            shrinks = difference.order is None or difference.order > 0
            found[name].append((own_error(difference, order) if shrinks else math.nan, order))
    estimated: dict[str, float] = {}
    orders: dict[str, float | None] = {}
    for name, pairs in found.items():
        error, order = max(pairs, key=lambda pair: math.inf if math.isnan(pair[0]) else pair[0])
        estimated[name], orders[name] = error, None if order is None else min(order, RK4_ORDER)
    counts = [s.interpolated_times for density in (fine, half, quarter) for s in density.values()]
    interpolated = None if any(c is None for c in counts) else max((c for c in counts if c is not None), default=0)
    return FineReference(steps, fine, estimated, seconds, orders, interpolated)


def solve_on_fine_grid(
    copies: ProblemCopies,
    timesteps: list[int],
    steps: int,
    device: torch.device,
    coarsening: int = 1,
    draws: bool = False,
) -> dict[int, FineSolution]:
    """A trajectory problem's fine reference: one solve through every output point of every n_timesteps, and the loss
    read through each n_timesteps' points (one backward pass per distinct cotangent). `draws`: the problem draws random
    numbers (its loss: a vector field that draws at each evaluation has no fine reference); each n_timesteps is then
    solved on its own on draw 0, so that its loss takes the numbers its float64 reference's loss took (in one solve
    shared by several losses, the second would take the numbers after the first's)."""
    if not draws:
        return _fine_solutions(copies, timesteps, steps, device, coarsening, timesteps)
    solutions: dict[int, FineSolution] = {}
    for n in timesteps:
        with same_draws(copies, 0, ("fine", steps, coarsening, n)) as drawn:
            solutions |= _fine_solutions(copies, timesteps, steps, device, coarsening, [n])
            drawn.complete = True
    return solutions


def _fine_solutions(
    copies: ProblemCopies, timesteps: list[int], steps: int, device: torch.device, coarsening: int, read: list[int]
) -> dict[int, FineSolution]:
    """The fine grid through the points of every n of `timesteps`, solved once; the loss read at the points of each n
    of `read`."""
    trajectory_problem = copies.trajectory
    assert trajectory_problem is not None, "a step's fine reference is solve_step_on_fine_grid's"
    prepared = cast_run(copies, torch.float64)
    t, index = fine_grid(timesteps, steps, coarsening)
    t = t.to(device)
    # The native solver as the sweep's own runs call it (axes/libraries/native.py), not through the drop-in: the field
    # is the sweep's, whose contract check saw every evaluation of its step (measuring/outside_tensors.py), so the
    # drop-in's later-reach walk of the kept graphs (a second of CPU a default sweep) could find nothing.
    trajectory = native.odeint(prepared.model, prepared.batch, t, FINE_TABLEAU)
    leaves = prepared.leaves
    solutions: dict[int, FineSolution] = {}
    done: list[tuple[torch.Tensor, list[torch.Tensor]]] = []  # (cotangent on the fine grid, gradients)
    for n in sorted(read):
        points = index[n].to(device)
        sampled = trajectory.detach()[points].requires_grad_(True)
        with torch.enable_grad():
            loss = trajectory_problem.loss(sampled)
            (on_points,) = torch.autograd.grad(loss, sampled)
        cotangent = torch.zeros_like(trajectory)
        cotangent[points] = on_points
        grads = next((g for c, g in done if torch.equal(c, cotangent)), None)
        if grads is None:
            # The cotangent enters as the gradient of <trajectory, cotangent>, the same bits (1 · c = c), not as
            # grad_outputs: torch checks those with its symbolic shapes, whose first use imports sympy (0.4 s a
            # process).
            pairing = (trajectory * cotangent).sum()
            found = torch.autograd.grad(pairing, leaves, retain_graph=True, allow_unused=True)
            grads = [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(found, leaves)]
            done.append((cotangent, grads))
        # The fine grid holds every output point: nothing is read between its points.
        solutions[n] = FineSolution(trajectory.detach()[points], loss.detach(), grads, interpolated_times=0)
    return solutions


def fine_from_reference(
    copies: ProblemCopies, timesteps: list[int], steps: int, coarsening: int, reference: RunOutcome
) -> dict[int, FineSolution] | None:
    """What `solve_on_fine_grid` gives at `coarsening`, read off the float64 reference of the classical RK4 at the
    largest n_timesteps where that density's grid is that reference's (the equal steps of the largest n): the same
    solve, so the same states. Each n_timesteps' gradient is the reference's where its loss sends the same cotangent
    into the solve as the reference's loss (a loss of the final state); None where the grids differ or a loss reads
    other states (then the density is solved on its own)."""
    trajectory_problem = copies.trajectory
    assert trajectory_problem is not None, "a step's fine reference is solve_step_on_fine_grid's"
    t, index = fine_grid(timesteps, steps, coarsening)
    largest = max(timesteps)
    grid = equal_grid(0.0, 1.0, largest, torch.float64, "cpu")
    if reference.trajectory is None or len(reference.trajectory) != len(grid) or not torch.equal(t, grid):
        return None
    trajectory = reference.trajectory
    device = trajectory.device
    cotangents: dict[int, torch.Tensor] = {}
    losses: dict[int, torch.Tensor] = {}
    for n in sorted(timesteps):
        points = index[n].to(device)
        sampled = trajectory[points].requires_grad_(True)
        with torch.enable_grad():
            losses[n] = trajectory_problem.loss(sampled)
            (on_points,) = torch.autograd.grad(losses[n], sampled)
        cotangents[n] = torch.zeros_like(trajectory).index_put_((points,), on_points)
    if not all(torch.equal(cotangents[n], cotangents[largest]) for n in timesteps):
        return None
    return {
        n: FineSolution(
            trajectory[index[n].to(device)], losses[n].detach(), list(reference.grads), reference.n_inputs, 0
        )
        for n in timesteps
    }


def solve_step_on_fine_grid(copies: ProblemCopies, steps: int, device: torch.device) -> FineSolution:
    """A model's step in float64 with every solve in `steps` equal steps of the classical RK4 across its span: the
    fine reference of a step, the same for every n_timesteps (its output times are the step's own)."""
    prepared = cast_run(copies, torch.float64)
    placement = LOSS_PLACEMENTS.get("float32")
    run = RunSpec(
        prepared, copies, LIBRARIES.get(FINE_LIBRARY), METHODS.get(FINE_TABLEAU), steps, torch.float64, placement
    )
    odeint = ConfiguredOdeint(run)
    leaves = prepared.leaves
    # On draw 0 of the step's random numbers, as the references of draw 0 (draws.py).
    with same_draws(copies, 0, ("fine", steps)) as drawn, torch.enable_grad():
        loss = step_forward(run, odeint)
        found = torch.autograd.grad(loss, leaves, allow_unused=True)
        drawn.complete = True
    grads = [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(found, leaves)]
    interpolated = sum(s.interpolated for s in odeint.solves)
    return FineSolution(odeint.record.states, loss.detach(), grads, len(prepared.inputs), interpolated)
