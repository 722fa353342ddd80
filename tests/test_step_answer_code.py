"""The answer's code for a training step whose own odeint call names its method, tolerances and options (ANODE's
`method="dopri5"`, `options={"max_num_steps": ...}`): the solve it hands the step drops them, so that the code, run
here, solves as the row was measured: its field evaluations are the row's, its gradient's error against a float64
run written here is the row's."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torchdiffeq

import roundoff_analyzer as ra
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.solvers import equal_steps, odeint

from .conftest import needs
from .fixtures import anode
from .test_step_problems import _seeded, flat, loop_of, rel_err

FIXTURE = Path(__file__).parent / "fixtures" / "anode.py"


def _sweep(out, library: str, **grid) -> ra.SweepResult:
    """The ANODE fixture swept in float16 without scaling."""
    settings = {"dtype": "float16", "scaling": "none", "progress": False, "report": False}
    return ra.sweep(model=f"{FIXTURE}:anode", library=library, out=out, **(settings | grid))


def _handed_odeint(library: str):
    """The `odeint` the answer's code imports for `library`, imported as that code imports it."""
    namespace: dict = {}
    exec(LIBRARIES.get(library).import_line, namespace)
    return namespace["odeint"]


# torchode's and torchdyn's own functions are not torchdiffeq's: the code imports `odeint_of` theirs. rampde runs its
# mixed precision only under CUDA autocast (here: the handed code's tests, in `pure` mode).
@pytest.mark.parametrize(
    "library",
    [
        "native",
        "torchdiffeq",
        "torchdiffeq-adjoint",
        pytest.param("torchode", marks=needs("torchode")),
        pytest.param("torchdyn", marks=needs("torchdyn")),
    ],
)
def test_the_answers_code_drops_the_steps_own_method_and_runs_what_the_row_measured(tmp_path, library):
    result = _sweep(tmp_path / library, library, timesteps=[4, 8], method="rk4", noise_batches=4)
    answer = result.answers["float16"]
    assert answer["train"], answer
    code, n = answer["code"], answer["n_timesteps"]
    assert "functools.partial" not in code
    assert 'names method="dopri5", rtol=0.001, atol=0.001 and options max_num_steps; solve drops them' in code
    row = result.results.set_index("n_timesteps").loc[n]

    problem = _seeded(anode.anode)
    model, calls = problem.model, []
    # The forward's evaluations only: the native solver's backward evaluates the field again.
    model.odefunc.register_forward_hook(lambda *_: calls.append(torch._C._current_graph_task_id() == -1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    names = {"torch": torch, "model": model, "step": problem.step, "batches": [problem.sample_batch(0)]}
    exec(loop_of(code), names | {"optimizer": optimizer, "max_norm": float("inf")})
    # The forward's evaluations of the field: the measured method's, not dopri5's.
    assert sum(calls) == row["nfe"]

    reference = _seeded(anode.anode)
    model64 = copy.deepcopy(reference.model).double()
    x, labels = reference.sample_batch(0)

    def measured(func, y0, t, **named):
        solve, method = (odeint, "rk4_classical") if library == "native" else (torchdiffeq.odeint, "rk4")
        if library not in ("native", "torchdiffeq"):
            solve = _handed_odeint(library)
        return solve(func, y0, t, method=method, options=dict(grid_constructor=equal_steps(n)))

    loss = reference.step(model64, (x.double(), labels), measured)
    expected = flat(torch.autograd.grad(loss, list(model64.parameters())))
    assert rel_err(flat(p.grad for p in model.parameters()), expected) == pytest.approx(
        row["grad_params_rel_err"], rel=1e-6
    )


@pytest.mark.parametrize("library", ["torchdiffeq", pytest.param("torchode", marks=needs("torchode"))])
def test_an_adaptive_answers_code_solves_with_the_runs_tolerances(tmp_path, library):
    """Not the solver's own defaults (torchdiffeq's rtol 1e-7 takes many more steps): its evaluations are the row's."""
    result = _sweep(tmp_path / library, library, timesteps=[4], method="dopri5", rtol=1e-2, atol=1e-4, noise_batches=2)
    answer = result.answers["float16"]
    assert answer["train"] and 'method="dopri5", rtol=0.01, atol=0.0001' in answer["code"], answer
    problem = _seeded(anode.anode)
    model, calls = problem.model, []
    model.odefunc.register_forward_hook(lambda *_: calls.append(torch._C._current_graph_task_id() == -1))
    names = {"torch": torch, "model": model, "step": problem.step, "batches": [problem.sample_batch(0)]}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    exec(loop_of(answer["code"]), names | {"optimizer": optimizer, "max_norm": float("inf")})
    assert sum(calls) == result.results["nfe"].iloc[0]
