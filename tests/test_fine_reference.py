"""The fine reference's own error estimate: exact on errors of a known form, and within 2× of its error against a solve
8× finer, on a smooth model and on OT-Flow (whose HJB kink costs RK4 its order); its quarter density read off the
float64 reference it coincides with, bit for bit."""

from __future__ import annotations

import math

import pytest
import torch

from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.models import MODELS, TrajectoryProblem, parse_options
from roundoff_analyzer.axes.modes import ProblemCopies, cast_run
from roundoff_analyzer.axes.scalings import ScalerSettings
from roundoff_analyzer.measuring import metrics
from roundoff_analyzer.measuring.discretisation import (
    ESTIMATED,
    FINE_TABLEAU,
    fine_from_reference,
    fine_grid,
    fine_steps,
    solve_on_fine_grid,
)
from roundoff_analyzer.measuring.fine_error import differences, own_error
from roundoff_analyzer.measuring.references import ReferenceCache
from roundoff_analyzer.measuring.yardsticks import Yardsticks
from roundoff_analyzer.solvers import odeint

CPU = torch.device("cpu")


def _solves(error: torch.Tensor, order: float, directions: list[torch.Tensor]):
    """Fine, half and quarter solves of an exact value 1…, with errors of size |error|·(2ᵖ)ᵏ along `directions`."""
    exact = torch.ones(directions[0].shape[0], dtype=torch.float64)
    return [exact + error * 2 ** (order * k) * directions[k] for k in range(3)], exact


@pytest.mark.unit
@pytest.mark.parametrize("order", [1.0, 2.0, 4.0])
def test_errors_along_one_direction_give_richardsons_estimate(order):
    direction = torch.tensor([3.0, -1.0, 2.0], dtype=torch.float64) / math.sqrt(14)
    (fine, half, quarter), exact = _solves(torch.tensor(1e-5), order, [direction] * 3)
    found = differences(fine, half, quarter)
    assert found.order == pytest.approx(order) and found.cosine == pytest.approx(1.0)
    # (relative to |fine| rather than |exact|: the two differ by the error itself)
    assert own_error(found, found.order) == pytest.approx(metrics.rel_err(fine, exact), rel=1e-4)


@pytest.mark.unit
@pytest.mark.parametrize("order", [1.0, 2.0])
def test_errors_in_unrelated_directions_are_not_mistaken_for_their_differences(order):
    # Each density's error orthogonal to the others': the differences are longer than the errors themselves.
    directions = list(torch.eye(3, dtype=torch.float64))
    (fine, half, quarter), exact = _solves(torch.tensor(1e-5), order, directions)
    found = differences(fine, half, quarter)
    assert found.order == pytest.approx(order)
    richardson = found.fine_to_half / (2**order - 1)
    assert richardson > 1.3 * metrics.rel_err(fine, exact)  # the rule that assumes one direction
    assert own_error(found, found.order) == pytest.approx(metrics.rel_err(fine, exact), rel=1e-4)


@pytest.mark.unit
def test_solves_that_agree_to_roundoff_or_do_not_converge():
    x = torch.ones(4, dtype=torch.float64)
    agreeing = differences(x, x + 1e-16, x + 2e-16)
    assert agreeing.order is None and own_error(agreeing, None) <= 1e-15
    diverging = differences(x, x + 1e-3, x + 1e-3 - 1e-4)
    assert diverging.order < 0 and math.isnan(own_error(diverging, diverging.order))


def _estimate_and_truth(model: str, options: dict, timesteps: list[int]) -> list[tuple[str, float, float]]:
    """(quantity, the fine reference's estimated error, its error against a solve 8× finer), on one thread (a sweep's
    processes solve on one each; more only contend for the cores here)."""
    spec = MODELS.get(model)
    copies = ProblemCopies(spec.build(parse_options(spec, options), CPU))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fine = Yardsticks(copies, timesteps, 0, CPU).fine()
        finer = solve_on_fine_grid(copies, timesteps, 8 * fine_steps(timesteps), CPU)
    finally:
        torch.set_num_threads(threads)
    assert fine is not None
    return [
        (name, fine.estimated_error[name], max(metrics.rel_err(pick(fine.at[n]), pick(finer[n])) for n in timesteps))
        for name, pick in ESTIMATED
    ]


@pytest.mark.parametrize(
    ("model", "options", "timesteps"),
    [
        ("linear", {"d": 3, "batch": 8}, [4, 8]),
        ("cnf", {"hidden": 8, "width": 16, "batch": 32}, [4, 8]),
        ("otflow", {"d": 3, "hidden": 8, "batch": 16}, [4, 16]),
    ],
)
def test_the_estimate_is_within_two_times_of_the_error_against_a_solve_8_times_finer(model, options, timesteps):
    for name, estimate, true in _estimate_and_truth(model, options, timesteps):
        assert 0.5 * true <= estimate <= 2 * true, (name, estimate, true)


