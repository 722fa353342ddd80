"""`roundoff_analyzer.solvers.answered_by`: within its block, a model's own calls of torchdiffeq (under a name its
module imported, or through torchdiffeq's namespace) solve by the solver, method and grid given, equal to calling
that solver directly; the call's own method and tolerances give way, an adjoint call's `adjoint_params` are passed
on, torchdiffeq's inner solves (the adjoint's backward) stay its own, and every name is torchdiffeq's again
afterwards."""

from __future__ import annotations

import functools
import importlib
import sys
import textwrap

import pytest
import torch
import torchdiffeq

from roundoff_analyzer.solvers import answered_by, equal_steps
from roundoff_analyzer.solvers import odeint as native_odeint

pytestmark = pytest.mark.unit

USER_MODULE = """
    import torch
    import torchdiffeq
    from torchdiffeq import odeint
    from torchdiffeq import odeint_adjoint as solve_adjoint

    HELD = {"solve": odeint}  # a reference no routing can reach


    def by_name(field, y0):
        return odeint(field, y0, torch.tensor([0.0, 1.0]), method="dopri5", rtol=1e-7, atol=1e-9)[-1]


    def through_namespace(field, y0):
        return torchdiffeq.odeint(field, y0, torch.tensor([0.0, 0.5, 1.0]), method="dopri5")[-1]


    def adjoint(field, y0, params):
        return solve_adjoint(field, y0, torch.tensor([0.0, 1.0]), method="dopri5", adjoint_params=params)[-1]


    def with_event(field, y0):
        return odeint(field, y0, torch.tensor(0.0), event_fn=lambda t, y: y.sum())


    def held(field, y0):
        return HELD["solve"](field, y0, torch.tensor([0.0, 1.0]))[-1]
"""


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "user_ode_module.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("user_ode_module")
    yield module
    sys.modules.pop("user_ode_module", None)


class Field(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, t, y):
        return torch.tanh(self.linear(y))


GRID = {"options": {"grid_constructor": equal_steps(4)}}


def test_a_dopri5_call_by_name_and_through_torchdiffeqs_namespace_solves_by_the_method_and_grid_given(user):
    torch.manual_seed(0)
    field, y0 = Field(), torch.randn(5, 3)
    direct = native_odeint(field, y0, torch.tensor([0.0, 1.0]), method="rk4_classical", **GRID)[-1]
    halfway = native_odeint(field, y0, torch.tensor([0.0, 0.5, 1.0]), method="rk4_classical", **GRID)[-1]
    with answered_by(native_odeint, method="rk4_classical", **GRID):
        by_name, through_namespace = user.by_name(field, y0), user.through_namespace(field, y0)
    assert torch.equal(by_name, direct) and torch.equal(through_namespace, halfway)
    adaptive = torchdiffeq.odeint(field, y0, torch.tensor([0.0, 1.0]), method="dopri5", rtol=1e-7, atol=1e-9)[-1]
    assert not torch.equal(by_name, adaptive)  # dopri5 would have solved otherwise
    assert user.odeint is torchdiffeq.odeint and user.solve_adjoint is torchdiffeq.odeint_adjoint  # given back
    assert torch.equal(user.by_name(field, y0), adaptive)


def test_torchdiffeq_itself_may_answer_without_routing_its_own_call_again(user):
    torch.manual_seed(1)
    field, y0 = Field(), torch.randn(5, 3)
    rk4 = functools.partial(torchdiffeq.odeint, method="rk4", **GRID)
    with answered_by(rk4):
        routed = user.by_name(field, y0)
    assert torch.equal(routed, rk4(field, y0, torch.tensor([0.0, 1.0]))[-1])


def test_an_adjoint_call_is_answered_by_the_adjoint_given_with_its_adjoint_params(user):
    torch.manual_seed(2)
    field, y0 = Field(), torch.randn(5, 3)
    scale = torch.tensor(0.7, requires_grad=True)  # reached by the field, named in adjoint_params only

    def scaled(t, y):
        return scale * field(t, y)

    params = (*field.parameters(), scale)
    adjoint = functools.partial(torchdiffeq.odeint_adjoint, method="rk4", **GRID)
    euler = functools.partial(native_odeint, method="euler", **GRID)
    with answered_by(euler, adjoint=adjoint):  # the backward inside too: torchdiffeq's own solves stay its own
        user.adjoint(scaled, y0, params).sum().backward()
    routed = scale.grad.clone()
    scale.grad = None
    adjoint(scaled, y0, torch.tensor([0.0, 1.0]), adjoint_params=params)[-1].sum().backward()
    assert scale.grad is not None and torch.equal(routed, scale.grad)


def test_an_event_call_and_a_call_through_a_held_reference_are_refused_in_one_line(user):
    field, y0 = Field(), torch.randn(2, 3)
    with answered_by(native_odeint, method="euler", **GRID):
        with pytest.raises(NotImplementedError, match="event_fn"):
            user.with_event(field, y0)
        with pytest.raises(TypeError, match="cannot be routed") as refused:
            user.held(field, y0)
    assert "\n" not in str(refused.value)
    assert user.held(field, y0).shape == (2, 3)  # outside the block, torchdiffeq's own
