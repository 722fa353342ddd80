"""`odeint_of(library)`: torchdiffeq's signature around a library's adapter, which the answer's code imports for a
library whose own function is not torchdiffeq's. It solves as the adapter's runs did: the adapter's states on the grid
(`t`, or the `grid_constructor`'s), read off linearly at `t`, a tuple state as one flat tensor; what it cannot solve as
a run did, it refuses."""

from __future__ import annotations

import pytest
import torch

from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.libraries.handed import odeint_of
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.solvers import SolveReport, equal_steps

from .conftest import needs

pytestmark = pytest.mark.unit

LIBRARY_NAMES = [pytest.param(name, marks=needs(name)) for name in ("torchode", "torchdyn", "rampde")]


def _field() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


class _Autonomous(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, t, y):
        return self.net(y)


def _adapter(name: str):
    library = LIBRARIES.get(name)
    return library.load() if hasattr(library, "load") else library


@pytest.mark.parametrize("name", LIBRARY_NAMES)
def test_it_returns_the_adapters_states_and_gradients_on_the_grid(name):
    adapter, field = _adapter(name), _Autonomous(_field())
    y0 = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    handed = odeint_of(adapter)(field, y0, t, method="rk4")
    grads = torch.autograd.grad(handed.square().sum(), [y0, *field.parameters()])
    direct = adapter.solve(field, y0, t, METHODS.get("rk4"), None, SolveReport())
    expected = torch.autograd.grad(direct.square().sum(), [y0, *field.parameters()])
    assert torch.equal(handed, direct)
    assert all(torch.equal(g, e) for g, e in zip(grads, expected, strict=True))


@pytest.mark.parametrize("name", LIBRARY_NAMES)
def test_a_grid_constructor_steps_on_its_grid_and_reads_a_tuple_state_off_it(name):
    adapter, net = _adapter(name), _field()
    y0 = (torch.randn(2, 3, dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64))
    t = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    field = _Autonomous(net)

    def pair(time, state):
        return field(time, state[0]), state[0].sum(-1, keepdim=True)

    x, total = odeint_of(adapter)(pair, y0, t, method="euler", options=dict(grid_constructor=equal_steps(4)), model=net)
    # The oracle: the same library on the four equal steps, the times between them read off linearly.
    grid = torch.linspace(0, 1, 5, dtype=torch.float64)
    flat = torch.cat([y0[0].reshape(-1), y0[1].reshape(-1)])

    def flat_pair(time, y):
        dx, dtotal = pair(time, (y[:6].reshape(2, 3), y[6:].reshape(2, 1)))
        return torch.cat([dx.reshape(-1), dtotal.reshape(-1)])

    on_grid = adapter.solve(_Module(flat_pair, net), flat, grid, METHODS.get("euler"), None, SolveReport())
    at_03 = on_grid[1] + (0.3 - 0.25) / 0.25 * (on_grid[2] - on_grid[1])
    assert x.shape == (3, 2, 3) and total.shape == (3, 2, 1)
    assert torch.allclose(x[1].reshape(-1), at_03[:6], rtol=1e-12, atol=0)
    assert torch.equal(x[2].reshape(-1), on_grid[-1][:6]) and torch.equal(total[0], y0[1])


class _Module(torch.nn.Module):
    def __init__(self, function, net):
        super().__init__()
        self.function, self.net = function, net

    def forward(self, t, y):
        return self.function(t, y)


@pytest.mark.parametrize("name", LIBRARY_NAMES)
def test_what_no_run_solved_is_refused_in_one_line(name):
    odeint, y0, t = odeint_of(_adapter(name)), torch.zeros(3), torch.linspace(0, 1, 3)
    field = _Autonomous(_field().float())
    with pytest.raises(ValueError, match="method must be one of"):
        odeint(field, y0, t, method="rk45")
    with pytest.raises(TypeError, match="'max_num_steps' are not taken"):
        odeint(field, y0, t, method="euler", options={"max_num_steps": 10})


@pytest.mark.parametrize("name", [pytest.param("rampde", marks=needs("rampde"))])
def test_a_library_differentiating_funcs_parameters_needs_the_model_for_a_plain_function(name):
    """rampde differentiates func.parameters() only: a closure over the model would get no parameter gradient."""
    net = _field().float()
    with pytest.raises(ValueError, match="pass model="):
        odeint_of(_adapter(name))(lambda t, y: net(y), torch.ones(3), torch.linspace(0, 1, 3), method="euler")
    states = odeint_of(_adapter(name))(
        lambda t, y: net(y), torch.ones(3), torch.linspace(0, 1, 3), method="euler", model=net
    )
    states.square().sum().backward()  # (rampde writes into the incoming gradient: not an expanded one)
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in net.parameters())


@pytest.mark.parametrize("name", [pytest.param("torchode", marks=needs("torchode")), "torchdiffeq-adjoint"])
def test_an_adaptive_method_solves_with_the_tolerances_given_as_the_adapter_did(name):
    adapter, field = _adapter(name), _Autonomous(_field())
    y0, t = torch.randn(4, 3, dtype=torch.float64), torch.linspace(0, 1, 3, dtype=torch.float64)
    handed = odeint_of(adapter)(field, y0, t, rtol=1e-4, atol=1e-7, method="dopri5")
    report = SolveReport()
    direct = adapter.solve(field, y0, t, METHODS.get("dopri5").with_settings(rtol=1e-4, atol=1e-7), None, report)
    assert torch.equal(handed, direct)
    # The sweep's default tolerances (rtol 1e-3); outputs at the equal grid's points, read off at t as a step's were.
    default = odeint_of(adapter)(field, y0, t, method="dopri5", options=dict(grid_constructor=equal_steps(4)))
    grid = torch.linspace(0, 1, 5, dtype=torch.float64)
    on_grid = adapter.solve(field, y0, grid, METHODS.get("dopri5"), None, SolveReport())
    assert torch.equal(default, on_grid[::2])
