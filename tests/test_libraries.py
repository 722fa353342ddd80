"""Every installed solver library and method on real small sweeps: float32 against float64, adaptive steps, the step
budget, autocast's weight cache, and rampde's refusal of CPU autocast."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from roundoff_analyzer.axes.libraries import LIBRARIES, MISSING_LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.measuring.columns import ERROR_METRICS

from .conftest import TINY_OTFLOW, WIDE_TABLES, results, run_cli

INSTALLED = ",".join(name for name in LIBRARIES.names() if ":" not in name)
FIXED = ",".join(m.name for m in METHODS if not m.adaptive)
ADAPTIVE = ",".join(m.name for m in METHODS if m.adaptive)


def sweep(out, *args) -> pd.DataFrame:
    result = run_cli("sweep", *args, "--scaling", "none", "--no-report", "--out", out)
    assert result.exit_code == 0, result.output
    return results(out)


def _assert_float32_close(table: pd.DataFrame) -> None:
    ran = table[table.status != "skipped"]
    assert (ran.status == "ok").all(), ran[ran.status != "ok"][["library", "method", "failure_message"]]
    for name in ERROR_METRICS:
        worst = ran.loc[ran[name].idxmax()]
        assert worst[name] < 1e-5, f"{worst.library} {worst.method} n={worst.n_timesteps}: {name} {worst[name]:.3g}"
    # Only methods a library does not have are skipped, each with its reason.
    assert table[table.status == "skipped"].skip_reason.str.contains("method|adaptive|fixed-grid").all()


# seven fixed-grid methods (the two rk4 rules, midpoint, heun2, heun3 among them) × every library: ~45 s at load 12
@pytest.mark.slow
def test_float32_every_installed_library_and_fixed_grid_method_is_within_1e5_of_float64(tmp_path):
    table = sweep(
        tmp_path / "s",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--library",
        INSTALLED,
        "--method",
        FIXED,
        "--dtype",
        "float32",
    )
    assert set(table.library) == set(INSTALLED.split(","))
    _assert_float32_close(table)


def test_float32_every_installed_library_and_adaptive_method_is_within_1e5_of_float64(tmp_path):
    # Tolerances tight enough that a different step sequence would show above 1e-5, loose enough for float32's
    # own error estimate; float32 then takes the float64 reference's steps.
    table = sweep(
        tmp_path / "s",
        "--model",
        "linear",
        "--timesteps",
        "4,16",
        "--library",
        INSTALLED,
        "--method",
        ADAPTIVE,
        "--dtype",
        "float32",
        "--rtol",
        "1e-5",
        "--atol",
        "1e-8",
    )
    _assert_float32_close(table)
    ran = table[table.status == "ok"]
    assert len(ran) >= 2
    assert (ran.accepted_steps == ran.reference_accepted_steps).all() and (ran.nfe == ran.reference_nfe).all()
    assert (ran.rtol == 1e-5).all() and (ran.atol == 1e-8).all() and (ran.max_steps == 1000).all()


@pytest.fixture(scope="module")
def dopri5_sweep(tmp_path_factory):
    libraries = ",".join(name for name in ("torchdiffeq", "torchode") if name in LIBRARIES)
    return sweep(
        tmp_path_factory.mktemp("dopri5") / "s",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--library",
        libraries,
        "--method",
        "dopri5",
        "--dtype",
        "float16,float32",
    )


def test_dopri5_rows_record_function_evaluations_and_float16_changes_the_steps(dopri5_sweep):
    table = dopri5_sweep
    assert (table.status == "ok").all()
    assert (
        table[["nfe", "reference_nfe", "accepted_steps", "rejected_steps", "reference_accepted_steps"]]
        .notna()
        .all()
        .all()
    )
    # Each dopri5 step costs six evaluations (the seventh is the next step's first): the counts are the solver's.
    for _, row in table.iterrows():
        assert row.nfe >= 6 * (row.accepted_steps + row.rejected_steps)
    half = table[table.dtype == "float16"]
    steps, reference_steps = (
        half.accepted_steps + half.rejected_steps,
        half.reference_accepted_steps + half.reference_rejected_steps,
    )
    assert (steps != reference_steps).any(), half[["library", "accepted_steps", "reference_accepted_steps"]]
    assert (half.nfe != half.reference_nfe).any()


def test_a_run_past_its_step_budget_is_its_own_failure_class(dopri5_sweep, tmp_path):
    half = dopri5_sweep[dopri5_sweep.dtype == "float16"].iloc[0]
    steps, reference_steps = (
        half.accepted_steps + half.rejected_steps,
        half.reference_accepted_steps + half.reference_rejected_steps,
    )
    assert steps > reference_steps  # float16 needed more steps here; a budget between the two stops it alone
    budget = int(reference_steps + steps) // 2
    table = sweep(
        tmp_path / "s",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--library",
        half.library,
        "--method",
        "dopri5",
        "--dtype",
        "float16,float32",
        "--max-steps",
        str(budget),
    )
    row = table.set_index("dtype").loc["float16"]
    assert row.failure_class == "step_budget_exhausted", row.failure_message
    assert f"--max-steps {budget}" in row.failure_message
    assert table.set_index("dtype").loc["float32"].status == "ok"
    # A budget the float64 reference cannot meet leaves its configurations without anything to compare with: skipped
    # with the reference's failure, never judged as a failure of the low dtype.
    table = sweep(
        tmp_path / "t",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--library",
        half.library,
        "--method",
        "dopri5",
        "--dtype",
        "float32",
        "--max-steps",
        "2",
    )
    assert table.status.tolist() == ["skipped"]
    assert table.skip_reason.iloc[0].startswith("the float64 reference failed (step_budget_exhausted:")


def test_autocast_without_its_weight_cache_keeps_torchdiffeqs_parameter_gradient_error_flat(tmp_path):
    table = sweep(
        tmp_path / "s",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,64",
        "--library",
        "torchdiffeq",
        "--method",
        "rk4",
        "--dtype",
        "float16",
        "--mode",
        "autocast,autocast-nocache",
    )
    assert (table.status == "ok").all()
    growth = {
        mode: rows.sort_values("n_timesteps").grad_params_rel_err.pipe(lambda e: e.iloc[-1] / e.iloc[0])
        for mode, rows in table.groupby("mode")
    }
    assert growth["autocast-nocache"] <= 4, growth
    assert growth["autocast-nocache"] < growth["autocast"], growth


def test_list_names_each_missing_library_with_its_install_line():
    if not len(MISSING_LIBRARIES.names()):
        pytest.skip("every optional library is installed here")
    result = run_cli("list", columns=WIDE_TABLES)
    assert result.exit_code == 0
    # Compare without the table's borders and whitespace. Rich must not eat `[torchode]` as markup.
    text = "".join(result.output.replace("│", "").split())
    for missing in MISSING_LIBRARIES:
        assert "".join(missing.reason.split()) in text, missing
        assert missing.install is None or "".join(missing.install.split()) in text, missing


@pytest.mark.skipif(
    importlib.util.find_spec("rampde") is None,
    reason='rampde, the library of "Mixed Precision Training of Neural ODEs", is not installed (not on PyPI: pip '
    "install a wheel of its public release)",
)
def test_rampde_refuses_cpu_autocast_with_the_reason_and_runs_float32(tmp_path):
    table = sweep(
        tmp_path / "s",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--library",
        "rampde",
        "--method",
        "euler,rk4",
        "--dtype",
        "float16,bfloat16,float32",
        "--device",
        "cpu",
    )
    low = table[table.dtype != "float32"]
    assert (low.failure_class == "unsupported").all()
    assert low.failure_message.str.contains("rampde switches to mixed precision only under CUDA autocast").all()
    assert (table[table.dtype == "float32"].status == "ok").all()
    assert (table[table.dtype == "float32"].grad_params_rel_err < 1e-5).all()


@pytest.mark.slow  # a sweep with memory measured: 13 s
def test_native_low_returns_the_native_states_rounded_and_a_sweep_measures_what_that_costs(tmp_path):
    import torch

    from roundoff_analyzer.axes.models import MODELS, parse_options

    model = MODELS.get("otflow")
    problem = model.build(parse_options(model, {"d": "3", "hidden": "8", "batch": "16"}), torch.device("cpu"))
    t = torch.linspace(0, 1, 9)
    with torch.autocast("cpu", dtype=torch.float16):
        state = LIBRARIES.get("native").solve(problem.func, problem.y0, t, METHODS.get("rk4"), None, None)
        low = LIBRARIES.get("native-low").solve(problem.func, problem.y0, t, METHODS.get("rk4"), None, None)
    assert state.dtype == torch.float32 and low.dtype == torch.float16
    assert torch.equal(low, state.to(torch.float16))

    table = sweep(
        tmp_path / "s",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--library",
        "native,native-low",
        "--method",
        "rk4",
        "--dtype",
        "float16,float32",
    )
    assert (table.status == "ok").all()
    errors = table.set_index(["library", "dtype", "n_timesteps"])
    # In float32 there is nothing to round: the two are the same solver.
    for n in (4, 16):
        assert (
            errors.loc[("native-low", "float32", n), "sol_rel_err"]
            == errors.loc[("native", "float32", n), "sol_rel_err"]
        )
    # In float16 the returned states carry float16's rounding, which the float32 trajectory does not.
    for n in (4, 16):
        assert (
            errors.loc[("native-low", "float16", n), "sol_rel_err"]
            > errors.loc[("native", "float16", n), "sol_rel_err"]
        )


def test_each_row_records_its_tableau_and_the_report_says_where_libraries_ran_different_ones(tmp_path):
    out = tmp_path / "s"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--library",
        "native,torchdiffeq",
        "--method",
        "rk4,rk4_38,rk4_classical",
        "--dtype",
        "float32",
        "--scaling",
        "none",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out).set_index(["library", "method"])
    assert table.loc[("native", "rk4"), "tableau"] == "rk4_classical"
    assert table.loc[("torchdiffeq", "rk4"), "tableau"] == "rk4_38"
    assert table.loc[("native", "rk4_38"), "tableau"] == table.loc[("torchdiffeq", "rk4_38"), "tableau"] == "rk4_38"
    assert table.loc[("torchdiffeq", "rk4_classical"), "status"] == "skipped"
    assert "3/8 rule" in table.loc[("torchdiffeq", "rk4_classical"), "skip_reason"]
    report = " ".join((out / "report.md").read_text().split())
    assert (
        "At method `rk4` the libraries ran different tableaux: native ran `rk4_classical`; torchdiffeq ran `rk4_38`."
        in report
    )
    assert "At method `rk4_38`" not in report  # one rule for both there
