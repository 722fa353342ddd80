"""--per-module on code written as public neural-ODE code writes it (tests/fixtures/public_patterns.py): layers that
return tuples (a GRU's `_, h`, an LSTM cell's `(h, c)`, `nn.MultiheadAttention`'s `(output, weights)`), a weight of the
model itself used by a method that is not its forward (OT-Flow's `Phi.A`), a weight used only where nothing can watch
it (TorchScript), and a backward on gradients below float16's normal range. Local roundoff is checked against float16
and float64 computations written here."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchdiffeq

from roundoff_analyzer.measuring.module_hooks import UNSEEN_USE
from roundoff_analyzer.report.sections.per_module import SECTION, below_normal, ranked, rows_of, unused
from tests.fixtures import public_patterns

from .test_modules_public_code import N
from .test_modules_public_code import _sweep as _fixture_sweep

FLOAT16_SMALLEST_NORMAL = torch.finfo(torch.float16).tiny


def _sweep(out: Path, factory: str, **settings):
    """The sweep of test_modules_public_code (torchdiffeq euler, float16, N steps, --per-module) on one of these."""
    return _fixture_sweep(out, "public_patterns", factory, **settings)


def _row(result, module: str, phase: str) -> pd.Series:
    m = result.modules
    return m[(m["module"] == module) & (m["phase"] == phase)].iloc[0]


def _rel(value: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    value64 = torch.cat([v.detach().double().reshape(-1) for v in value])
    reference64 = torch.cat([r.detach().double().reshape(-1) for r in reference])
    return float(torch.linalg.vector_norm(value64 - reference64) / torch.linalg.vector_norm(reference64))


def _built(factory):
    torch.manual_seed(0)  # as the sweep builds it: the factory runs after torch.manual_seed(seed)
    problem = factory()
    return problem.model, problem.sample_batch(0)


def _section(result) -> str:
    return (result.folder / "report.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("encoders") / "sweep", "recurrent_encoders")


def test_a_layer_returning_a_tuple_is_measured_on_every_floating_output(encoders):
    model, x = _built(public_patterns.recurrent_encoders)
    with torch.autocast("cpu", dtype=torch.float16):
        gru, cell = model.gru(x), model.lstm(x[:, 0])
        attention = model.attention(x, x, x)
    gru64, cell64, attention64 = (copy.deepcopy(m).double() for m in (model.gru, model.lstm, model.attention))
    x64 = x.double()
    expected = {
        "gru": _rel(list(gru), list(gru64(x64))),
        "lstm": _rel(list(cell), list(cell64(x64[:, 0]))),
        "attention": _rel(list(attention), list(attention64(x64, x64, x64))),
    }
    for module, error in expected.items():
        row = _row(encoders, module, "forward")
        assert math.isclose(row["local_rel_err"], error, rel_tol=1e-6), module
        # The output sequence of `_, h = gru(x)` and the attention weights are never used: the other output is.
        assert row["n_calls"] == 1 and row["n_calls_unused"] == 0 and row["measurement"] == "complete"
        assert _row(encoders, module, "backward")["measurement"] == "complete"


def test_the_backward_of_a_tuple_returning_layer_is_its_product_with_the_gradient_of_the_output_used(encoders):
    model, x = _built(public_patterns.recurrent_encoders)
    reached = {}
    with torch.autocast("cpu", dtype=torch.float16):
        sequence, h = model.gru(x)
        h.register_hook(lambda g: reached.setdefault("h", g.detach().clone()))
        h_cell, c_cell = model.lstm(x[:, 0])
        attended, _ = model.attention(x, x, x)
        z0 = model.read_out(torch.cat([h[-1], h_cell, c_cell, attended.mean(1)], dim=1))
        z = torchdiffeq.odeint(model.func, z0, torch.linspace(0.0, 1.0, N + 1), method="euler")
        loss = z[-1].pow(2).mean()
    loss.backward()
    gru64 = copy.deepcopy(model.gru).double()

    def product(gru, dtype, autocast: bool) -> list[torch.Tensor]:
        batch = x.detach().to(dtype)  # as the step is handed it: no grad, so the product is the parameters'
        with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
            _, h_n = gru(batch)
        return list(torch.autograd.grad(h_n, list(gru.parameters()), reached["h"].to(h_n.dtype)))

    expected = _rel(product(model.gru, torch.float32, True), product(gru64, torch.float64, False))
    row = _row(encoders, "gru", "backward")
    assert row["n_calls"] == 1 and math.isclose(row["local_rel_err"], expected, rel_tol=1e-6)


def test_no_layer_whose_other_output_the_loss_uses_is_said_to_be_unused(encoders):
    assert unused(encoders.modules) == []
    assert "No gradient reached the output of" not in _section(encoders)


@pytest.fixture(scope="module")
def potential(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("potential") / "sweep", "root_weight")


def test_a_weight_of_the_model_itself_used_by_a_method_has_a_model_row(potential):
    model, _ = _built(public_patterns.root_weight)
    with torch.autocast("cpu", dtype=torch.float16):
        low = torch.matmul(model.A.t(), model.A)
    expected = _rel([low], [model.A.double().t() @ model.A.double()])
    row = _row(potential, "(model)", "forward")
    # One `matmul(A.t(), A)` per evaluation of the field: euler evaluates it once per step.
    assert row["n_calls"] == row["n_calls_outside"] == N
    assert math.isclose(row["local_rel_err"], expected, rel_tol=1e-6)
    assert _row(potential, "(model)", "backward")["n_calls"] == N
    assert "`(model)` (4 of 4 calls)" in _section(potential)


def test_a_weight_used_where_no_hook_can_see_it_has_a_row_that_says_it_was_not_measured(tmp_path):
    result = _sweep(tmp_path / "sweep", "scripted_weight")
    row = _row(result, "layer", "forward")
    assert row["n_calls"] == 0 and row["measurement"] == UNSEEN_USE
    assert "the first, `layer` forward" in _section(result)
    # The layer's gradient is measured all the same: only where its roundoff arises is unknown.
    errors = result.param_errors
    assert errors.loc[errors["parameter"] == "layer.weight", "grad_rel_err"].notna().all()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("tiny") / "sweep", "tiny_loss")


def test_calls_on_gradients_below_the_normal_range_are_counted_as_such(tiny):
    model, x = _built(public_patterns.tiny_loss)
    reaching: dict[str, list[float]] = {"net.0": [], "net.2": []}

    def watch(name: str):
        def hook(module, args, out) -> None:
            out.register_hook(lambda g: reaching[name].append(float(g.abs().max())))

        return hook

    for name in reaching:
        model.get_submodule(name).register_forward_hook(watch(name))
    with torch.autocast("cpu", dtype=torch.float16):
        z = torchdiffeq.odeint(model, x, torch.linspace(0.0, 1.0, N + 1), method="euler")
        loss = 1e-6 * z[-1].pow(2).sum()
    loss.backward()
    for name, largest in reaching.items():
        below = sum(0 < value < FLOAT16_SMALLEST_NORMAL for value in largest)
        row = _row(tiny, name, "backward")
        assert below == len(largest) == row["n_calls"] == row["n_calls_below_normal"]
        assert pd.isna(row["local_rel_err_normal_range"]) and row["local_rel_err"] > 0
    assert (tiny.modules.loc[tiny.modules["phase"] == "forward", "n_calls_below_normal"] == 0).all()


def test_calls_on_subnormal_gradients_are_ranked_apart_with_the_runs_own_error_beside_them(tiny):
    run = tiny.results.iloc[0]
    rows = rows_of(tiny.modules, run)
    by_error = ranked(rows, float(run["unit_roundoff"]))
    assert by_error.loc[by_error["phase"] == "backward", "local_rel_err_normal_range"].isna().all()
    apart = below_normal(rows)
    assert set(apart["phase"]) == {"backward"} and len(apart) == (rows["phase"] == "backward").sum()
    assert list(apart["local_rel_err"]) == sorted(apart["local_rel_err"], reverse=True)
    section = _section(tiny)
    first = apart.iloc[0]
    unit = float(run["unit_roundoff"])
    assert "Ranked apart: calls whose every value" in section
    assert f"`{first['module']}` backward {first['local_rel_err'] / unit:.3g} u (4 of 4 calls)" in section
    assert f"The run's parameter-gradient roundoff is {run['grad_params_rel_err_over_u']:.3g} u." in section


def test_a_module_with_calls_on_both_sides_of_the_normal_range_is_ranked_by_those_within_it():
    rows = pd.DataFrame(
        {
            "module": ["mixed", "normal", "subnormal"],
            "phase": ["backward", "backward", "backward"],
            "n_calls": [8, 8, 8],
            "n_calls_unused": [None, None, None],
            "local_rel_err": [0.05, 0.002, 0.01],
            "local_rel_err_normal_range": [0.001, 0.002, None],
            "n_calls_below_normal": [3, 0, 8],
            "max_abs_over_dtype_max": [1e-9, 1e-6, 1e-10],
            "below_normal_share": [0.4, 0.0, 1.0],
        }
    )
    assert list(ranked(rows, 2.0**-11, limit=3)["module"][:2]) == ["normal", "mixed"]
    assert list(below_normal(rows)["module"]) == ["mixed", "subnormal"]
