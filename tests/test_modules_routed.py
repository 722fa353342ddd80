"""--per-module on models that call the solver themselves: a module whose call solves (an ODEBlock's, the whole
model's) is recomputed with the solve the sweep routed it to (the configuration's library, method and steps, in the
run's precision and in float64), never with the method its own code names. Routed, an ODEBlock calling dopri5 and one
calling rk4 are one computation: their per-module tables are equal row by row; and the whole model's backward row is
the vector-Jacobian product of the routed solve, computed here with torchdiffeq called directly."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchdiffeq
from torch import nn
from torchdiffeq import odeint

import roundoff_analyzer as ra

from .test_step_problems import _seeded, flat, rel_err

N = 4  # time steps
BATCH = 16


class Field(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, t, x):
        return self.net(x)


class ODEBlock(nn.Module):
    """As public code writes it: the module calls torchdiffeq itself, with a method and tolerances of its own."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.field, self.method = Field(), method

    def forward(self, x):
        span = torch.tensor([0.0, 1.0]).type_as(x)
        return odeint(self.field, x, span, method=self.method, rtol=1e-3, atol=1e-3)[-1]


class ODENet(nn.Module):
    def __init__(self, method: str) -> None:
        super().__init__()
        self.block, self.head = ODEBlock(method), nn.Linear(2, 2)

    def forward(self, x):
        return self.head(self.block(x))


def _sample(k: int):
    x = torch.randn(BATCH, 2, generator=torch.Generator().manual_seed(k))
    return x, (x[:, 0] * x[:, 1] > 0).long()


def _step(model, batch, handed):  # the model solves itself: the odeint handed to the step goes unused
    x, labels = batch
    return nn.functional.cross_entropy(model(x), labels)


def odenet(method: str = "dopri5", seed: int = 0) -> ra.Problem:
    return ra.Problem(model=ODENet(method), step=_step, sample_batch=_sample)


def _sweep(out: Path, factory, options: dict, **grid) -> ra.SweepResult:
    settings = {"timesteps": [N], "method": "rk4", "library": ["native", "torchdiffeq"], "dtype": "float16"}
    result = ra.sweep(
        model=factory,
        options=options,
        out=out,
        progress=False,
        per_module=True,
        scaling="none",
        noise_batches=0,
        executor="local",
        report=False,
        **(settings | grid),
    )
    assert (result.results["status"] == "ok").all(), result.results["failure_message"]
    return result


