"""Every vector field torchdiffeq accepts trains with the native solver: the tensors requiring grad that the field
reaches (a module's parameters, tensors a closure or a partial holds, a bound method's object's modules, global
modules, a tensor computed before the solve) get the gradients torchdiffeq gives them, found from the field's first
evaluation; where they cannot be told, the call is refused before solving, naming `params`."""

from __future__ import annotations

import copy
import functools
import sys

import pandas as pd
import pytest
import torch
import torchdiffeq

import roundoff_analyzer as ra
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.libraries.torchdiffeq_lib import solver_name
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.axes.scalings import ScalerSettings
from roundoff_analyzer.measuring.references import ReferenceCache
from roundoff_analyzer.solvers import odeint, odeint_adjoint
from roundoff_analyzer.solvers.field_tensors import FieldTensorsUnknown, reached_tensors

from .test_step_problems import _seeded, flat, rel_err

torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
SCALE = torch.nn.Parameter(torch.tensor(0.7, dtype=torch.float64))
ENCODER = torch.nn.Linear(3, 3).double()
PARAMS = [*NET.parameters(), SCALE, *ENCODER.parameters()]


class _Module(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = NET

    def forward(self, t, y):
        return self.net(y) * SCALE


class _Holder:
    def __init__(self) -> None:
        self.net = NET

    def field(self, t, y):
        return self.net(y) * SCALE


def _global_field(t, y):
    return NET(y) * SCALE - 0.1 * y


def _scaled(t, y, scale):
    return NET(y) * scale


FIELDS = {
    "an nn.Module": lambda context: _Module(),
    "a lambda over a module and a tensor": lambda context: lambda t, y: NET(y) * SCALE,
    "a functools.partial holding a parameter": lambda context: functools.partial(_scaled, scale=SCALE),
    "a bound method": lambda context: _Holder().field,
    "a function using global modules": lambda context: _global_field,
    "a closure over a tensor computed before the solve": lambda context: lambda t, y: NET(y + context) * SCALE,
}


def _gradients(solver, make_field, y0_requires_grad, method):
    """Every parameter's gradient (None where it got none) and y0's, after a loss of every state."""
    for p in PARAMS:
        p.grad = None
    x = torch.linspace(-1, 1, 15, dtype=torch.float64).reshape(5, 3)
    context = ENCODER(x)  # a conditioning tensor, computed before the solve from parameters of its own
    y0 = (0.5 * x).requires_grad_(y0_requires_grad)
    states = solver(make_field(context), y0, torch.linspace(0, 1, 9, dtype=torch.float64), method=method)
    (states.sin() ** 2).sum().backward()
    return [p.grad for p in PARAMS], y0.grad


@pytest.mark.parametrize("y0_requires_grad", [True, False])
@pytest.mark.parametrize("form", list(FIELDS))
def test_every_form_of_field_gets_torchdiffeqs_parameter_gradients_in_float64(form, y0_requires_grad):
    native, native_y0 = _gradients(odeint, FIELDS[form], y0_requires_grad, "rk4_38")
    reference, reference_y0 = _gradients(torchdiffeq.odeint, FIELDS[form], y0_requires_grad, "rk4")
    reached = [i for i, g in enumerate(reference) if g is not None]
    assert len(reached) >= 3  # the field's parameters really reach the loss (NET's at least)
    assert [i for i, g in enumerate(native) if g is not None] == reached
    for got, want in zip(native, reference):
        if want is not None:
            assert float((got - want).abs().max()) <= 1e-12 * max(1.0, float(want.abs().max()))
    if y0_requires_grad:
        assert float((native_y0 - reference_y0).abs().max()) <= 1e-12
    else:
        assert native_y0 is None


def test_the_field_is_evaluated_as_often_as_torchdiffeq_evaluates_it_and_after_the_first_steps_callback():
    calls = []

    class Counted(torch.nn.Module):
        def forward(self, t, y):
            calls.append("f")
            return NET(y)

        def callback_step(self, t0, y0, dt):
            calls.append("step")

    y0 = torch.ones(2, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    odeint(Counted(), y0, t, method="midpoint")
    native = list(calls)
    calls.clear()
    torchdiffeq.odeint(Counted(), y0, t, method="midpoint")
    assert native == calls == ["step", "f", "f"] * 4


def test_a_tensor_used_directly_and_through_a_tensor_computed_from_it_before_the_solve_is_refused_naming_params():
    derived = NET[0].weight.sum()  # computed before the solve from a weight the field also uses

    with pytest.raises(FieldTensorsUnknown, match=r"computed from it before the solve.*params="):
        odeint(
            lambda t, y: NET(y) * derived,
            torch.ones(2, 3, dtype=torch.float64),
            torch.linspace(0, 1, 3),
            method="euler",
        )


def test_a_weight_reached_through_an_operation_torch_function_modes_do_not_see_gets_its_gradient():
    weight = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))

    def field(t, y):
        with torch._C.DisableTorchFunction():  # what a C++ extension's own call does: no mode sees the weight
            return torch.tanh(y * weight)

    y0 = torch.ones(2, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    (odeint(field, y0, t, method="euler") ** 2).sum().backward()
    native, weight.grad = weight.grad, None
    (torchdiffeq.odeint(field, y0, t, method="euler") ** 2).sum().backward()
    assert native is not None and float((native - weight.grad).abs().max()) <= 1e-12


def test_a_weight_behind_an_earlier_tensor_that_no_mode_saw_is_refused_naming_params():
    earlier = NET[0].bias * 2.0

    def field(t, y):
        with torch._C.DisableTorchFunction():
            return torch.tanh(y * earlier)

    with pytest.raises(FieldTensorsUnknown, match=r"computed before the solve.*params="):
        odeint(field, torch.ones(2, 8, dtype=torch.float64), torch.linspace(0, 1, 3), method="euler")


def test_params_given_name_the_tensors_instead_and_without_grad_mode_nothing_is_looked_for():
    y0 = torch.ones(2, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    for p in PARAMS:
        p.grad = None
    states = odeint(lambda s, y: NET(y) * SCALE, y0, t, method="euler", params=[SCALE, SCALE])
    states.sum().backward()
    assert SCALE.grad is not None and all(p.grad is None for p in NET.parameters())
    once = SCALE.grad.clone()
    SCALE.grad = None
    odeint(lambda s, y: NET(y) * SCALE, y0, t, method="euler", params=[SCALE]).sum().backward()
    assert torch.equal(SCALE.grad, once)  # listed twice, counted once
    with torch.no_grad():
        quiet = odeint(lambda s, y: NET(y) * SCALE, y0, t, method="euler")
    assert not quiet.requires_grad and torch.equal(quiet, states.detach())


def _energy_gradient(t, y):
    """A field that takes a derivative of its own, as a Hamiltonian or CNF field does: its state detached, a leaf."""
    with torch.enable_grad():
        y = y.detach().requires_grad_(True)
        (gradient,) = torch.autograd.grad(NET(y).square().sum(), y, create_graph=True)
    return -gradient


def test_a_leaf_the_field_makes_itself_is_not_among_the_tensors_it_reaches_and_the_gradients_are_torchdiffeqs():
    y0 = torch.ones(2, 3, dtype=torch.float64)
    found = reached_tensors(_energy_gradient, torch.zeros((), dtype=torch.float64), y0)
    assert [id(p) for p in found.params] == [id(p) for p in NET.parameters()]
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    native = torch.autograd.grad(odeint(_energy_gradient, y0, t, method="euler").sum(), list(NET.parameters()))
    direct = torch.autograd.grad(
        torchdiffeq.odeint(_energy_gradient, y0, t, method="euler").sum(), list(NET.parameters())
    )
    assert float((flat(native) - flat(direct)).abs().max()) <= 1e-12


@pytest.mark.parametrize(
    "form", ["a lambda over a module and a tensor", "a closure over a tensor computed before the solve"]
)
def test_under_bfloat16_autocast_a_closures_parameters_get_gradients_near_float64s(form):
    exact, _ = _gradients(odeint, FIELDS[form], True, "rk4_classical")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _ = _gradients(odeint, FIELDS[form], True, "rk4_classical")
    for got, want in zip(low, exact):
        assert (got is None) == (want is None)
        if want is not None:
            assert got.dtype == want.dtype and torch.isfinite(got).all()
            assert float((got - want).norm() / want.norm()) < 0.1  # bfloat16's roundoff, not a lost gradient


_CONDITIONED = """
import torch
from torch import nn
import roundoff_analyzer as ra


def factory(seed: int = 0):
    field = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))
    model = nn.ModuleDict({"encoder": nn.Linear(2, 2), "field": field})

    def step(model, x, odeint):
        context = model["encoder"](x)  # computed before the solve, from the batch and the encoder
        states = odeint(lambda t, y: model["field"](y) * context, x, torch.tensor([0.0, 1.0]))
        return (states[-1] ** 2).mean()

    def sample_batch(k):
        return torch.randn(16, 2, generator=torch.Generator().manual_seed(k))

    return ra.Problem(model=model, step=step, sample_batch=sample_batch)
"""


def test_a_sweeps_closure_over_a_tensor_computed_from_the_batch_gets_every_gradient_a_direct_solve_gives(tmp_path):
    (tmp_path / "conditioned.py").write_text(_CONDITIONED)
    result = ra.sweep(
        model=f"{tmp_path / 'conditioned.py'}:factory",
        out=tmp_path / "out",
        timesteps=[4],
        method="euler",
        library=["native", "torchdiffeq"],
        dtype="bfloat16",
        scaling="none",
        noise_batches=0,
        executor="local",
        progress=False,
        report=False,
    )
    problem = _seeded(lambda: sys.modules["roundoff_user_conditioned"].factory())

    def direct(solver, low):
        dtype = torch.float64 if low is None else torch.float32
        model = copy.deepcopy(problem.model).to(dtype)
        x = problem.sample_batch(0).to(dtype)  # as training hands it: no grad
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low is not None):
            context = model["encoder"](x)
            field = lambda t, y: model["field"](y) * context  # noqa: E731
            final = solver(field, x, torch.linspace(0, 1, 5, dtype=dtype), method="euler")[-1]
            loss = (final**2).mean()
        return torch.autograd.grad(loss, list(model.parameters()))

    table = result.results.set_index("library")
    assert (table["status"] == "ok").all(), table["failure_message"]
    for library, solver in (("native", odeint), ("torchdiffeq", torchdiffeq.odeint)):
        low, high = direct(solver, torch.bfloat16), direct(solver, None)
        assert pd.isna(table.loc[library, "grad_y0_rel_err"])  # a step's batch is not differentiated
        expected = rel_err(flat(low), flat(high))
        assert table.loc[library, "grad_params_rel_err"] == pytest.approx(expected, rel=1e-6)
    # The float64 gradients themselves agree between the two libraries: none of them was lost by the native solver.
    native, reference = direct(odeint, None), direct(torchdiffeq.odeint, None)
    assert float((flat(native) - flat(reference)).abs().max()) <= 1e-12


class _Counted(torch.nn.Module):
    def __init__(self, func) -> None:
        super().__init__()
        self.func, self.calls = func, 0

    def forward(self, t, y):
        self.calls += 1
        return self.func(t, y)


@pytest.mark.parametrize("method, rtol", [("rk4_38", 1e-7), ("dopri5", 1e-6)])
def test_torchdiffeq_adjoints_reference_gets_the_gradients_through_a_closed_over_tensor_that_odeint_gives(method, rtol):
    # torchdiffeq's adjoint returns gradients for the tensors named in adjoint_params only: the closure's context,
    # computed from the batch by the encoder, must be one of them, or the encoder's gradient through it is lost.
    namespace: dict = {}
    exec(_CONDITIONED, namespace)
    problem = _seeded(namespace["factory"])
    copies = ProblemCopies(problem)
    library, solve = LIBRARIES.get("torchdiffeq-adjoint"), METHODS.get(method)
    if solve.adaptive:  # tight, so that the adjoint's gradients and those through odeint's steps agree closely
        solve = solve.with_settings(rtol=1e-10, atol=1e-12)
    reference = ReferenceCache(copies, ScalerSettings()).get(library, solve, 16)
    model = copy.deepcopy(problem.model).double()
    x = problem.sample_batch(0).double()  # as training hands it: no grad
    context = model["encoder"](x)
    field = _Counted(lambda t, y: model["field"](y) * context)
    grid = torch.linspace(0, 1, 17, dtype=torch.float64)
    options = {"rtol": solve.rtol, "atol": solve.atol} if solve.adaptive else {}
    final = torchdiffeq.odeint(field, x, grid, method=solver_name(solve), **options)[-1]
    expected = torch.autograd.grad((final**2).mean(), list(model.parameters()))
    assert len(reference.grads) == len(expected)
    for measured, direct in zip(reference.grads, expected, strict=True):
        assert rel_err(measured, direct) <= rtol
    # The evaluation that found the context is the solve's first: the forward evaluates the field as odeint does.
    assert reference.report.n_function_evals == field.calls


@pytest.mark.parametrize("method", ["euler", "midpoint"])
def test_a_tensor_added_to_the_state_gets_its_gradient_once_per_step(method):
    """Autograd hands one gradient tensor to both inputs of `y + shift`; the step size must scale it once for each."""
    torch.manual_seed(0)
    shift = torch.nn.Parameter(torch.full((3,), 0.5, dtype=torch.float64))
    linear = torch.nn.Linear(3, 3).double()
    y0 = torch.ones(3, dtype=torch.float64, requires_grad=True)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    grads = []
    for solver, name in ((odeint, method), (torchdiffeq.odeint, method)):
        states = solver(lambda s, y: linear(y + shift), y0, t, method=name)
        grads.append(torch.autograd.grad(states[-1].sum(), [y0, shift, linear.weight]))
    for got, want in zip(*grads):
        assert float((got - want).abs().max()) <= 1e-12


@torch.jit.script
def _scripted_layer(y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.tanh(y @ weight.t())


def test_a_field_calling_a_scripted_function_gets_the_gradients_of_the_weights_it_hands_that_function():
    """What a scripted function makes and uses, no torch function mode sees: its output is the evaluation's own tensor,
    and its weights are found in the graph."""
    weight = torch.nn.Parameter(torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))
    head = torch.nn.Linear(8, 3).double()

    def field(t, y):
        return head(_scripted_layer(y, weight)) * weight[0, 0]

    y0 = torch.ones(4, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    grads = []
    for solver, method in ((odeint, "rk4_38"), (torchdiffeq.odeint, "rk4")):
        states = solver(field, y0, t, method=method)
        grads.append(torch.autograd.grad((states**2).sum(), [weight, *head.parameters()]))
    for got, want in zip(*grads):
        assert float((got - want).abs().max()) <= 1e-12 * max(1.0, float(want.abs().max()))


class _Switching(torch.nn.Module):
    """A field whose later steps use a module its first evaluation does not (a branch on t)."""

    def __init__(self, late: torch.nn.Module) -> None:
        super().__init__()
        self.net, self.late = NET, late

    def forward(self, t, y):
        return self.net(y) if t < 0.5 else self.late(y)


@pytest.mark.parametrize("solver", [odeint, odeint_adjoint])
def test_a_closure_reaching_a_module_only_at_a_later_time_is_refused_and_its_gradients_are_torchdiffeqs_with_params(
    solver,
):
    late = torch.nn.Linear(3, 3).double()
    y0 = torch.ones(2, 3, dtype=torch.float64)
    t = torch.linspace(0, 1, 9, dtype=torch.float64)
    switching = _Switching(late)
    closure = lambda s, y: switching(s, y)  # noqa: E731 - a closure, whose modules the solver cannot list
    with pytest.raises(
        FieldTensorsUnknown, match=r"used a 3×3 float64 parameter at t = 0\.5 that its first"
    ) as refused:
        solver(closure, y0, t, method="euler")
    assert "params=" in str(refused.value) and "\n" not in str(refused.value)
    named = (
        {"params": list(switching.parameters())}
        if solver is odeint
        else {"adjoint_params": tuple(switching.parameters())}
    )
    want = torch.autograd.grad(torchdiffeq.odeint(closure, y0, t, method="euler").sum(), list(switching.parameters()))
    for field, given in ((closure, named), (switching, {})):  # the tensors named, or the module's own parameters
        got = torch.autograd.grad(solver(field, y0, t, method="euler", **given).sum(), list(switching.parameters()))
        assert float((flat(got) - flat(want)).abs().max()) <= 1e-12
        assert float(flat(got[-2:]).abs().max()) > 0  # the late module's gradient is there