@pytest.mark.slow
def test_the_default_otflow_estimate_is_within_two_times_of_its_error():
    """The default model at the default sweep's two smaller grids (the estimate of RK4's order, |half − fine| / 15,
    was 3-9× too small here)."""
    for name, estimate, true in _estimate_and_truth("otflow", {}, [8, 32]):
        assert 0.5 * true <= estimate <= 2 * true, (name, estimate, true)


def _quarter_and_reference(copies: ProblemCopies, timesteps: list[int]):

    quarter = solve_on_fine_grid(copies, timesteps, fine_steps(timesteps), CPU, 4)
    reference = ReferenceCache(copies, ScalerSettings()).get(LIBRARIES.get("native"), METHODS.get("rk4"), 32)
    return quarter, reference


def test_the_quarter_density_read_off_the_reference_is_the_quarter_solve_bit_for_bit():
    """Its grid is the native RK4 reference's at the largest n_timesteps: the sweep solves it once for both."""

    spec = MODELS.get("otflow")
    copies = ProblemCopies(spec.build(parse_options(spec, {"d": 3, "hidden": 8, "batch": 16}), CPU))
    timesteps = [8, 32]
    quarter, reference = _quarter_and_reference(copies, timesteps)
    shared = fine_from_reference(copies, timesteps, fine_steps(timesteps), 4, reference)
    assert shared is not None and sorted(shared) == timesteps
    for n in timesteps:
        assert torch.equal(shared[n].trajectory, quarter[n].trajectory) and torch.equal(shared[n].loss, quarter[n].loss)
        assert all(torch.equal(a, b) for a, b in zip(shared[n].grads, quarter[n].grads, strict=True))
    # Another density is not the reference's solve, nor a grid whose largest n is not the reference's.
    assert fine_from_reference(copies, timesteps, fine_steps(timesteps), 2, reference) is None
    assert fine_from_reference(copies, [8, 16], fine_steps([8, 16]), 4, reference) is None


@pytest.mark.unit
def test_a_loss_of_every_state_has_the_quarter_density_solved_on_its_own():
    """Each n_timesteps' loss then sends its own cotangent into the solve: the reference's gradient is not its."""

    torch.manual_seed(0)
    field = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())
    problem = TrajectoryProblem(
        func=_Field(field), y0=torch.randn(4, 3), loss=lambda states: states.pow(2).mean(), data_source="test"
    )
    copies = ProblemCopies(problem)
    _, reference = _quarter_and_reference(copies, [8, 32])
    assert fine_from_reference(copies, [8, 32], fine_steps([8, 32]), 4, reference) is None


class _Field(torch.nn.Module):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, t, y):
        return self.net(y)


@pytest.mark.unit
@pytest.mark.parametrize("coarsening", [1, 2])
def test_the_fine_solve_is_the_drop_ins_solve_bit_for_bit(coarsening):
    """The fine reference calls the native solver as the sweep's runs do (no later-reach walk) and hands the cotangent
    in as the gradient of a pairing: the states, losses and gradients of the drop-in called with it as grad_outputs."""
    spec = MODELS.get("otflow")
    copies = ProblemCopies(spec.build(parse_options(spec, {"d": 3, "hidden": 8, "batch": 16}), CPU))
    timesteps = [4, 16]
    solved = solve_on_fine_grid(copies, timesteps, fine_steps(timesteps), CPU, coarsening)
    prepared = cast_run(copies, torch.float64)
    t, index = fine_grid(timesteps, fine_steps(timesteps), coarsening)
    trajectory = odeint(prepared.model, prepared.batch, t, method=FINE_TABLEAU)
    problem = copies.trajectory
    assert problem is not None
    for n in timesteps:
        sampled = trajectory.detach()[index[n]].requires_grad_(True)
        loss = problem.loss(sampled)
        (on_points,) = torch.autograd.grad(loss, sampled)
        cotangent = torch.zeros_like(trajectory)
        cotangent[index[n]] = on_points
        found = torch.autograd.grad(trajectory, prepared.leaves, cotangent, retain_graph=True, allow_unused=True)
        expected = [torch.zeros_like(x) if g is None else g for g, x in zip(found, prepared.leaves, strict=True)]
        assert torch.equal(solved[n].trajectory, trajectory.detach()[index[n]]) and torch.equal(solved[n].loss, loss)
        assert all(torch.equal(a, b) for a, b in zip(solved[n].grads, expected, strict=True)), n
