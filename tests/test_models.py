"""Models: closed forms checked against autograd, options validated, same weights for every run."""

from __future__ import annotations

import math
import re
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from roundoff_analyzer.axes.data import parse_data
from roundoff_analyzer.axes.models import MODELS, parse_option_pairs, parse_options
from roundoff_analyzer.core.errors import InputError

pytestmark = pytest.mark.unit


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


def _authors_order_field(potential, alpha0: float):
    """OT-Flow's right-hand side written here from the paper's equations (11: the gradient by z_M = w, z_i = z_{i+1}
    + h K_i^T diag(tanh(K_i u_{i-1} + b_i)) z_{i+1}; 13: the trace by t_0 and the t_i with the Jacobians J_i; 2, 5, 7:
    the ODE), in the operations and order of the authors' code: one column per example, each K_i u_{i-1} + b_i
    evaluated again where it is used, the opening's trace terms elementwise. It reads the model's parameter tensors
    and nothing else of it."""
    K0, b0 = potential.opening.weight, potential.opening.bias
    resnet = [(layer.weight, layer.bias) for layer in potential.layers]
    w, A, b = potential.w, potential.A, potential.c.weight
    d, m, h = potential.d, K0.shape[0], 1.0 / len(resnet)

    def sigma(x):  # log(exp(x) + exp(-x)), overflow-free
        return torch.abs(x) + torch.log(1 + torch.exp(-2.0 * torch.abs(x)))

    def sigma_second(x):
        return 1 - torch.pow(torch.tanh(x), 2)

    def field(t, state):
        n = state.shape[0]
        s = torch.nn.functional.pad(state[:, :d], (0, 1, 0, 0), value=float(t))
        AtA = torch.matmul(A.t(), A)
        pre0 = torch.nn.functional.linear(s, K0, b0)
        u = [sigma(pre0)]
        for K, bias in resnet:
            u.append(u[-1] + h * sigma(torch.nn.functional.linear(u[-1], K, bias)))
        tanh0 = torch.tanh(pre0)
        z = {}
        for i in range(len(resnet), 0, -1):
            K, bias = resnet[i - 1]
            following = w.reshape(1, -1).t() if i == len(resnet) else z[i + 1]
            z[i] = following + h * torch.mm(
                K.t(), torch.tanh(torch.nn.functional.linear(u[i - 1], K, bias)).t() * following
            )
        gradient = torch.mm(K0.t(), tanh0.t() * z[1]) + torch.mm(AtA, s.t()) + b.t()
        K0x = K0[:, :d]
        trace = torch.sum(
            (sigma_second(pre0.t()) * z[1]).reshape(m, -1, n) * torch.pow(K0x.unsqueeze(2), 2), dim=(0, 1)
        )
        J = K0x.unsqueeze(2) * tanh0.t().unsqueeze(1)
        for i, (K, bias) in enumerate(resnet, start=1):
            KJ = torch.mm(K, J.reshape(m, -1)).reshape(m, -1, n)
            following = w.reshape(1, -1).t() if i == len(resnet) else z[i + 1]
            pre = torch.nn.functional.linear(u[i - 1], K, bias).t()
            trace = trace + h * torch.sum(
                (sigma_second(pre) * following).reshape(m, -1, n) * torch.pow(KJ, 2), dim=(0, 1)
            )
            J = J + h * torch.tanh(pre).reshape(m, -1, n) * KJ
        gradient, trace = gradient.t(), trace + torch.trace(AtA[:d, :d])
        dx = -(1.0 / alpha0) * gradient[:, :d]
        dl = -(1.0 / alpha0) * trace.unsqueeze(1)
        dL = 0.5 * torch.sum(torch.pow(dx, 2), 1, keepdim=True)
        dR = torch.abs(-gradient[:, -1].unsqueeze(1) + alpha0 * dL)
        return torch.cat((dx, dl, dL, dR), 1)

    return field


