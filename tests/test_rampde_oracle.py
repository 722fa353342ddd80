"""The native solver against rampde, the library of "Mixed Precision Training of Neural ODEs", run in CPU mixed
precision (tests/rampde_on_cpu.py).

Both discretise first and rebuild each step in the backward; the native solver must do that paper's
arithmetic, so its gradient error in a low dtype is rampde's within 1.5x. The small-loss linear ODE is
where the order of the step-size product decides: an adjoint multiplied by h inside the float16 product
sinks into float16's subnormals, and the error then grows with n_timesteps (the native solver's was
16-119x rampde's there before it applied h in float32, after the product).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from roundoff_analyzer.axes.models import MODELS, parse_options
from roundoff_analyzer.solvers import odeint
from tests import rampde_on_cpu
from tests.native_cases import TanhMLP

AGREE = 1.5  # native / rampde gradient error within this factor either way
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@pytest.fixture(scope="module")
def rampde(tmp_path_factory):
    module = rampde_on_cpu.load(tmp_path_factory.mktemp("rampde"))
    if module is None:
        pytest.skip(
            'rampde, the library of "Mixed Precision Training of Neural ODEs", is not installed (not on PyPI: pip '
            "install a wheel of its public release)"
        )
    return module


class LinearField(torch.nn.Module):
    """dy/dt = A y, A 4x4."""

    def __init__(self) -> None:
        super().__init__()
        self.A = torch.nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            self.A.weight.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)) / 2)

    def forward(self, t, y):
        return self.A(y)


def _linear_small_loss():
    y0 = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    return LinearField(), y0, lambda trajectory: 0.5 * trajectory[-1].pow(2).sum(-1).mean() * 1e-4


def _mlp():
    y0 = torch.randn(64, 4, generator=torch.Generator().manual_seed(5))
    return TanhMLP(d=4, hidden=32), y0, lambda trajectory: trajectory[-1].pow(2).mean()


def _otflow():
    model = MODELS.get("otflow")
    problem = model.build(parse_options(model, {}), torch.device("cpu"))
    return problem.func, problem.y0, problem.loss


def _gradient(problem, solve, dtype, n_timesteps, method):
    func, y0, loss_fn = problem()
    if dtype == torch.float64:
        func, y0 = func.double(), y0.double()
    params = [p for p in func.parameters() if p.requires_grad]
    t = torch.linspace(0, 1, n_timesteps + 1, dtype=y0.dtype)
    with torch.autocast("cpu", dtype=dtype, enabled=dtype in UNIT_ROUNDOFF):
        trajectory = solve(func, y0, t, method)
    loss = loss_fn(trajectory.to(torch.float64 if dtype == torch.float64 else torch.float32))
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1).double() for g, p in zip(grads, params)])


def _error_in_u(problem, solve, dtype, n_timesteps, method) -> float:
    reference = _gradient(problem, solve, torch.float64, n_timesteps, method)
    low = _gradient(problem, solve, dtype, n_timesteps, method)
    return float((low - reference).norm() / reference.norm()) / UNIT_ROUNDOFF[dtype]


def _ratios(rampde, problem, dtypes, methods, grid, checkpoint="states"):
    """native's gradient error / rampde's; by default on native's low-memory path, rampde's design (each step rebuilt
    from its stored low-precision state)."""

    def native(func, y0, t, method):
        # rampde's rk4 is the classical rule; the drop-in's "rk4" is torchdiffeq's, the 3/8 rule.
        return odeint(func, y0, t, method="rk4_classical" if method == "rk4" else method, checkpoint=checkpoint)

    def paper(func, y0, t, method):
        return rampde.odeint(func, y0, t, method=method, loss_scaler=False)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            (str(dtype), method, n): _error_in_u(problem, native, dtype, n, method)
            / _error_in_u(problem, paper, dtype, n, method)
            for dtype, method, n in itertools.product(dtypes, methods, grid)
        }
    finally:
        torch.set_num_threads(threads)


@pytest.mark.unit
@pytest.mark.filterwarnings("ignore:In CPU autocast, but the target dtype is not supported")
def test_small_adjoint_gradient_error_is_rampdes_at_every_n(rampde):
    ratios = _ratios(rampde, _linear_small_loss, [torch.float16], ["rk4"], [8, 32, 128])
    assert all(1 / AGREE <= r <= AGREE for r in ratios.values()), ratios
    # The stored stages differentiate the forward's own graph, from the float32 state: no larger an error.
    stages = _ratios(rampde, _linear_small_loss, [torch.float16], ["rk4"], [8, 32, 128], checkpoint="stages")
    assert all(r <= AGREE for r in stages.values()), stages


@pytest.mark.unit
@pytest.mark.filterwarnings("ignore:In CPU autocast, but the target dtype is not supported")
def test_mlp_gradient_error_is_rampdes_in_float16_and_bfloat16(rampde):
    ratios = _ratios(rampde, _mlp, [torch.float16, torch.bfloat16], ["euler", "rk4"], [8, 32])
    assert all(1 / AGREE <= r <= AGREE for r in ratios.values()), ratios


@pytest.mark.slow  # 24 low-precision solves of the default OT-Flow and their references: about a minute
@pytest.mark.filterwarnings("ignore:In CPU autocast, but the target dtype is not supported")
def test_default_otflow_gradient_error_is_rampdes(rampde):
    ratios = _ratios(rampde, _otflow, [torch.float16, torch.bfloat16], ["euler", "rk4"], [8, 32, 128])
    assert all(1 / AGREE <= r <= AGREE for r in ratios.values()), ratios


@pytest.mark.unit
@pytest.mark.filterwarnings("ignore:In CPU autocast, but the target dtype is not supported")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_step_product_low_is_rampdes_forward_bit_for_bit(rampde, dtype):
    """rampde forms h * S in the low dtype (a float32 0-dim h times a low-precision S stays low); step_product="low"
    does too. On 10 steps h is not a power of two, so the product rounds, and the default (h * S in float32) differs."""
    func, y0, _ = _mlp()
    t = torch.linspace(0, 1, 11)
    with torch.autocast("cpu", dtype=dtype):
        paper = rampde.odeint(func, y0, t, method="euler", loss_scaler=False)
        like_paper = odeint(func, y0, t, method="euler", step_product="low", trajectory_dtype="low")
        own = odeint(func, y0, t, method="euler", trajectory_dtype="low")
    assert torch.equal(like_paper, paper)
    assert not torch.equal(own, paper)
