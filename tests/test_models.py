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


def _paper_terms(potential, x: torch.Tensor, t: float, alpha0: float):
    """OT-Flow's right-hand side from its equations, with autograd on Phi itself (not the closed forms): v = -grad_x
    Phi / a0, d l = -tr(Hess_x Phi) / a0, d L = |v|^2 / 2, d R = |d_t Phi - |grad_x Phi|^2 / (2 a0)|."""
    d = x.shape[1]
    s = torch.cat([x, torch.full((x.shape[0], 1), t, dtype=x.dtype)], dim=1).requires_grad_(True)
    (gradient,) = torch.autograd.grad(potential(s).sum(), s, create_graph=True)
    trace = sum(torch.autograd.grad(gradient[:, k].sum(), s, retain_graph=True)[0][:, k] for k in range(d))
    gradient_x, gradient_t = gradient[:, :d].detach(), gradient[:, d].detach()
    velocity = -gradient_x / alpha0
    return (
        velocity,
        -trace.detach() / alpha0,
        0.5 * (velocity**2).sum(dim=1),
        (gradient_t - (gradient_x**2).sum(dim=1) / (2 * alpha0)).abs(),
    )


@pytest.mark.parametrize("alpha0", [1.0, 2.0])
def test_otflow_dynamics_are_the_papers_equations(alpha0):
    problem = _otflow(d=3, hidden=8, n_layers=3, alpha=f"{alpha0},5,7")
    func = problem.func.double()
    state = problem.y0.double() + 0.3
    derivative = func(torch.tensor(0.25, dtype=torch.float64), state)
    velocity, log_det, transport, hjb = _paper_terms(func.potential, state[:, :3], 0.25, alpha0)
    assert torch.allclose(derivative[:, :3], velocity, atol=1e-12)
    assert torch.allclose(derivative[:, 3], log_det, atol=1e-12)
    assert torch.allclose(derivative[:, 4], transport, atol=1e-12)
    assert torch.allclose(derivative[:, 5], hjb, atol=1e-12)


def test_otflow_loss_weighs_transport_likelihood_and_hjb_in_the_authors_order():
    d, alpha = 3, (1.5, 5.0, 7.0)
    problem = _otflow(d=d, hidden=8, alpha=",".join(map(str, alpha)))
    final = torch.randn(6, d + 3, dtype=torch.float64)
    trajectory = torch.stack([torch.zeros_like(final), final])
    # The negative log-likelihood under N(0, I) (eq. 3), from torch's own normal density.
    log_rho1 = torch.distributions.Normal(0.0, 1.0).log_prob(final[:, :d]).sum(dim=1)
    likelihood = -(log_rho1 + final[:, d])
    expected = alpha[0] * final[:, d + 1].mean() + alpha[1] * likelihood.mean() + alpha[2] * final[:, d + 2].mean()
    assert torch.allclose(problem.loss(trajectory), expected, rtol=1e-12)


@pytest.mark.parametrize(("d", "rank"), [(3, 4), (8, 9), (9, 10), (63, 10)])
def test_otflow_initialisation_is_the_authors(d, rank):
    potential = _otflow(d=d, hidden=16, n_layers=4).func.potential
    assert potential.A.shape == (rank, d + 1)
    bound = (6.0 / (rank + d + 1)) ** 0.5  # Xavier-uniform
    assert potential.A.abs().max() <= bound and potential.A.abs().max() > 0.5 * bound
    first = potential.layers[0]
    for later in potential.layers[1:]:  # copies of the first ResNet layer, each its own parameter
        assert torch.equal(later.weight, first.weight) and torch.equal(later.bias, first.bias)
        assert later.weight.data_ptr() != first.weight.data_ptr()
    assert (first.weight.abs() <= 16**-0.5).all() and (potential.opening.weight.abs() <= (d + 1) ** -0.5).all()
    assert torch.equal(potential.w, torch.ones(16))
    assert not potential.c.weight.any() and not potential.c.bias.any()


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