def _modules(out: Path, factory, options: dict, **grid) -> pd.DataFrame:
    modules = _sweep(out, factory, options, **grid).modules
    return modules.sort_values(["library", "module", "phase"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def dopri5_sweep(tmp_path_factory) -> ra.SweepResult:
    return _sweep(tmp_path_factory.mktemp("dopri5") / "sweep", odenet, {"method": "dopri5"})


@pytest.fixture(scope="module")
def dopri5_block(dopri5_sweep) -> pd.DataFrame:
    return dopri5_sweep.modules.sort_values(["library", "module", "phase"]).reset_index(drop=True)


def test_an_odeblock_calling_dopri5_has_the_per_module_table_of_one_calling_rk4_at_the_routed_step(
    dopri5_block, tmp_path
):
    rk4_block = _modules(tmp_path / "rk4", odenet, {"method": "rk4"})
    assert {"(model)", "block.field.net.0", "head"} <= set(dopri5_block["module"])
    assert (dopri5_block["measurement"] == "complete").all()
    pd.testing.assert_frame_equal(dopri5_block, rk4_block)


def test_the_report_says_a_module_that_solves_was_re_run_with_the_routed_solve(dopri5_sweep):
    report = dopri5_sweep.write_report().read_text()
    said = "A module whose call solves (the whole model, an ODEBlock) was re-run with the configuration's routed solve"
    assert said in report


def test_the_whole_models_backward_row_is_the_routed_solves_vector_jacobian_product(dopri5_block):
    """torchdiffeq's rk4 on the sweep's grid of N equal steps, under float16 autocast against float64, with the
    gradient the run's loss sent to the model's output; the model's own dopri5 appears nowhere."""
    model = _seeded(lambda: ODENet("dopri5"))
    x, labels = _sample(0)

    def routed(net: ODENet, x: torch.Tensor) -> torch.Tensor:
        grid = torch.linspace(0, 1, N + 1, dtype=torch.float32 if x.dtype != torch.float64 else torch.float64)
        return net.head(torchdiffeq.odeint(net.block.field, x, grid, method="rk4")[-1])

    with torch.autocast("cpu", dtype=torch.float16):
        logits = routed(model, x)
        reaching = torch.autograd.grad(nn.functional.cross_entropy(logits, labels), logits)[0]
    # The batch requires no grad, as the step is handed it: the product is the parameters'.
    with torch.autocast("cpu", dtype=torch.float16):
        out = routed(model, x)
    grads_low = torch.autograd.grad(out, list(model.parameters()), reaching.to(out.dtype))
    model64 = copy.deepcopy(model).double()
    out64 = routed(model64, x.double())
    grads_high = torch.autograd.grad(out64, list(model64.parameters()), reaching.double())
    expected = rel_err(flat(grads_low), flat(grads_high))

    rows = dopri5_block.set_index(["library", "module", "phase"])
    assert rows.loc[("torchdiffeq", "(model)", "backward"), "local_rel_err"] == pytest.approx(expected, rel=1e-6)


class CDEField(nn.Module):
    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.channels, self.hidden = channels, hidden
        self.inner, self.outer = nn.Linear(hidden, 16), nn.Linear(16, hidden * channels)

    def forward(self, t, z):
        return self.outer(self.inner(z).relu()).tanh().view(*z.shape[:-1], self.hidden, self.channels)


class NeuralCDE(nn.Module):
    """torchcde's README model: its solve is inside torchcde's `cdeint`, which calls `torchdiffeq.odeint_adjoint`
    with dopri5 unless told otherwise."""

    def __init__(self, method: str | None, channels: int = 3, hidden: int = 8) -> None:
        super().__init__()
        self.method = method
        self.field, self.initial = CDEField(channels, hidden), nn.Linear(channels, hidden)
        self.readout = nn.Linear(hidden, 1)

    def forward(self, coeffs):
        import torchcde

        path = torchcde.CubicSpline(coeffs)
        z0 = self.initial(path.evaluate(path.interval[0]))
        named = {} if self.method is None else {"method": self.method, "options": {"step_size": 0.5}}
        return self.readout(torchcde.cdeint(X=path, z0=z0, func=self.field, t=path.interval, **named)[:, -1])


def _series(k: int):
    import torchcde

    generator = torch.Generator().manual_seed(k)
    t = torch.linspace(0, 1, 10).expand(BATCH, 10)
    x = torch.stack([t, torch.randn(BATCH, 10, generator=generator), torch.randn(BATCH, 10, generator=generator)], -1)
    return torchcde.natural_cubic_coeffs(x), torch.randn(BATCH, 1, generator=generator)


def _regression(model, batch, handed):
    coeffs, targets = batch
    return (model(coeffs) - targets).pow(2).mean()


def neural_cde(method: str | None = None, seed: int = 0) -> ra.Problem:
    return ra.Problem(model=NeuralCDE(method), step=_regression, sample_batch=_series)


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_a_neural_cde_solved_inside_torchcde_has_every_row_and_those_of_its_routed_configuration(tmp_path, dtype):
    pytest.importorskip("torchcde", reason="torchcde is not installed (pip install torchcde)")
    grid = {"library": "torchdiffeq", "dtype": dtype}
    as_written = _modules(tmp_path / "dopri5", neural_cde, {}, **grid)  # torchcde's own dopri5, rtol 1e-4
    assert {"(model)", "field.inner", "initial", "readout"} <= set(as_written["module"])
    assert (as_written["measurement"] == "complete").all(), as_written["measurement"].tolist()
    assert as_written["local_rel_err"].notna().all()
    named_rk4 = _modules(tmp_path / "rk4", neural_cde, {"method": "rk4"}, **grid)
    pd.testing.assert_frame_equal(as_written, named_rk4)
