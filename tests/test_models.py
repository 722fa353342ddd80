"""Models: closed forms checked against autograd, options validated, same weights for every run."""

from __future__ import annotations

import pytest
import torch

from roundoff_analyzer.axes.models import MODELS, parse_option_pairs, parse_options
from roundoff_analyzer.core.errors import InputError


def _otflow(**options):
    model = MODELS.get("otflow")
    return model.build(parse_options(model, options), torch.device("cpu"))


@pytest.mark.parametrize("n_layers", [2, 4])
def test_otflow_gradient_and_hessian_trace_match_autograd(n_layers):
    potential = _otflow(d=4, hidden=12, n_layers=n_layers).func.potential.double()
    s = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    gradient, trace = potential.gradient_and_trace(s)

    autograd_gradient = torch.autograd.grad(potential(s).sum(), s, create_graph=True)[0]
    hessian_diagonal = [
        torch.autograd.grad(autograd_gradient[:, k].sum(), s, retain_graph=True)[0][:, k] for k in range(4)
    ]
    assert torch.allclose(gradient, autograd_gradient, atol=1e-12)
    assert torch.allclose(trace, torch.stack(hessian_diagonal, dim=1).sum(dim=1), atol=1e-11)


def test_otflow_dynamics_follow_the_spec_equations():
    problem = _otflow(d=3, hidden=8, alpha="2,5,7")
    func = problem.func.double()
    state = problem.y0.double()
    t = torch.tensor(0.25, dtype=torch.float64)
    s = torch.cat([state[:, :3], torch.full((state.shape[0], 1), 0.25, dtype=torch.float64)], dim=1)
    gradient, trace = func.potential.gradient_and_trace(s)
    derivative = func(t, state)
    kinetic = 0.5 * (gradient[:, :3] ** 2).sum(dim=1)
    assert torch.allclose(derivative[:, :3], -gradient[:, :3] / 2)
    assert torch.allclose(derivative[:, 3], -trace / 2)
    assert torch.allclose(derivative[:, 4], kinetic)
    assert torch.allclose(derivative[:, 5], (-gradient[:, 3] + 2 * kinetic).abs())


def test_same_seed_gives_same_weights_and_batch():
    a, b = _otflow(seed=3), _otflow(seed=3)
    assert torch.equal(a.y0, b.y0)
    assert all(torch.equal(p, q) for p, q in zip(a.func.parameters(), b.func.parameters()))
    assert not torch.equal(a.y0, _otflow(seed=4).y0)
    assert "synthetic" in a.data_source


def test_options_from_the_command_line_are_coerced_and_checked():
    model = MODELS.get("otflow")
    options = parse_options(model, parse_option_pairs(["hidden=64", "alpha=1,2000,800"]))
    assert options.hidden == 64 and options.alpha == (1.0, 2000.0, 800.0)
    with pytest.raises(InputError, match="option 'hidden'"):
        parse_options(model, {"hidden": "wide"})
    with pytest.raises(InputError, match="option 'depth'.*options are: seed, d, hidden"):
        parse_options(model, {"depth": "3"})
    with pytest.raises(InputError, match="key=value"):
        parse_option_pairs(["hidden"])


def test_linear_model_exact_solution_solves_its_ode():
    model = MODELS.get("linear")
    problem = model.build(parse_options(model, {}), torch.device("cpu"))
    t = torch.linspace(0, 1, 3, dtype=torch.float64)
    exact = problem.exact_solution(t)
    assert torch.allclose(exact[0], problem.y0.double())
    h = 1e-6
    forward = problem.exact_solution(torch.tensor([0.5 + h], dtype=torch.float64))[0]
    backward = problem.exact_solution(torch.tensor([0.5 - h], dtype=torch.float64))[0]
    middle = problem.exact_solution(torch.tensor([0.5], dtype=torch.float64))[0]
    rhs = problem.func.double()(torch.tensor(0.5), middle)
    assert torch.allclose((forward - backward) / (2 * h), rhs, atol=1e-6)
