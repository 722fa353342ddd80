"""The native solver as a drop-in for torchdiffeq's fixed-grid odeint: tuple states and gradients with respect to t."""

from __future__ import annotations

import warnings

import pytest
import torch

from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.solvers import odeint

pytestmark = pytest.mark.unit


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
            stage_y = tuple(
                part + sum((h * a) * k_j[i] for a, k_j in zip(a_row, stages) if a) for i, part in enumerate(y)
            )
            stages.append(func(t[k] + c * h, stage_y))
        y = tuple(part + h * sum(b * k_j[i] for b, k_j in zip(tableau.b, stages) if b) for i, part in enumerate(y))
        states.append(y)
    return tuple(torch.stack([s[i] for s in states]) for i in range(len(y0)))


def _loss(trajectory):
    points, mass = trajectory
    return (points**2).sum(dim=-1).mean() + (
        mass * torch.linspace(1, 2, mass.shape[0], dtype=mass.dtype)[:, None]
    ).mean()


@pytest.mark.parametrize("method", ["euler", "rk4_classical"])
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


# --- torchdiffeq's fixed-grid call, routed to this solver -------------------------------------------------------------

torchdiffeq = pytest.importorskip("torchdiffeq")
# Where the two tableaux are one rule: torchdiffeq's rk4 is the 3/8 rule (rk4_38 here).
SAME_RULE = {"euler": "euler", "midpoint": "midpoint", "heun2": "heun2", "heun3": "heun3", "rk4_38": "rk4"}


class _Field(torch.nn.Module):
    """A small network field with a term in t that jumps just after t = 0.25 (a step from 0.25 sees it only with
    `perturb`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
        self.steps: list[tuple[float, float]] = []

    def forward(self, t, y):
        return self.net(y) - 0.5 * y + (t > 0.25).to(y.dtype)

    def callback_step(self, t0, y0, dt):
        self.steps.append((float(t0.detach()), float(dt.detach())))


def _both(call, **kwargs):
    """The same call to torchdiffeq's odeint and to this one; each with its state's and parameters' gradients."""
    outputs = []
    for odeint_, method in ((torchdiffeq.odeint, SAME_RULE[kwargs["method"]]), (odeint, kwargs["method"])):
        func = _Field()
        y0 = torch.tensor([[1.0, -0.5], [0.2, 0.3]], dtype=torch.float64, requires_grad=True)
        out = call(odeint_, func, y0, {**kwargs, "method": method})
        trajectory = out[1] if isinstance(out, tuple) else out
        grads = torch.autograd.grad(trajectory.square().sum(), [y0, *func.net.parameters()])
        outputs.append((out, grads, func.steps))
    return outputs


GRID = torch.tensor([0.0, 0.3, 0.55, 1.0], dtype=torch.float64)
OPTIONS = [
    None,
    dict(step_size=0.07),
    dict(step_size=0.07, interp="cubic"),
    dict(step_size=0.05, perturb=True),
    dict(grid_constructor=lambda func, y0, t: torch.linspace(float(t[0]), float(t[-1]), 11, dtype=t.dtype)),
]


