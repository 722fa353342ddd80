"""--per-module and --keep-float32 on vector fields written as public code writes them (tests/fixtures): an in-place
activation (`nn.ELU(inplace=True)`), a time handed on as a Python float (`pad(x, value=t)`), weights used outside their
module's call (`layer.forward(x)`, `torch.mm(layer.weight.t(), v)`), a layer whose output nothing uses, a kernel that
refuses float64. Each local roundoff is checked against a float64 recomputation written here, on a run of torchdiffeq
made here as the sweep makes it, not through the tool."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.nn import functional
from torchdiffeq import odeint

import roundoff_analyzer as ra
from roundoff_analyzer.judging.answer import answers
from roundoff_analyzer.report.sections.per_module import SECTION, ranked, rows_of, unused

FIXTURES = Path(__file__).parent / "fixtures"
N = 4  # time steps


def _sweep(out: Path, fixture: str, factory: str | None = None, **settings):
    settings = {
        "timesteps": [N],
        "method": "euler",
        "library": "torchdiffeq",
        "dtype": "float16",
        "scaling": "none",
        "per_module": True,
        "noise_batches": 0,
        **settings,
    }
    return ra.sweep(f"{FIXTURES / fixture}.py:{factory or fixture}", out=out, progress=False, **settings)


def _row(result, module: str, phase: str, keep: str = "none"):
    m = result.modules
    return m[(m["module"] == module) & (m["phase"] == phase) & (m["keep_float32"] == keep)].iloc[0]


def _rel(value: torch.Tensor, reference: torch.Tensor) -> float:
    value, reference = value.detach().double().reshape(-1), reference.detach().double().reshape(-1)
    return float(torch.linalg.vector_norm(value - reference) / torch.linalg.vector_norm(reference))


def _run(func, y0: torch.Tensor) -> None:
    """The sweep's run, written here: torchdiffeq's euler under float16 autocast, the loss formed in float32 outside it,
    and its backward."""
    y = y0.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.float16):
        trajectory = odeint(func, y, torch.linspace(0.0, 1.0, N + 1), method="euler")
    trajectory.float()[-1].pow(2).mean().backward()


class Calls:
    """A module's calls in a run: its input before the call, its output, and the gradient that reached the output."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.inputs: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        module.register_forward_pre_hook(lambda m, args: self.inputs.append(args[-1].detach().clone()))
        module.register_forward_hook(self._after)

    def _after(self, module, args, output) -> None:
        self.outputs.append(output.detach().clone())
        output.register_hook(lambda grad: self.grads.append(grad.detach().clone()))


def _linear_vjp_error(layer: torch.nn.Linear, x: torch.Tensor, grad: torch.Tensor) -> float:
    """A Linear's vector-Jacobian product with `grad`, with respect to its input and weights, in float16 autocast
    against float64."""
    low = [v.detach().clone().requires_grad_(True) for v in (x, layer.weight, layer.bias)]
    with torch.autocast("cpu", dtype=torch.float16):
        out = functional.linear(*low)
    grads_low = torch.autograd.grad(out, low, grad.to(out.dtype))
    high = [v.detach().double().requires_grad_(True) for v in (x, layer.weight, layer.bias)]
    grads_high = torch.autograd.grad(functional.linear(*high), high, grad.double())
    return _rel(torch.cat([g.reshape(-1).double() for g in grads_low]), torch.cat([g.reshape(-1) for g in grads_high]))


@pytest.fixture(scope="module")
def inplace(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("inplace") / "sweep", "inplace_elu")


def test_an_in_place_activation_has_the_roundoff_of_its_input_as_it_was_before_the_call(inplace):
    from tests.fixtures.inplace_elu import inplace_elu

    func, y0, _ = inplace_elu()
    elu, fc3 = Calls(func.elu), Calls(func.fc3)
    _run(func, y0)
    expected = max(_rel(out, functional.elu(x.double())) for x, out in zip(elu.inputs, elu.outputs))
    row = _row(inplace, "elu", "forward")
    assert math.isclose(row["local_rel_err"], expected, rel_tol=1e-4)
    assert row["n_calls"] == 2 * N and row["measurement"] == "complete"
    assert row["local_rel_err"] < 10 * inplace.results.iloc[0]["unit_roundoff"]  # roundoff, not elu(elu(x))

    # The backward of the layer after it: every call recomputed, none stopped by the in-place write.
    grads = fc3.grads[::-1]  # the gradients arrive last call first
    expected = max(_linear_vjp_error(func.fc3, x, g) for x, g in zip(fc3.inputs, grads))
    row = _row(inplace, "fc3", "backward")
    assert row["n_calls"] == N and math.isclose(row["local_rel_err"], expected, rel_tol=1e-4)
    assert row["measurement"] == "complete"
    assert (inplace.modules["measurement"] == "complete").all()
    assert set(inplace.modules.loc[inplace.modules["phase"] == "backward", "n_calls"]) == {N, 2 * N}


