"""Real inputs: data sources, the CNF, checkpoints, users' own models, and every bad input as one line.

Each row of BAD_INPUTS is run through the real CLI: one `error:` line on stderr, a non-zero exit,
no traceback, and no output folder left behind (or, where --out is a file, the file unchanged).
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from roundoff_analyzer.axes.data import parse_data
from roundoff_analyzer.axes.data.bsds300 import SPLITS
from roundoff_analyzer.axes.models import load_checkpoint, parse_options, resolve_model
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.execution import engine
from roundoff_analyzer.planning import config

from .conftest import results, run_cli, snapshot

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "damped_oscillator.py"
ONE_CONFIGURATION = [
    "--timesteps",
    "2",
    "--method",
    "euler",
    "--library",
    "native",
    "--dtype",
    "float16",
    "--scaling",
    "none",
    "--no-report",
]


def write_bsds300(path: Path, rows: int = 24, columns: int = 63) -> Path:
    """An HDF5 file laid out like the MAF preprocessing's BSDS300.hdf5, with distinct rows per split."""
    with h5py.File(path, "w") as file:
        for offset, split in enumerate(SPLITS):
            file[split] = np.arange(rows * columns, dtype=np.float32).reshape(rows, columns) / 1000.0 + offset
    return path


def build(name: str, data: str | None = None, **options):
    model = resolve_model(name)
    return model.build(parse_options(model, options), torch.device("cpu"), parse_data(data) if data else None)


# --- data -------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_bsds300_rows_of_the_chosen_split_become_the_batch(tmp_path):
    path = write_bsds300(tmp_path / "BSDS300.hdf5")
    problem = build("otflow", f"bsds300:{path}?split=test", d=63, hidden=8, batch=5)
    with h5py.File(path) as file:
        expected = torch.from_numpy(file["test"][:5])
    assert torch.equal(problem.y0[:, :63], expected)
    assert (
        "bsds300" in problem.data_source and "'test'" in problem.data_source and "synthetic" not in problem.data_source
    )


def test_bsds300_sweep_records_its_data_source_in_the_manifest(tmp_path):
    path = write_bsds300(tmp_path / "BSDS300.hdf5")
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        "-o",
        "d=63",
        "-o",
        "hidden=8",
        "-o",
        "batch=8",
        "--data",
        f"bsds300:{path}?split=validation",
        *ONE_CONFIGURATION,
        "--dtype",
        "bfloat16",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"] == f"bsds300:{path}?split=validation"
    assert manifest["data_source"].startswith("bsds300: the first 8 rows of split 'validation'")
    assert (results(out).status == "ok").all()


def test_synthetic_data_is_said_to_be_synthetic(tmp_path):
    out = tmp_path / "sweep"
    result = run_cli("sweep", "--model", "linear", *ONE_CONFIGURATION, "--out", out)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["data_source"].startswith("synthetic:")


@pytest.mark.unit
@pytest.mark.parametrize("source", ["2spirals", "8gaussians"])
def test_toy_data_is_generated_from_the_seed(source):
    a, b, c = (build("cnf", source, batch=33, width=4, seed=seed).y0 for seed in (1, 1, 2))
    assert a.shape == (33, 3) and torch.equal(a, b) and not torch.equal(a, c)
    assert torch.isfinite(a).all() and a[:, 2].eq(0).all()  # log-density change starts at 0


@pytest.mark.unit
def test_data_options_are_checked():
    with pytest.raises(InputError, match="option 'split'.*options of bsds300: split"):
        parse_data(f"bsds300:{EXAMPLE}?split=training")
    with pytest.raises(InputError, match="takes no file path"):
        parse_data("2spirals:points.csv")


# --- the CNF ----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_cnf_trace_is_the_exact_trace_of_the_jacobian():
    func = build("cnf", width=16, batch=7).func.double()
    state = torch.randn(7, 3, dtype=torch.float64)
    t = torch.tensor(0.4, dtype=torch.float64)
    z = state[:, :2].clone().requires_grad_(True)
    derivative = func(t, torch.cat([z, state[:, 2:]], dim=1))
    trace = sum(torch.autograd.grad(derivative[:, k].sum(), z, retain_graph=True)[0][:, k] for k in range(2))
    assert torch.allclose(-derivative[:, 2], trace, atol=1e-14)


