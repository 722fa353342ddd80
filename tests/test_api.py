"""The Python API: a sweep run from Python gives the table the command line writes, a folder loads back,
and the report's figures come as matplotlib Figures; importing the package does not import torch."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from matplotlib.figure import Figure

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError

from .conftest import TINY_OTFLOW, run_cli

GRID = {
    "timesteps": [2, 4],
    "method": "euler",
    "library": ["native", "torchdiffeq"],
    "dtype": "float16",
    "scaling": ["none", "grad"],
}
COST = ["time_forward_s", "time_backward_s", "peak_memory_bytes"]


def test_a_sweep_from_python_gives_the_command_lines_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # room for the bar's counts, whatever the terminal running the tests
    result = ra.sweep(
        model="otflow",
        options={"d": 3, "hidden": 8, "batch": 16},
        device="cpu",
        out=tmp_path / "api",
        report=False,
        **GRID,
    )
    shown = capsys.readouterr().out
    assert "sweep" in shown and "8/8" in shown  # the progress bar, as the command line draws it
    cli = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--device",
        "cpu",
        "--timesteps",
        "2,4",
        "--method",
        "euler",
        "--library",
        "native,torchdiffeq",
        "--dtype",
        "float16",
        "--scaling",
        "none,grad",
        "--no-report",
        "--out",
        tmp_path / "cli",
    )
    assert cli.exit_code == 0, cli.output
    from_cli = pd.read_parquet(tmp_path / "cli" / "results.parquet")
    assert len(result.results) == 8 and (result.results["status"] == "ok").all()
    pd.testing.assert_frame_equal(result.results.drop(columns=COST), from_cli.drop(columns=COST), check_exact=True)
    assert result.folder == tmp_path / "api" and result.run.reference_solves == 4
    assert set(result.param_errors["parameter"]) >= {"y0"} and (result.profile["phase"] == "backward").any()
    assert result.manifest["grid"]["timesteps"] == [2, 4]

    loaded = ra.load(tmp_path / "api")
    pd.testing.assert_frame_equal(loaded.results, result.results)
    figures = loaded.figures()
    assert {"error_solution", "error_grad_y0", "error_grad_params"} <= set(figures)
    assert any(name.startswith("adjoint_range") for name in figures)
    assert all(isinstance(figure, Figure) and figure.axes for figure in figures.values())
    report = loaded.write_report()
    assert report == tmp_path / "api" / "report.md" and (tmp_path / "api" / "figures" / "error_solution.png").is_file()


def test_bad_input_raises_one_line_before_anything_is_written(tmp_path):
    with pytest.raises(InputError, match="unknown dtype 'float8'; allowed: ") as raised:
        ra.sweep(model="otflow", dtype="float8", out=tmp_path / "never")
    assert str(raised.value).startswith("'dtype' "), "from Python there is no command line to name"
    with pytest.raises(InputError, match="'threads'"):
        ra.sweep(model="otflow", threads=0, out=tmp_path / "never")
    with pytest.raises(InputError, match="is not a folder"):
        ra.load(tmp_path / "missing")
    assert not (tmp_path / "never").exists()


def test_importing_the_package_loads_neither_torch_nor_pandas():
    code = "import sys, roundoff_analyzer as ra; print(ra.__version__, 'torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [ra.__version__, "False", "False"]
    assert callable(ra.sweep)