def test_a_time_handed_on_as_a_python_float_is_handed_on_in_every_recomputation(tmp_path):
    from tests.fixtures.time_as_float import time_as_float

    result = _sweep(tmp_path / "sweep", "time_as_float")
    func, y0, _ = time_as_float()
    inner = Calls(func.inner)
    _run(func, y0)
    expected = max(_linear_vjp_error(func.inner, x, g) for x, g in zip(inner.inputs, inner.grads[::-1]))
    row = _row(result, "inner", "backward")
    assert row["n_calls"] == N and math.isclose(row["local_rel_err"], expected, rel_tol=1e-4)
    whole = _row(result, "(vector field)", "backward")
    assert whole["n_calls"] == N and whole["local_rel_err"] > 0
    assert row["measurement"] == whole["measurement"] == "complete"


def _layer_errors(func, x: torch.Tensor) -> dict[str, float]:
    """The local roundoff of each weight operation of one call of the flow, by the module whose weights it uses."""
    potential = func.potential
    w0, b0 = potential.layers[0].weight.detach(), potential.layers[0].bias.detach()
    w1, b1 = potential.layers[1].weight.detach(), potential.layers[1].bias.detach()
    w = potential.w.weight.detach()
    with torch.autocast("cpu", dtype=torch.float16):
        opening = functional.linear(x, w0, b0)
        u0 = torch.tanh(opening)
        inner = functional.linear(u0, w1, b1)
        term = w.t()
        v1 = (1 - torch.tanh(inner) ** 2).t() * term
        product1 = torch.mm(w1.t(), v1)
        z1 = term + 0.5 * product1
        v0 = (1 - u0**2).t() * z1
        product0 = torch.mm(w0.t(), v0)
    d = torch.float64
    return {
        "potential.layers.0": max(
            _rel(opening, functional.linear(x.to(d), w0.to(d), b0.to(d))),
            _rel(product0, torch.mm(w0.to(d).t(), v0.to(d))),
        ),
        "potential.layers.1": max(
            _rel(inner, functional.linear(u0.to(d), w1.to(d), b1.to(d))),
            _rel(product1, torch.mm(w1.to(d).t(), v1.to(d))),
        ),
    }


def test_weights_used_outside_their_module_are_measured_as_calls_of_the_module(tmp_path):
    from tests.fixtures.weights_outside_calls import weights_outside_calls

    result = _sweep(tmp_path / "sweep", "weights_outside_calls")
    func, y0, _ = weights_outside_calls()
    field = Calls(func)
    _run(func, y0)
    per_call = [_layer_errors(func, x) for x in field.inputs]
    for module in ("potential.layers.0", "potential.layers.1"):
        row = _row(result, module, "forward")
        assert math.isclose(row["local_rel_err"], max(e[module] for e in per_call), rel_tol=1e-4), module
        assert row["n_calls_outside"] == 2 * N and row["measurement"] == "complete"
        assert _row(result, module, "backward")["n_calls"] == 2 * N  # the gradient reached both uses in each call
    # layers.1's own call computes a value the flow never reads.
    assert _row(result, "potential.layers.1", "forward")["n_calls_unused"] == N
    report = (result.folder / "report.md").read_text().split(SECTION, 1)[1]
    assert "counted as calls of the module that owns them: `potential.layers.0` (8 of 8 calls)" in report


def test_a_module_the_loss_does_not_depend_on_is_never_named(tmp_path):
    result = _sweep(tmp_path / "sweep", "weights_outside_calls", "with_unused_probe")
    rows = rows_of(result.modules, result.results.iloc[0])
    probe = _row(result, "probe", "forward")
    assert probe["n_calls_unused"] == probe["n_calls"] == N and pd.isna(probe["local_rel_err"])
    assert unused(rows) == ["probe"]
    assert "probe" not in set(ranked(rows, 4.9e-4, limit=20)["module"])
    report = (result.folder / "report.md").read_text().split(SECTION, 1)[1]
    assert "No gradient reached the output of `probe`" in report