def test_cnf_sweep_runs_end_to_end(tmp_path):
    out = tmp_path / "cnf"
    result = run_cli(
        "sweep", "--model", "cnf", "-o", "batch=16", "-o", "width=16", "--timesteps", "4,8", "--no-report", "--out", out
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert len(table) == 2 * 2 * 7 and (table.status == "ok").all()
    assert table.grad_params_rel_err.notna().all()
    assert json.loads((out / "manifest.json").read_text())["data_source"].startswith("2spirals:")


@pytest.mark.unit
def test_cnf_config_file_holds_the_papers_grid():
    """configs/cnf_2spirals.toml: the grid of the roundoff study in "Mixed Precision Training of Neural ODEs"."""
    plan = engine.plan(config.resolve(REPO / "configs" / "cnf_2spirals.toml", {"options": {"batch": 4}}))
    assert plan.grid.timesteps == (64, 128, 256, 512, 1024, 2048, 4096) and plan.grid.methods == ("euler", "rk4")
    assert len(plan.grid.triples) == 7 and len(plan.configurations) == 98
    assert plan.problem.data_source.startswith("2spirals") and plan.options.width == 128 and plan.options.hidden == 32


# --- checkpoints ------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("nesting", [None, "state_dict", "model_state_dict", "func_state_dict"])
def test_checkpoint_weights_replace_the_initial_ones(tmp_path, nesting):
    trained = build("cnf", width=8, seed=7).func.state_dict()
    path = tmp_path / "cnf.pth"
    torch.save(trained if nesting is None else {nesting: trained, "epoch": 100}, path)
    func = build("cnf", width=8, seed=0).func
    recorded = load_checkpoint(func, path, "cnf")
    assert all(torch.equal(func.state_dict()[k], v) for k, v in trained.items())
    assert recorded["path"] == str(path.resolve()) and len(recorded["sha256"]) == 64


@pytest.mark.unit
def test_checkpoint_mismatch_names_the_parameters(tmp_path):
    path = tmp_path / "narrow.pth"
    torch.save(build("cnf", width=8).func.state_dict(), path)
    with pytest.raises(InputError, match=r"hyper_net\.fc3\.weight \(56, 32\) vs \(896, 32\)"):
        load_checkpoint(build("cnf").func, path, "cnf")


@pytest.mark.unit
def test_checkpoint_that_would_run_code_is_refused_without_running_it(tmp_path, capfd):
    class RunsCode:
        def __reduce__(self):
            return (print, ("code from the checkpoint ran",))

    path = tmp_path / "evil.pth"
    torch.save({"state_dict": RunsCode()}, path)
    with pytest.raises(InputError, match="not a weights file that loads without running code"):
        load_checkpoint(build("cnf", width=8).func, path, "cnf")
    assert "code from the checkpoint ran" not in capfd.readouterr().out


def test_checkpoint_reaches_the_manifest_and_changes_the_fingerprint(tmp_path):
    path = tmp_path / "cnf.pth"
    torch.save({"func_state_dict": build("cnf", width=8, seed=3).func.state_dict()}, path)
    args = ["sweep", "--model", "cnf", "-o", "width=8", "-o", "batch=8", *ONE_CONFIGURATION]
    out = tmp_path / "sweep"
    assert run_cli(*args, "--checkpoint", path, "--out", out).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint"]["path"] == str(path.resolve())
    # The same folder without the weights is another sweep.
    refused = run_cli(*args, "--out", out)
    assert refused.exit_code == 2 and "problem_sha256" in refused.stderr


# --- users' own models ------------------------------------------------------------------------------


def test_example_user_model_sweeps_end_to_end(tmp_path):
    out = tmp_path / "oscillator"
    result = run_cli(
        "sweep",
        "--model",
        f"{EXAMPLE}:damped_oscillator",
        "-o",
        "damping=0.3",
        "-o",
        "batch=8",
        "--timesteps",
        "4",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert len(table) == 2 * 7 and (table.status == "ok").all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["options"] == {"seed": 0, "frequency": 2.0, "damping": 0.3, "hidden": 16, "batch": 8}


@pytest.mark.unit
def test_user_model_by_module_name_gets_typed_options_and_a_seeded_init(monkeypatch):
    monkeypatch.chdir(REPO)  # `examples.damped_oscillator` is found from the current folder, as with python -m
    a = build("examples.damped_oscillator:damped_oscillator", frequency="3", seed="4")
    b = build("examples.damped_oscillator:damped_oscillator", frequency=3.0, seed=4)
    assert a.y0.shape == (32, 2) and a.func.frequency == 3.0
    assert all(torch.equal(p, q) for p, q in zip(a.func.parameters(), b.func.parameters()))
    with pytest.raises(InputError, match="option 'dampnig'.*options are: seed, frequency, damping, hidden, batch"):
        build("examples.damped_oscillator:damped_oscillator", dampnig="1")


@pytest.mark.unit
def test_user_model_breaking_the_contract_is_one_line(tmp_path):
    factory = tmp_path / "broken.py"
    factory.write_text(
        "import torch\n"
        "def two_things():\n    return torch.nn.Linear(2, 2), torch.zeros(3, 2)\n"
        "def no_time():\n    return torch.nn.Linear(2, 2), torch.zeros(3, 2), lambda traj: traj.sum()\n"
        "class Widen(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(2, 3)\n"
        "    def forward(self, t, y):\n        return self.linear(y)\n"
        "def wrong_shape():\n    return Widen(), torch.zeros(3, 2), lambda traj: traj.sum()\n"
    )
    expected = (
        r"returned tuple; expected a roundoff_analyzer.Problem\(model=..., step=..., sample_batch=...\), or \(func,"
    )
    with pytest.raises(InputError, match=expected):
        build(f"{factory}:two_things")
    with pytest.raises(InputError, match=r"evaluating f\(0, y0\) and the loss raised TypeError"):
        build(f"{factory}:no_time")  # an nn.Linear takes no t
    with pytest.raises(InputError, match=r"f\(t, y0\) returned shape \(3, 3\); expected y0's \(3, 2\)"):
        build(f"{factory}:wrong_shape")


def test_a_model_file_imports_the_module_beside_it_from_any_folder(tmp_path, monkeypatch):
    # `--model models/measure.py:factory` from the folder above: the file is run as Python runs a script, its own
    # folder searched first, so `from <neighbour> import Field` finds the file beside it. Afterwards the path is as it
    # was, and the user's folder holds what they wrote: no __pycache__ of either file.
    models = tmp_path / "models"
    models.mkdir()
    neighbour = "field_beside_measure"  # a name no other test imports: sys.modules keeps what a test imported
    (models / f"{neighbour}.py").write_text(
        "import torch\n"
        "class Field(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(2, 2)\n"
        "    def forward(self, t, y):\n        return torch.tanh(self.linear(y))\n"
    )
    (models / "measure.py").write_text(
        f"import torch\nfrom {neighbour} import Field\n"
        "def factory(batch: int = 4):\n"
        "    return Field(), torch.ones(batch, 2), lambda trajectory: trajectory[-1].sum()\n"
    )
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    try:
        swept = run_cli("sweep", "--model", "models/measure.py:factory", *ONE_CONFIGURATION, "--out", "out")
    finally:
        sys.modules.pop(neighbour, None)
    assert swept.exit_code == 0, swept.output
    assert set(results(tmp_path / "out")["status"]) == {"ok"}
    assert sys.path == path_before
    assert sorted(p.name for p in models.iterdir()) == [f"{neighbour}.py", "measure.py"]


# --- bad inputs: one line each, nothing left behind -------------------------------------------------


def _files(tmp_path: Path) -> dict[str, Path]:
    """The files the bad inputs point at, made once per test in its own folder."""
    malformed = tmp_path / "malformed.toml"
    malformed.write_text('model = "linear"\ntimesteps = [4, 8\n')
    unknown_key = tmp_path / "unknown_key.toml"
    unknown_key.write_text('model = "linear"\ntimestep = [4, 8]\n')
    zero_in_file = tmp_path / "zero.toml"
    zero_in_file.write_text('model = "linear"\ntimesteps = [0, 8]\n')
    other_model = tmp_path / "otflow.pth"
    otflow = resolve_model("otflow")
    torch.save(
        {"state_dict": otflow.build(parse_options(otflow, {}), torch.device("cpu")).func.state_dict()}, other_model
    )
    unreadable = tmp_path / "unreadable.pth"
    unreadable.write_bytes(b"\x00 these are not weights " * 8)
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder\n")
    slurm_typo = tmp_path / "slurm_typo.toml"
    slurm_typo.write_text('model = "linear"\n[slurm]\npartiton = "gpu"\n')
    a_folder = tmp_path / "a_folder"
    a_folder.mkdir()
    plain_pickle = tmp_path / "plain.pkl"
    plain_pickle.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}, protocol=4))
    # A command that must never run: the marker it would create is inside tmp_path, which the test snapshots.
    runs_a_command = tmp_path / "runs_a_command.toml"
    runs_a_command.write_text(f'model = "os:system"\n[options]\ncommand = "touch {tmp_path / "MARKER"}"\n')
    factories = tmp_path / "factories.py"
    factories.write_text(
        "import torch\nfrom os import system\nfrom shutil import rmtree\n"
        "class Decay(torch.nn.Module):\n    def forward(self, t, y):\n        return -y\n"
        "def loss_per_sample(batch: int = 16):\n"
        "    return Decay(), torch.ones(batch, 2), lambda trajectory: trajectory[-1].sum(dim=1)\n"
    )
    return {
        "malformed": malformed,
        "unknown_key": unknown_key,
        "zero_in_file": zero_in_file,
        "wrong_shape": write_bsds300(tmp_path / "wrong_shape.hdf5", columns=10),
        "other_model": other_model,
        "unreadable": unreadable,
        "a_file": a_file,
        "not_hdf5": unknown_key,
        "slurm_typo": slurm_typo,
        "a_folder": a_folder,
        "plain_pickle": plain_pickle,
        "runs_a_command": runs_a_command,
        "factories": factories,
        "marker": tmp_path / "MARKER",
    }


