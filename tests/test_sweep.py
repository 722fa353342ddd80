"""The core sweep end to end: grid, references, errors, failures as rows, output on disk."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from roundoff_analyzer.axes.grid import CONFIG_COLUMNS, DEFAULT_TRIPLES
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.columns import ERROR_METRICS
from roundoff_analyzer.measuring.failures import FAILURE_CLASSES
from roundoff_analyzer.planning import config
from roundoff_analyzer.planning.config import DEFAULT_TIMESTEPS

from .conftest import TINY_OTFLOW, WIDE_TABLES, results, run_cli

NUMERIC_CLASSES = {"overflow", "underflow", "scaler_exhausted"}
PUBLIC_COLUMNS = [
    *CONFIG_COLUMNS,
    "status",
    "failure_class",
    "failure_message",
    *ERROR_METRICS,
    *(f"{m}_over_u" for m in ERROR_METRICS),
    "overflow_step",
    "final_scale",
    "scale_retries",
    "deterministic",
    "n_repeats",
    "time_forward_s",
    "time_backward_s",
    "peak_memory_bytes",
]


def test_default_grid_is_default_triples_per_method_and_n_timesteps(tiny_sweep):
    table = results(tiny_sweep)
    assert len(table) == 2 * 2 * len(DEFAULT_TRIPLES) == 28
    assert set(map(tuple, table[["library", "dtype", "scaling"]].drop_duplicates().values)) == set(DEFAULT_TRIPLES)
    assert set(PUBLIC_COLUMNS) <= set(table.columns)
    failed = table[table.status == "failed"]
    assert set(failed.failure_class) <= NUMERIC_CLASSES, failed[["failure_class", "failure_message"]]
    ok = table[table.status == "ok"]
    assert len(ok) > 0 and ok[list(ERROR_METRICS)].notna().all().all()
    assert (ok.sol_rel_err_over_u == ok.sol_rel_err / ok.unit_roundoff).all()
    assert len(list((tiny_sweep / "shards").glob("*.parquet"))) == 28


def test_manifest_names_the_grid_model_data_device_and_versions(tiny_sweep):
    manifest = json.loads((tiny_sweep / "manifest.json").read_text())
    assert manifest["model"]["options"]["hidden"] == 8
    assert manifest["grid"]["timesteps"] == [4, 16]
    assert manifest["data_source"].startswith("synthetic")
    assert manifest["device"] == "cpu" and manifest["seed"] == 0
    assert {"torch", "torchdiffeq", "python"} <= set(manifest["versions"])
    assert manifest["duration_s"] > 0 and manifest["n_configurations"] == 28


def test_float32_errors_stay_below_1e5_for_both_libraries_and_methods(tmp_path):
    out = tmp_path / "f32"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,32",
        "--dtype",
        "float32",
        "--scaling",
        "none",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert len(table) == 2 * 2 * 2 and (table.status == "ok").all()
    assert table[list(ERROR_METRICS)].max().max() < 1e-5, table[list(ERROR_METRICS)]


def test_one_reference_per_library_method_and_n_timesteps(tmp_path):
    request = config.validate({"model": "otflow", "options": {"d": 3, "hidden": 8, "batch": 16}, "timesteps": [4, 8]})
    outcome = engine.run(engine.plan(request), tmp_path / "refs")
    distinct = outcome.results[["library", "method", "n_timesteps"]].drop_duplicates()
    assert outcome.reference_solves == len(distinct) == 2 * 2 * 2
    assert len(outcome.results) == 28


@pytest.mark.slow  # the default grid's n_timesteps: 15-30 s
def test_native_dynamic_scaling_keeps_gradient_error_flat_across_the_default_grid(tmp_path):
    smallest, largest = min(DEFAULT_TIMESTEPS), max(DEFAULT_TIMESTEPS)
    out = tmp_path / "flat"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        "--timesteps",
        f"{smallest},{largest}",
        "--library",
        "native",
        "--dtype",
        "float16,bfloat16",
        "--scaling",
        "dynamic",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert (table.status == "ok").all()
    # The paper's claim: the error stays at the order of the format's unit roundoff and does not grow with the number
    # of steps (it may fall: OT-Flow's float16 grad_y0 does, 1.1e-3 at 8 steps to 2.5e-4 at 128 on one AMD EPYC).
    for (method, dtype), group in table.groupby(["method", "dtype"]):
        by_n = group.set_index("n_timesteps")
        unit_roundoff = float(torch.finfo(getattr(torch, dtype)).eps) / 2
        for metric in ("grad_y0_rel_err", "grad_params_rel_err"):
            few, many = by_n.loc[smallest, metric], by_n.loc[largest, metric]
            assert many <= 4 * few and max(few, many) <= 10 * unit_roundoff, (method, dtype, metric, few, many)


def test_dynamic_with_torchdiffeq_is_skipped_with_its_reason(overflow_sweep):
    table = results(overflow_sweep)
    skipped = table[table.status == "skipped"]
    assert len(skipped) == 2 and set(skipped.library) == {"torchdiffeq"} and set(skipped.scaling) == {"dynamic"}
    assert skipped.skip_reason.str.contains("native solver").all()


def test_failures_become_rows_and_the_sweep_goes_on(overflow_sweep):
    table = results(overflow_sweep)
    overflowed = table[(table.failure_class == "overflow")]
    assert len(overflowed) >= 2 and set(overflowed.scaling) == {"none"}
    assert overflowed.failure_message.str.contains("non-finite").all()
    assert overflowed.failure_type.notna().all()
    # The solution is still measured when only the gradients overflowed.
    assert overflowed.sol_rel_err.notna().all() and overflowed.grad_params_rel_err.isna().all()
    rescued = table[(table.scaling != "none") & (table.status == "ok")]
    assert len(rescued) >= 4 and (rescued.final_scale < 2**16).all()
    assert set(table.failure_class.dropna()) <= set(FAILURE_CLASSES)


def test_repeats_record_determinism_and_spread(tmp_path):
    out = tmp_path / "repeats"
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "4",
        "--method",
        "rk4",
        "--dtype",
        "bfloat16",
        "--scaling",
        "none",
        "--repeats",
        "3",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert (table.n_repeats == 3).all() and table.deterministic.all()
    assert (table.grad_params_rel_err_spread == 0).all()


@pytest.mark.slow  # two sweeps and a resume: about 10 s
def test_sweep_resumes_only_what_is_missing(tmp_path):
    out = tmp_path / "resume"
    args = ["sweep", "--model", "linear", "--timesteps", "4,8", "--method", "euler", "--out", out]
    assert run_cli(*args).exit_code == 0
    first = results(out)
    shard = next((out / "shards").glob("*native-euler-n000008-float16-dynamic*"))
    shard.unlink()
    again = run_cli(*args)
    assert again.exit_code == 0 and "13 of 14 configurations are already on disk" in again.output
    pd.testing.assert_frame_equal(
        first.drop(columns=["time_forward_s", "time_backward_s"]),
        results(out).drop(columns=["time_forward_s", "time_backward_s"]),
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nosuch"], "unknown model 'nosuch'; built-in: "),
        (["--model", "linear", "--dtype", "float8"], "unknown dtype 'float8'; allowed: "),
        (["--model", "linear", "--timesteps", "0"], "'timesteps[0]' must be greater than 0 (got 0)"),
        (["--model", "linear", "-o", "width=3"], "option 'width'"),
        (["--model", "linear", "--device", "tpu"], "unknown device 'tpu'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = tmp_path / "never"
    result = run_cli("sweep", *args, "--out", out)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not out.exists()


def test_list_shows_every_axis_value_and_whether_it_runs_here():
    result = run_cli("list", columns=WIDE_TABLES)
    assert result.exit_code == 0
    for name in (
        "otflow",
        "linear",
        "torchdiffeq",
        "native",
        "euler",
        "rk4",
        "float16",
        "bfloat16",
        "float32",
        "none",
        "grad",
        "dynamic",
        "autocast",
        "pure",
    ):
        assert name in result.stdout
    assert "unit roundoff" in result.stdout


def test_wheel_installs_the_cli_under_a_specific_name(tmp_path):
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, root],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("roundoff_analyzer-*.whl"))
    top_level = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {"roundoff_analyzer", "roundoff_cli"} <= top_level
    assert "cli" not in top_level
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("entry_points.txt"))
    )
    assert b"roundoff = roundoff_cli.app:main" in entry_points


def test_every_subpackage_is_in_the_wheel():
    """A subpackage missing from pyproject's list is missing from every non-editable install."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "roundoff_analyzer").rglob("__init__.py")}
    assert found <= listed, found - listed
