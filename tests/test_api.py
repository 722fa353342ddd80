"""The Python API: a sweep run from Python gives the table the command line writes, a folder loads back,
and the report's figures come as matplotlib Figures; importing the package does not import torch."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.planning.manifest import problem_hash

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


def test_the_answers_code_for_a_built_in_model_runs_as_handed_from_the_problem_the_sweep_measured(tiny_sweep):
    # `func`, `loss_fn` and `batches` come from ra.model, built from the manifest: the very weights and batch the
    # sweep measured; the threads it measured with are set where the process's own count differed.
    result = ra.load(tiny_sweep)
    codes = {dtype: answer["code"] for dtype, answer in result.answers.items() if answer["code"]}
    assert codes, result.answers
    measured = ra.model("otflow", **result.manifest["model"]["options"])
    assert problem_hash(measured) == result.manifest["fingerprint"]["problem_sha256"]
    execution, threads = result.manifest["execution"], torch.get_num_threads()
    try:
        for code in codes.values():
            assert ("torch.set_num_threads(" in code) == (execution["threads"] != execution["threads_default"]), code
            handed: dict = {}
            exec(code, handed)  # noqa: S102 - the code the report hands a user, run as they would
            assert torch.get_num_threads() == execution["threads"]
            assert torch.equal(handed["problem"].y0, measured.y0) and torch.isfinite(handed["loss"])
            assert not _same_weights(handed["func"], measured.func)  # it trained
    finally:
        torch.set_num_threads(threads)


def test_a_torchdiffeq_answers_code_for_a_built_in_model_imports_the_odeint_it_calls(tmp_path):
    """The code builds its model itself, so nothing else in the user's script imports torchdiffeq for it."""
    result = ra.sweep(
        model="otflow",
        options={"d": 3, "hidden": 8, "batch": 16},
        timesteps=[4, 16],
        library="torchdiffeq",
        dtype="float16",
        scaling="none",
        out=tmp_path / "sweep",
    )
    code = result.answers["float16"]["code"]
    assert code and "from torchdiffeq import odeint\n" in code, result.answers
    handed: dict = {}
    threads = torch.get_num_threads()
    try:
        exec(code, handed)  # noqa: S102 - the code the report hands a user, run as they would
    finally:
        torch.set_num_threads(threads)
    assert torch.isfinite(handed["loss"])


def test_model_gives_a_trainings_batches_loads_a_checkpoint_and_refuses_bad_options_in_one_line(tmp_path):
    options = {"d": 3, "hidden": 8, "batch": 16}
    problem = ra.model("otflow", **options)
    batches = list(problem.batches(3))
    assert len(batches) == 3 and all(b.shape == problem.y0.shape for b in batches)
    assert not any(torch.equal(b, problem.y0) for b in batches)  # batch 0 is the sweep's fixed batch, not a training's
    torch.save(problem.func.state_dict(), tmp_path / "weights.pt")
    moved = ra.model("otflow", **{**options, "seed": 1})
    assert not _same_weights(moved.func, problem.func)
    loaded = ra.model("otflow", **{**options, "seed": 1}, checkpoint=tmp_path / "weights.pt")
    assert _same_weights(loaded.func, problem.func)
    with pytest.raises(InputError, match="model otflow: option 'hiden'"):
        ra.model("otflow", hiden=8)


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
