"""The fine reference: the sweep's problem solved far more accurately than any grid of the sweep, once.

Roundoff means little without the discretisation error beside it: euler at n = 8 can be 10% off the ODE's
solution while float16 adds 1e-4. So each (library, method, n_timesteps) float64 reference is also compared
with one float64 solve by the classical RK4 on a grid that holds every output point of every n_timesteps of
the sweep and refines each gap between them to steps of at most 1 / (FINE_FACTOR · largest n_timesteps).
For a smooth problem RK4 at that grid is FINE_FACTOR⁴ = 256 times more accurate than RK4 at the sweep's finest
grid; the solve is repeated at half that density and the difference between the two (divided by 15, RK4's
2⁴ − 1) estimates the fine reference's own error, which the manifest records.

The loss may read every state on the output grid, so its gradient depends on the grid: for each n_timesteps
the loss is taken on the fine trajectory sampled at that grid's points, and the gradient is one backward pass
of the native solver (states stored, steps recomputed; memory grows with the states only). n_timesteps whose
loss reads only states they share (a loss of the final state) share one backward pass.

A model given as its training step reads the states at its own output times, the same for every n_timesteps: its
fine reference is that step run once in float64, every solve in FINE_FACTOR · (largest n_timesteps) equal RK4 steps
across its span (at least MIN_FINE_STEPS), and it serves every n_timesteps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil

import torch

from ..axes.libraries import LIBRARIES
from ..axes.loss_placements import LOSS_PLACEMENTS
from ..axes.methods import METHODS
from ..axes.modes import ProblemCopies, cast_run
from ..solvers import SolveReport, odeint
from . import metrics
from .one_run import configured_odeint, step_forward

FINE_FACTOR = 4
# Even the smallest sweep gets a fine grid of at least this many steps on [0, 1].
MIN_FINE_STEPS = 64


@dataclass
class FineSolution:
    """The fine reference seen through one n_timesteps: its first solve's output states, the loss, and its
    gradients."""

    trajectory: torch.Tensor
    loss: torch.Tensor
    grads: list[torch.Tensor]  # the batch's inputs first (y0), then each trainable parameter, as RunOutcome.grads
    n_inputs: int = 1


@dataclass
class FineReference:
    fine_steps: int  # steps of the fine grid on [0, 1]
    at: dict[int, FineSolution]  # n_timesteps -> the fine solution on that grid
    # The estimated relative error of the fine reference itself (final state, y0 and parameter gradients).
    estimated_error: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def describe(self) -> dict:
        return {
            "method": "rk4 (classical), native solver, float64",
            "fine_steps": self.fine_steps,
            "estimated_rel_err": self.estimated_error,
            "seconds": round(self.seconds, 3),
        }


def fine_grid(timesteps: list[int], steps: int) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """A grid on [0, 1] through every point k/n of every n in `timesteps`, no step longer than 1/steps;
    returns it (float64) and, per n, the indices of its n + 1 points in it."""
    outputs = sorted({Fraction(k, n) for n in timesteps for k in range(n + 1)})
    points: list[Fraction] = [outputs[0]]
    position = {outputs[0]: 0}
    for a, b in zip(outputs, outputs[1:]):
        sub = ceil((b - a) * steps)
        points += [a + (b - a) * Fraction(j, sub) for j in range(1, sub + 1)]
        position[b] = len(points) - 1
    t = torch.tensor([float(p) for p in points], dtype=torch.float64)
    index = {n: torch.tensor([position[Fraction(k, n)] for k in range(n + 1)]) for n in timesteps}
    return t, index


def fine_steps(timesteps: list[int]) -> int:
    """Steps per unit time of the fine grid; the self-check solves again at half of them."""
    return max(FINE_FACTOR * max(timesteps), MIN_FINE_STEPS)


def _rel_err_or_none(value: torch.Tensor | None, reference: torch.Tensor | None) -> float | None:
    return None if value is None or reference is None else metrics.rel_err(value, reference)


def combine_fine(
    steps: int, fine: dict[int, FineSolution], half: dict[int, FineSolution], seconds: float
) -> FineReference:
    """The fine reference from its two solves (which may have run in different processes)."""
    picks = (
        ("final_state", lambda s: s.trajectory[-1]),
        ("grad_y0", lambda s: metrics.joined(s.grads[: s.n_inputs])),
        ("grad_params", lambda s: metrics.flatten(s.grads[s.n_inputs :])),
    )
    estimated = {}
    for name, pick in picks:
        errors = [_rel_err_or_none(pick(half[n]), pick(fine[n])) for n in fine]
        if None not in errors:  # a batch without floating-point inputs has no input gradient
            estimated[name] = max(e / 15 for e in errors if e is not None)
    return FineReference(steps, fine, estimated, seconds)


def solve_on_fine_grid(
    copies: ProblemCopies, timesteps: list[int], steps: int, device: torch.device
) -> dict[int, FineSolution]:
    """A trajectory problem's fine reference: one solve through every output point of every n_timesteps, and the loss
    read through each n_timesteps' points (one backward pass per distinct cotangent)."""
    trajectory_problem = copies.trajectory
    assert trajectory_problem is not None, "a step's fine reference is solve_step_on_fine_grid's"
    prepared = cast_run(copies, torch.float64)
    t, index = fine_grid(timesteps, steps)
    t = t.to(device)
    trajectory = odeint(prepared.model, prepared.batch, t, method="rk4_classical")
    leaves = prepared.leaves
    solutions: dict[int, FineSolution] = {}
    done: list[tuple[torch.Tensor, list[torch.Tensor]]] = []  # (cotangent on the fine grid, gradients)
    for n in sorted(timesteps):
        points = index[n].to(device)
        sampled = trajectory.detach()[points].requires_grad_(True)
        with torch.enable_grad():
            loss = trajectory_problem.loss(sampled)
            (on_points,) = torch.autograd.grad(loss, sampled)
        cotangent = torch.zeros_like(trajectory)
        cotangent[points] = on_points
        grads = next((g for c, g in done if torch.equal(c, cotangent)), None)
        if grads is None:
            found = torch.autograd.grad(trajectory, leaves, cotangent, retain_graph=True, allow_unused=True)
            grads = [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(found, leaves)]
            done.append((cotangent, grads))
        solutions[n] = FineSolution(trajectory.detach()[points], loss.detach(), grads)
    return solutions


def solve_step_on_fine_grid(copies: ProblemCopies, steps: int, device: torch.device) -> FineSolution:
    """A model's step in float64 with every solve in `steps` equal steps of the classical RK4 across its span: the
    fine reference of a step, the same for every n_timesteps (its output times are the step's own)."""
    prepared = cast_run(copies, torch.float64)
    placement = LOSS_PLACEMENTS.get("float32")
    odeint = configured_odeint(
        prepared,
        LIBRARIES.get("native"),
        METHODS.get("rk4_classical"),
        steps,
        torch.float64,
        placement,
        None,
        SolveReport(),
    )
    leaves = prepared.leaves
    with torch.enable_grad():
        loss = step_forward(prepared, copies, odeint, placement)
        found = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(found, leaves)]
    return FineSolution(odeint.solves[0].states, loss.detach(), grads, len(prepared.inputs))