def test_a_recomputation_that_fails_is_said_and_the_runs_rows_are_those_of_a_sweep_without_it(tmp_path):
    watched = _sweep(tmp_path / "watched", "refusing_layers", "checkpointed")
    plain = _sweep(tmp_path / "plain", "refusing_layers", "checkpointed", per_module=False, report=False)
    for column in ("status", "grad_params_rel_err", "sol_rel_err"):
        assert watched.results.iloc[0][column] == plain.results.iloc[0][column]
    first = _row(watched, "first", "backward")
    assert first["n_calls"] == N and pd.isna(first["local_rel_err"])
    assert first["measurement"].startswith("backward recomputation failed: RuntimeError: When use_reentrant=True")
    assert first["measurement"].endswith(f"({N} of {N} calls)")
    assert _row(watched, "first", "forward")["measurement"] == "complete"
    assert _row(watched, "last", "backward")["measurement"] == "complete"
    report = (watched.folder / "report.md").read_text().split(SECTION, 1)[1]
    assert "Not measured in full: 2 of the 6 module rows" in report  # the layer and the field as a whole, backward


def test_a_layer_that_takes_no_hooks_has_a_row_that_says_so(tmp_path):
    result = _sweep(tmp_path / "sweep", "refusing_layers", "scripted")
    first = _row(result, "first", "forward")
    assert first["n_calls"] == 0 and first["measurement"].startswith("not watched: register_forward_pre_hook")
    assert _row(result, "last", "backward")["measurement"] == "complete"


def _flow_keeping_layer0(func, x: torch.Tensor, keep: bool) -> torch.Tensor:
    """The flow written out under float16 autocast, with the operations on layers[0]'s weights in float32 where
    `keep`, inputs cast up, as keep_float32 promises."""
    potential = func.potential
    w0, b0 = potential.layers[0].weight, potential.layers[0].bias
    w1, b1 = potential.layers[1].weight, potential.layers[1].bias
    kept = (lambda: torch.autocast("cpu", enabled=False)) if keep else nullcontext
    with torch.autocast("cpu", dtype=torch.float16):
        with kept():
            opening = functional.linear(x.float() if keep else x, w0, b0)
        u0 = torch.tanh(opening)
        inner = functional.linear(u0, w1, b1)
        term = potential.w.weight.t()
        z1 = term + 0.5 * torch.mm(w1.t(), (1 - torch.tanh(inner) ** 2).t() * term)
        v0 = (1 - u0**2).t() * z1
        with kept():
            z0 = torch.mm(w0.t(), v0.float() if keep else v0)
        return -z0.t()


def test_keep_float32_keeps_a_modules_weights_where_the_model_uses_them_outside_its_forward():
    from tests.fixtures.weights_outside_calls import weights_outside_calls

    func, y0, _ = weights_outside_calls()
    t = torch.tensor(0.0)
    with torch.autocast("cpu", dtype=torch.float16), torch.no_grad():
        assert torch.equal(func(t, y0), _flow_keeping_layer0(func, y0, keep=False))
        ra.keep_float32(func, "potential.layers.0")
        assert torch.equal(func(t, y0), _flow_keeping_layer0(func, y0, keep=True))


def test_what_is_kept_is_said_as_it_is(tmp_path):
    result = _sweep(
        tmp_path / "sweep", "weights_outside_calls", keep_float32=["none", "potential.layers.0", "potential.gradient"]
    )
    # Kept by method: every module inside it is kept, its weights' uses included, and their roundoff is float32's.
    for module in ("potential.layers.0", "potential.layers.1", "potential.w"):
        row = _row(result, module, "forward", "potential.gradient")
        assert row["kept_float32"] and row["local_rel_err"] < 1e-6, module
    assert not _row(result, "potential.layers.1", "forward", "potential.layers.0")["kept_float32"]
    assert _row(result, "potential.layers.0", "forward", "potential.layers.0")["local_rel_err"] < 1e-6

    shares = result.results.set_index("keep_float32")
    assert shares.loc["potential.gradient", "low_dtype_op_share"] == 0  # only the negation is outside the method
    assert 0 < shares.loc["potential.gradient", "kept_op_share"] < 1
    assert shares.loc["potential.layers.0", "low_dtype_op_share"] > 0
    assert 0 < shares.loc["potential.layers.0", "kept_op_share"] < shares.loc["potential.gradient", "kept_op_share"]
    assert math.isnan(shares.loc["none", "kept_op_share"])

    found = {a.dtype: a for a in answers(result.results)}
    whole = found["float16 keeping potential.gradient in float32"]
    assert not whole.train and not whole.kept.computes_low
    record = result.answers["float16 keeping potential.gradient in float32"]
    assert not record["train"] and record["low_dtype_op_share"] == (0.0, 0.0)
    report = (result.folder / "report.md").read_text()
    answer = report.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert "**float16 keeping potential.gradient in float32**: not a float16 setup: the kept part runs" in answer
    assert "no operation computes in float16" in answer
    recommended = report.split("## Recommendations", 1)[1].split("\n## ", 1)[0]
    kept_line = next(
        line for line in recommended.splitlines() if "potential.gradient in float32**: the most accurate" in line
    )
    assert "not a float16 setup" in kept_line