def _authors_order_loss(final, alpha):
    d = final.shape[1] - 3
    log_density = torch.sum(-0.5 * math.log(2 * math.pi) - torch.pow(final[:, :d], 2) / 2, 1, keepdim=True)
    costs = (final[:, -2].mean(), (-(log_density + final[:, d].unsqueeze(1))).mean(), final[:, -1].mean())
    return sum(cost * weight for cost, weight in zip(costs, alpha))


def _rk4_parameter_gradient(field, y0, loss, parameters, dtype, cache):
    """32 classical RK4 steps on [0, 1] under CPU autocast (or in float64), the loss in float32 after the solve as
    the sweep forms it by default, and the gradient of every parameter. Enough evaluations in one autocast region
    that the order autograd sums a weight's gradient over them shows in float16 (4 steps did not show where the
    cached float16 copy of a ResNet weight is made)."""
    y, h = y0, 1 / 32
    context = torch.autocast("cpu", dtype=dtype, cache_enabled=cache) if dtype != torch.float64 else nullcontext()
    with context:
        for k in range(32):
            t = torch.tensor(k * h, dtype=y0.dtype)
            k1 = field(t, y)
            k2 = field(t + h / 2, y + h / 2 * k1)
            k3 = field(t + h / 2, y + h / 2 * k2)
            k4 = field(t + h, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    final = y if dtype == torch.float64 else y.float()
    return torch.autograd.grad(loss(final), parameters, allow_unused=True)


@pytest.mark.parametrize(
    ("dtype", "cache"),
    [(torch.float16, True), (torch.bfloat16, True), (torch.float16, False)],
    ids=["float16-autocast", "bfloat16-autocast", "float16-autocast-nocache"],
)
@pytest.mark.parametrize(
    ("options", "data"),
    [
        ({"d": 8, "batch": 8}, None),  # the default's shape and loss weights, a smaller batch
        ({"d": 2, "batch": 32, "alpha": "1,100,5"}, "8gaussians"),  # the authors' toy settings, a smaller batch
        ({"d": 3, "hidden": 8, "n_layers": 4, "batch": 8, "alpha": "2,5,7"}, None),  # deeper, a0 != 1
    ],
    ids=["default", "authors-toy", "deeper"],
)
def test_otflow_rounds_as_an_independent_computation_in_the_authors_operation_order(options, data, dtype, cache):
    model = MODELS.get("otflow")
    parsed = parse_options(model, options)
    problem = model.build(parsed, torch.device("cpu"), parse_data(data) if data else None)
    alpha, potential = parsed.alpha, problem.func.potential
    independent = _authors_order_field(potential, alpha[0])
    parameters = list(potential.parameters())
    used = [p for p in parameters if p is not potential.c.bias]  # b's constant c never reaches the field

    built_in = _rk4_parameter_gradient(
        problem.func, problem.y0, lambda final: problem.loss(final[None]), used, dtype, cache
    )
    written_here = _rk4_parameter_gradient(
        independent, problem.y0, lambda final: _authors_order_loss(final, alpha), used, dtype, cache
    )
    for name, ours, theirs in zip(
        [n for n, p in potential.named_parameters() if p is not potential.c.bias], built_in, written_here
    ):
        assert torch.equal(ours, theirs), f"{name}: the built-in's {dtype} gradient rounds differently"

    # The computation written here is OT-Flow: in float64 it equals the model.
    potential.double()
    exact = _rk4_parameter_gradient(
        problem.func, problem.y0.double(), lambda final: problem.loss(final[None]), used, torch.float64, cache
    )
    here = _rk4_parameter_gradient(
        independent, problem.y0.double(), lambda final: _authors_order_loss(final, alpha), used, torch.float64, cache
    )
    for ours, theirs in zip(exact, here):
        assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12)


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


def test_the_guide_names_the_default_otflow_settings_beside_the_authors_as_the_options_define_them():
    page = (Path(__file__).resolve().parents[1] / "docs" / "axes.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)`[^|]* \| ([^|]+?) \|", page, re.MULTILINE))
    defaults = MODELS.get("otflow").options_type()
    for name in ("d", "hidden", "n_layers", "batch"):
        assert rows[name] == str(getattr(defaults, name)), name
    assert tuple(float(a) for a in rows["alpha"].split(",")) == defaults.alpha


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
