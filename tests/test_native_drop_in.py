"""The native solver as a drop-in for torchdiffeq's fixed-grid odeint: tuple states and gradients with respect to t."""
from __future__ import annotations

import pytest
import torch

from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.solvers import odeint


class _Coupled(torch.nn.Module):
    """A two-part state (points, one scalar per point) whose dynamics depend on t."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))

    def forward(self, t, state):
        points, mass = state
        out = self.net(torch.cat([points, mass[:, None]], dim=1)) * torch.cos(2 * t)
        return out[:, :2] - 0.5 * points, out[:, 2] * mass


def _autograd_through_steps(func, y0, t, tableau):
    """Explicit Runge-Kutta on the tuple itself, part by part, with autograd recording every operation."""
    y, states = y0, [y0]
    for k in range(t.numel() - 1):
        h = t[k + 1] - t[k]
        stages = []
        for a_row, c in zip(tableau.a, tableau.c):
            stage_y = tuple(part + sum((h * a) * k_j[i] for a, k_j in zip(a_row, stages) if a) for i, part in enumerate(y))
            stages.append(func(t[k] + c * h, stage_y))
        y = tuple(part + h * sum(b * k_j[i] for b, k_j in zip(tableau.b, stages) if b) for i, part in enumerate(y))
        states.append(y)
    return tuple(torch.stack([s[i] for s in states]) for i in range(len(y0)))


def _loss(trajectory):
    points, mass = trajectory
    return (points**2).sum(dim=-1).mean() + (mass * torch.linspace(1, 2, mass.shape[0], dtype=mass.dtype)[:, None]).mean()


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_float64_tuple_state_and_t_gradients_equal_autograd_through_the_same_discretisation(method):
    torch.manual_seed(0)
    func = _Coupled().double()
    params = list(func.parameters())
    points, mass = torch.randn(5, 2, dtype=torch.float64), torch.rand(5, dtype=torch.float64) + 0.5
    grid = torch.tensor([0.0, 0.1, 0.25, 0.5, 0.7, 1.0], dtype=torch.float64)  # uneven, so each step's ends matter

    def solve(solver):
        y0 = (points.clone().requires_grad_(True), mass.clone().requires_grad_(True))
        t = grid.clone().requires_grad_(True)
        trajectory = solver(y0, t)
        grads = torch.autograd.grad(_loss(trajectory), [*y0, t, *params])
        return trajectory, grads

    native, native_grads = solve(lambda y0, t: odeint(func, y0, t, method=method))
    unrolled, reference_grads = solve(lambda y0, t: _autograd_through_steps(func, y0, t, METHODS.get(method)))

    assert isinstance(native, tuple) and [p.shape for p in native] == [(6, 5, 2), (6, 5)]
    for got, want in zip(native, unrolled):
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert float(native_grads[2].abs().max()) > 1e-3  # t really reaches the loss
    for got, want in zip(native_grads, reference_grads):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max())), (got - want).abs().max()


def test_t_gets_no_gradient_unless_it_asks_for_one():
    func = _Coupled().double()
    y0 = (torch.randn(3, 2, dtype=torch.float64, requires_grad=True), torch.rand(3, dtype=torch.float64))
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    _loss(odeint(func, y0, t, method="rk4_classical")).backward()
    assert t.grad is None and y0[0].grad is not None


def test_a_tuple_of_two_dtypes_is_refused():
    func = _Coupled()
    with pytest.raises(TypeError, match="share one dtype"):
        odeint(func, (torch.zeros(2, 2), torch.zeros(2, dtype=torch.float64)), torch.linspace(0, 1, 3), method="euler")
