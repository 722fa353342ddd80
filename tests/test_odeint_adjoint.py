"""`roundoff_analyzer.solvers.odeint_adjoint`, called as torchdiffeq's: the native discrete adjoint behind torchdiffeq's
adjoint arguments, each accepted where it means something on a fixed grid and refused by name where it does not."""

from __future__ import annotations

import pytest
import torch
import torchdiffeq

from roundoff_analyzer.solvers import odeint, odeint_adjoint

pytestmark = pytest.mark.unit


class _Field(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).double()
        self.steps_back = 0

    def forward(self, t, y):
        return self.net(y) - 0.5 * y

    def callback_step_adjoint(self, t0, adjoint, dt):
        self.steps_back += 1


def _gradients(solve, func, n_steps):
    y0 = torch.tensor([[1.0, -0.5], [0.3, 0.8]], dtype=torch.float64, requires_grad=True)
    t = torch.linspace(0, 1, n_steps + 1, dtype=torch.float64)
    states = solve(func, y0, t)
    torch.manual_seed(1)
    weights = torch.rand_like(states)
    grads = torch.autograd.grad((states * weights).sum(), [y0, *func.parameters()])
    return torch.cat([g.reshape(-1) for g in grads])


def test_odeint_adjoint_is_the_native_backward_and_takes_torchdiffeqs_adjoint_arguments():
    func = _Field()
    plain = _gradients(lambda f, y0, t: odeint(f, y0, t, method="rk4_38"), func, 8)
    func.steps_back = 0
    adjoint = _gradients(
        lambda f, y0, t: odeint_adjoint(
            f,
            y0,
            t,
            rtol=1e-6,
            atol=1e-8,
            method="rk4_38",
            adjoint_method="rk4_38",
            adjoint_rtol=1e-9,
            adjoint_atol=1e-10,
            adjoint_options={"norm": "seminorm"},
            adjoint_params=tuple(f.parameters()),
        ),
        func,
        8,
    )
    assert torch.equal(plain, adjoint)
    assert func.steps_back == 8  # callback_step_adjoint: once per step of the backward


def test_in_float64_it_differs_from_torchdiffeqs_continuous_adjoint_by_the_discretisation_error():
    func = _Field()
    differences = []
    for n_steps in (8, 16, 32):
        ours = _gradients(lambda f, y0, t: odeint_adjoint(f, y0, t, method="rk4_38"), func, n_steps)
        theirs = _gradients(lambda f, y0, t: torchdiffeq.odeint_adjoint(f, y0, t, method="rk4"), func, n_steps)
        differences.append(float((ours - theirs).norm() / theirs.norm()))
    # Fourth order: each halving of the step divides the difference by about 16, as a discretisation error shrinks.
    assert differences[0] < 1e-4
    assert differences[0] / differences[1] > 8 and differences[1] / differences[2] > 8


def test_a_closure_needs_no_adjoint_params_and_adjoint_params_name_the_tensors_when_given():
    func = _Field()
    closure = lambda t, y: func(t, y)  # noqa: E731 - a field torchdiffeq's adjoint accepts only with adjoint_params
    found = _gradients(lambda f, y0, t: odeint_adjoint(closure, y0, t, method="euler"), func, 4)
    named = _gradients(
        lambda f, y0, t: odeint_adjoint(closure, y0, t, method="euler", adjoint_params=tuple(func.parameters())),
        func,
        4,
    )
    assert torch.equal(found, named)
    y0 = torch.ones(1, 2, dtype=torch.float64, requires_grad=True)
    odeint_adjoint(closure, y0, torch.linspace(0, 1, 3), method="euler", adjoint_params=()).sum().backward()
    assert y0.grad is not None and all(p.grad is None for p in func.parameters())


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"adjoint_method": "midpoint"}, r"adjoint_method='midpoint' differs from method='euler'"),
        (
            {"options": {"step_size": 0.25}, "adjoint_options": {"step_size": 0.1}},
            r"adjoint_options\['step_size'\] \(0.1\) differs from options\['step_size'\] \(0.25\)",
        ),
        ({"adjoint_options": {"perturb": True}}, r"adjoint_options\['perturb'\] \(True\) differs"),
    ],
)
def test_another_method_or_grid_for_the_backward_is_refused_by_name(arguments, named):
    with pytest.raises(ValueError, match=named):
        odeint_adjoint(
            _Field(), torch.ones(1, 2, dtype=torch.float64), torch.linspace(0, 1, 3), method="euler", **arguments
        )


def test_the_same_options_for_the_backward_are_accepted_and_its_arguments_are_keywords_as_in_torchdiffeq():
    func = _Field()
    y0 = torch.ones(1, 2, dtype=torch.float64)
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    options = {"step_size": 0.25}
    same = odeint_adjoint(func, y0, t, method="euler", options=options, adjoint_options=dict(options))
    assert torch.equal(same, odeint(func, y0, t, method="euler", options=options))
    with pytest.raises(TypeError):
        odeint_adjoint(func, y0, t, 1e-7, 1e-9, "euler")  # torchdiffeq's odeint_adjoint takes them by name only