@pytest.mark.parametrize("method", list(SAME_RULE))
@pytest.mark.parametrize("options", OPTIONS, ids=["grid", "step_size", "cubic", "perturb", "grid_constructor"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed"])
def test_equals_torchdiffeq_in_float64_with_its_options(method, options, reverse):
    t = GRID.flip(0) if reverse else GRID
    (want, want_grads, want_steps), (got, got_grads, got_steps) = _both(
        lambda solver, func, y0, kw: solver(func, y0, t, rtol=1e-3, atol=1e-4, **kw), method=method, options=options
    )
    assert got.shape == want.shape
    assert float((got - want).detach().abs().max()) <= 1e-12
    for g, w in zip(got_grads, want_grads):
        assert float((g - w).abs().max()) <= 1e-12 * max(1.0, float(w.abs().max()))
    # callback_step, as torchdiffeq calls it: the same steps, each (t0, dt) within 1e-12 (flattened: pytest 9.2's approx
    # refuses a list of tuples)
    assert len(got_steps) == len(want_steps) > 2
    assert [v for step in got_steps for v in step] == pytest.approx([v for step in want_steps for v in step], abs=1e-12)


def test_perturb_decides_the_side_of_a_jump_at_a_grid_point():
    t = torch.tensor([0.0, 0.25, 0.5], dtype=torch.float64)
    func, y0 = _Field(), torch.ones(1, 2, dtype=torch.float64)
    plain, nudged = (odeint(func, y0, t, method="euler", options=dict(perturb=p)) for p in (False, True))
    want = torchdiffeq.odeint(func, y0, t, method="euler", options=dict(perturb=True))
    assert float((nudged - want).abs().max()) <= 1e-12
    assert float((plain - nudged).abs().max()) > 0.1  # the step from 0.25 sees the jump only with perturb


@pytest.mark.parametrize("method", ["euler", "rk4_38"])
@pytest.mark.parametrize("interp", ["linear", "cubic"])
@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_terminal_event_on_the_fixed_grid_equals_torchdiffeq(method, interp, direction):
    t = torch.tensor([0.0, direction], dtype=torch.float64)

    def event(t, y):  # the first component's sum crossing a level it reaches both ways in time
        return y[..., 0].sum() - (2.0 if direction > 0 else 1.4)

    (want, want_grads, _), (got, got_grads, _) = _both(
        lambda solver, func, y0, kw: solver(func, y0, t, **kw),
        method=method,
        options=dict(step_size=0.05, interp=interp),
        event_fn=event,
    )
    (want_t, want_states), (got_t, got_states) = want, got
    assert 0.3 < abs(float(got_t)) < 2 and float(got_t) * direction > 0
    assert abs(float(got_t - want_t)) <= 1e-12
    assert got_states.shape == (2, 2, 2) and float((got_states - want_states).abs().max()) <= 1e-12
    for g, w in zip(got_grads, want_grads):
        assert float((g - w).abs().max()) <= 1e-12 * max(1.0, float(w.abs().max()))


def test_tuple_state_with_zero_dim_parts_and_a_one_point_grid():
    def func(t, state):
        x, v = state
        return v, -x

    y0 = (torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64))
    t = torch.linspace(0, 1, 9, dtype=torch.float64)
    got, want = odeint(func, y0, t, method="rk4_38"), torchdiffeq.odeint(func, y0, t, method="rk4")
    assert [p.shape for p in got] == [(9,), (9,)]
    assert max(float((g - w).abs().max()) for g, w in zip(got, want)) <= 1e-12
    one = odeint(func, y0, t[:1], method="euler")
    assert [p.shape for p in one] == [(1,), (1,)] and float(one[0][0]) == 1.0
    single = torch.randn(3, requires_grad=True)
    alone = odeint(lambda t, y: -y, single, torch.tensor([0.5]), method="euler")
    assert alone.shape == (1, 3) and torch.equal(alone[0], single)
    alone.sum().backward()
    assert torch.equal(single.grad, torch.ones(3))


def test_rk4_is_torchdiffeq_s_3_8_rule_without_a_warning_and_rk4_classical_the_classical_one():
    func, y0, t = _Field(), torch.ones(1, 2, dtype=torch.float64), torch.linspace(0, 1, 5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rk4 = odeint(func, y0, t, method="rk4")
    assert torch.equal(rk4, odeint(func, y0, t, method="rk4_38"))
    assert float((rk4 - torchdiffeq.odeint(func, y0, t, method="rk4")).abs().max()) <= 1e-12
    classical = odeint(func, y0, t, method="rk4_classical")
    assert torch.equal(classical, odeint(func, y0, t, method=METHODS.get("rk4")))  # the sweep's rk4
    assert float((classical - rk4).abs().max()) > 1e-8  # two rules, two solutions


@pytest.mark.parametrize(
    "call, error, words",
    [
        (dict(method=None), ValueError, "method=None is dopri5 in torchdiffeq"),
        (dict(method="dopri5"), ValueError, "'dopri5' is adaptive"),
        (dict(method="implicit_adams"), ValueError, "multistep"),
        (dict(method="euler", options=dict(step_t=[0.5])), TypeError, "'step_t' are not fixed-grid options"),
        (
            dict(method="euler", options=dict(step_size=0.1, grid_constructor=lambda f, y, t: t)),
            ValueError,
            "exclude each other",
        ),
        (dict(method="euler", options=dict(interp="quadratic")), ValueError, "interp must be one of linear, cubic"),
        (dict(method="euler", event_fn=lambda t, y: y.sum()), ValueError, "needs options=dict\\(step_size"),
    ],
)
def test_what_this_solver_cannot_run_is_one_error_naming_it(call, error, words):
    with pytest.raises(error, match=words):
        odeint(_Field(), torch.ones(1, 2, dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64), **call)


def test_the_fourth_positional_argument_is_rtol_as_in_torchdiffeq():
    func, y0, t = _Field(), torch.ones(1, 2, dtype=torch.float64), torch.linspace(0, 1, 3, dtype=torch.float64)
    with pytest.raises(TypeError, match="pass the method by name: method='euler'"):
        odeint(func, y0, t, "euler")
    assert torch.equal(odeint(func, y0, t, 1e-3, 1e-5, "euler"), odeint(func, y0, t, method="euler"))


def test_rows_written_before_the_tableau_column_read_with_the_rule_their_library_ran(tmp_path):
    import shutil
    from pathlib import Path

    import pandas as pd

    from roundoff_analyzer.storage.results import load_results

    # The CI baseline's table as a version before the column wrote it: without it.
    baseline = Path(__file__).parent.parent / "reports" / "baselines" / "otflow-ci"
    shutil.copy(baseline / "manifest.json", tmp_path / "manifest.json")
    pd.read_parquet(baseline / "results.parquet").drop(columns="tableau").to_parquet(tmp_path / "results.parquet")
    table = load_results(tmp_path)
    rules = dict(table.groupby(["library", "method"])["tableau"].first())
    assert rules[("torchdiffeq", "rk4")] == "rk4_38" and rules[("native", "rk4")] == "rk4_classical"
    assert rules[("native", "euler")] == "euler"


@pytest.mark.parametrize(
    "options", [None, dict(step_size=0.07), dict(step_size=0.07, interp="cubic")], ids=["grid", "step_size", "cubic"]
)
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed"])
def test_gradients_reach_t_as_torchdiffeq_s_do(options, reverse):
    grads = []
    for solver, method in ((torchdiffeq.odeint, "rk4"), (odeint, "rk4_38")):
        t = GRID.flip(0) if reverse else GRID
        t = t.clone().requires_grad_(True)
        trajectory = solver(
            _Field(), torch.tensor([[1.0, -0.5]], dtype=torch.float64), t, method=method, options=options
        )
        grads.append(torch.autograd.grad(trajectory.square().sum(), t)[0])
    assert float(grads[0].abs().max()) > 0.1
    assert float((grads[1] - grads[0]).abs().max()) <= 1e-12 * float(grads[0].abs().max())


@pytest.mark.parametrize(("method", "theirs"), [("euler", "euler"), ("rk4_38", "rk4")])
def test_a_field_of_t_alone_passes_the_states_gradient_through_as_torchdiffeq_does(method, theirs):
    """f(t, y) = g(t) reaches neither y nor a weight: the backward has no graph to take, and y0's gradient is the
    identity's (torchdiffeq's gradient_tests 'exp' problem without t's gradient raised before)."""
    y0 = torch.ones(3, dtype=torch.float64, requires_grad=True)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)

    def field(t, y):
        return torch.exp(-t) * torch.ones(3, dtype=torch.float64)

    (native,) = torch.autograd.grad(odeint(field, y0, t, method=method).square().sum(), y0)
    (direct,) = torch.autograd.grad(torchdiffeq.odeint(field, y0, t, method=theirs).square().sum(), y0)
    assert float((native - direct).abs().max()) <= 1e-12