# (what is wrong, the arguments after `roundoff sweep`, a phrase the one line must hold). `{name}` is a
# file from _files; `--out` is added by the test unless the row gives its own.
BAD_INPUTS = [
    ("unknown model", ["--model", "otflwo"], "unknown model 'otflwo'"),
    ("unknown dtype", ["--model", "linear", "--dtype", "float8"], "unknown dtype 'float8'"),
    ("malformed TOML", ["--config", "{malformed}"], "is not valid TOML"),
    ("unknown TOML key", ["--config", "{unknown_key}"], "'timestep' unknown key"),
    ("zero n_timesteps", ["--model", "linear", "--timesteps", "0,8"], "'timesteps[0]' must be greater than 0 (got 0)"),
    ("negative n_timesteps", ["--model", "linear", "--timesteps=-4"], "'timesteps[0]' must be greater than 0 (got -4)"),
    (
        "zero n_timesteps in TOML",
        ["--config", "{zero_in_file}"],
        "zero.toml': 'timesteps[0]' must be greater than 0 (got 0)",
    ),
    (
        "missing data file",
        ["--model", "otflow", "-o", "d=63", "--data", "bsds300:/no/such/BSDS300.hdf5"],
        "does not exist",
    ),
    (
        "HDF5 of the wrong shape",
        ["--model", "otflow", "-o", "d=63", "--data", "bsds300:{wrong_shape}"],
        "expected datasets train, validation, test",
    ),
    (
        "not an HDF5 file",
        ["--model", "otflow", "-o", "d=63", "--data", "bsds300:{not_hdf5}"],
        "cannot be read as an HDF5 file",
    ),
    ("data of other columns than the model", ["--model", "otflow", "--data", "2spirals"], "set -o d=2"),
    ("unknown data source", ["--model", "cnf", "--data", "3spirals"], "unknown data source '3spirals'"),
    (
        "checkpoint of another model",
        ["--model", "cnf", "--checkpoint", "{other_model}"],
        "missing: hyper_net.fc1.weight",
    ),
    ("unreadable checkpoint", ["--model", "cnf", "--checkpoint", "{unreadable}"], "not a weights file"),
    ("missing checkpoint", ["--model", "cnf", "--checkpoint", "/no/such/weights.pth"], "does not exist"),
    ("output folder that is a file", ["--model", "linear", "--timesteps", "2", "--out", "{a_file}"], "is a file"),
    ("factory that does not exist", ["--model", f"{EXAMPLE}:make_oscillator"], "has no factory 'make_oscillator'"),
    (
        "factory module that does not exist",
        ["--model", "no_such_package.models:make"],
        "cannot import no_such_package.models",
    ),
    (
        "factory option that does not exist",
        ["--model", f"{EXAMPLE}:damped_oscillator", "-o", "mass=2"],
        "option 'mass'",
    ),
    (
        "--data for a user model",
        ["--model", f"{EXAMPLE}:damped_oscillator", "--data", "2spirals"],
        "builds its own data",
    ),
    ("unknown executor", ["--model", "linear", "--executor", "dask"], "unknown executor 'dask'"),
    ("no workers", ["--model", "linear", "--workers", "0"], "'workers' must be greater than 0 (got 0)"),
    (
        "negative noise batches",
        ["--model", "linear", "--noise-batches=-1"],
        "'noise_batches' must be at least 0 (got -1)",
    ),
    (
        "--workers for the local executor",
        ["--model", "linear", "--executor", "local", "--workers", "2"],
        "use --executor processes",
    ),
    (
        "--workers for Slurm",
        ["--model", "linear", "--executor", "slurm", "--workers", "2"],
        "--workers is for --executor processes",
    ),
    (
        "malformed Slurm time limit",
        ["--model", "linear", "--executor", "slurm", "--slurm-time", "2h"],
        "is not a Slurm time limit",
    ),
    (
        "sbatch option the executor sets",
        ["--model", "linear", "--slurm-option", "array=0-3"],
        "'array' is set by the executor",
    ),
    ("no threads", ["--model", "linear", "--threads", "0"], "'threads' must be greater than 0 (got 0)"),
    (
        "model option of the wrong type",
        ["--model", "otflow", "-o", "hidden=abc"],
        "option 'hidden' must be a whole number (got 'abc')",
    ),
    (
        "backoff factor out of range",
        ["--model", "linear", "--backoff-factor", "2"],
        "'scaler.backoff_factor' must be less than 1",
    ),
    (
        "unknown [slurm] key in TOML",
        ["--config", "{slurm_typo}"],
        "'slurm.partiton' unknown key; allowed: partition, time",
    ),
    (
        "unknown arithmetic",
        ["--model", "linear", "--arithmetic", "simulated"],
        "unknown arithmetic 'simulated'; allowed: emulated, hardware",
    ),
    (
        "custom format wider than float32",
        ["--model", "linear", "--dtype", "e9m3"],
        "unknown dtype 'e9m3'; allowed: bfloat16",
    ),
    (
        "stochastic rounding on hardware",
        ["--model", "linear", "--arithmetic", "hardware", "--rounding", "stochastic"],
        "'rounding' other than nearest needs --arithmetic emulated",
    ),
    ("unknown rounding", ["--model", "linear", "--rounding", "up"], "unknown rounding 'up'"),
    # Sizes that can never fit, numbers out of range, folders for files, factories that are not factories
    (
        "hidden width that can never fit in memory",
        ["--model", "otflow", "-o", "hidden=10000000"],
        "which need at least",
    ),
    ("batch that can never fit in memory", ["--model", "otflow", "-o", "batch=1000000000"], "which need at least"),
    ("seed out of torch's range", ["--model", "otflow", "-o", "seed=-99999999999999999999999"], "option 'seed'"),
    (
        "n_timesteps beyond 64 bits",
        ["--model", "linear", "--timesteps", "100000000000000000000"],
        "'timesteps[0]' must be at most 9223372036854775807",
    ),
    ("time limit below a millisecond", ["--model", "linear", "--timeout", "1e-9"], "'timeout' must be at least 0.001"),
    ("--config that is a folder", ["--config", "{a_folder}"], "is a folder"),
    ("--checkpoint that is a folder", ["--model", "cnf", "--checkpoint", "{a_folder}"], "is a folder"),
    (
        "plain-pickle checkpoint (no torch warnings either)",
        ["--model", "cnf", "--checkpoint", "{plain_pickle}"],
        "not a weights file",
    ),
    (
        "--out under a file",
        ["--model", "linear", "--timesteps", "2", "--out", "{a_file}/results"],
        "a part of the path is a file",
    ),
    (
        "standard-library function as a factory",
        ["--model", "os:system", "-o", "command=touch {marker}"],
        "part of Python's standard library",
    ),
    ("config file naming os:system", ["--config", "{runs_a_command}"], "part of Python's standard library"),
    (
        "built-in re-exported by the user's module",
        ["--model", "{factories}:system", "-o", "command=touch {marker}"],
        "a factory is a Python function",
    ),
    (
        "function imported from another module",
        ["--model", "{factories}:rmtree", "-o", "path={a_folder}"],
        "is defined in shutil",
    ),
    ("loss that is not a scalar", ["--model", "{factories}:loss_per_sample"], "got a tensor of shape (16,)"),
]


@pytest.mark.unit
@pytest.mark.parametrize("args, phrase", [(a, p) for _, a, p in BAD_INPUTS], ids=[what for what, _, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, args, phrase):
    files = _files(tmp_path)
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    out = tmp_path / "out"
    if "--out" not in args:
        args += ["--out", str(out)]
    before = files["a_file"].read_bytes()
    everything_before = snapshot(tmp_path)
    result = run_cli("sweep", *args)

    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert phrase in lines[0], lines[0]
    assert not result.stdout.strip(), "nothing is printed before the error"
    assert "Traceback" not in result.output
    assert not out.exists()
    assert files["a_file"].read_bytes() == before
    assert snapshot(tmp_path) == everything_before  # nothing written, deleted or run anywhere
