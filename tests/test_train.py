"""`roundoff train`: checkpoints a sweep can load, a resumed run equal bit for bit to an uninterrupted one, the log,
the summary read back against the log, and bad input refused before anything is written."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from rich.console import Console

from roundoff_analyzer import training
from roundoff_analyzer.axes.models import MODELS, load_checkpoint, parse_options
from roundoff_analyzer.commands.train_progress import TrainRichProgress
from roundoff_analyzer.training.config import resolve
from roundoff_analyzer.training.files import load_resume
from roundoff_analyzer.training.setups import choose_setups
from roundoff_analyzer.training.step import GROWTH_INTERVAL, LossScale
from roundoff_analyzer.training.timing import TIMING_ROUNDS

from .conftest import run_cli, snapshot
from .test_inputs import write_bsds300

REPOSITORY = Path(__file__).resolve().parents[1]
TINY_CNF = {"hidden": 4, "width": 8, "batch": 16}
TINY_CNF_ARGS = ["-m", "cnf", "-o", "hidden=4", "-o", "width=8", "-o", "batch=16", "-n", "4"]
TWO_SETUPS = {"dtype": ["float32", "float16"], "scaling": "dynamic"}  # float32 trains unscaled, float16 native dynamic


def _train(out: Path, **settings):
    values = {"options": TINY_CNF, "timesteps": 4, "iters": 8, "save_at": [0, 4], "resume_every": 3, **settings}
    return training.train("cnf", out=out, **values)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> training.TrainResult:
    return _train(tmp_path_factory.mktemp("train") / "cnf", **TWO_SETUPS)


def _last_weights(folder: Path, iteration: int) -> dict[str, torch.Tensor]:
    return torch.load(folder / "checkpoints" / f"iter_{iteration:07d}.pt", weights_only=True)


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == torch.float32 and torch.equal(a[name], b[name]), name


def test_setups_write_the_contracted_layout(trained):
    manifest = json.loads((trained.folder / "train_manifest.json").read_text())
    assert manifest["kind"] == "roundoff-train" and manifest["model"] == "cnf" and manifest["seed"] == 0
    assert manifest["options"] == {"seed": "0", "hidden": "4", "width": "8", "batch": "16"}
    assert manifest["iters"] == 8 and manifest["save_at"] == [0, 4, 8] and manifest["data"] is None
    labels = [s["label"] for s in manifest["setups"]]
    assert labels == ["float32-native-none", "float16-native-dynamic"]
    assert [s["folder"] for s in manifest["setups"]] == [".", "setups/float16-native-dynamic"]
    for setup in manifest["setups"]:
        folder = trained.folder / setup["folder"]
        assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == [
            f"iter_{k:07d}.{ext}" for k in (0, 4, 8) for ext in ("json", "pt")
        ]
        assert {"library", "method", "n_timesteps", "dtype", "scaling", "mode"} <= setup.keys()


def test_checkpoints_load_as_a_sweep_loads_them(trained):
    model = MODELS.get("cnf")
    problem = model.build(parse_options(model, TINY_CNF), torch.device("cpu"))
    for folder in (trained.folder, trained.folder / "setups" / "float16-native-dynamic"):
        path = folder / "checkpoints" / "iter_0000008.pt"
        loaded = load_checkpoint(problem.func, path, "cnf")
        assert loaded["path"] == str(path.resolve())
        _assert_same_weights(problem.func.state_dict(), _last_weights(folder, 8))
        metadata = json.loads(path.with_suffix(".json").read_text())
        assert (
            metadata["iteration"] == 8
            and metadata["model"] == "cnf"
            and metadata["seed"] == 0
            and metadata["data"] is None
        )
        assert metadata["options"] == {"seed": "0", "hidden": "4", "width": "8", "batch": "16"}  # as -o gives them
        assert (
            metadata["setup"] == folder.name if folder != trained.folder else metadata["setup"] == "float32-native-none"
        )
        log = trained.log[(trained.log["setup"] == metadata["setup"]) & (trained.log["iteration"] == 8)].iloc[0]
        assert metadata["loss"] == metadata["val_loss"] == log["val_loss"] and metadata["train_loss"] == log["loss"]
    start = _last_weights(trained.folder, 0)
    assert any(not torch.equal(start[k], v) for k, v in _last_weights(trained.folder, 8).items())  # it trained


def test_both_setups_start_from_the_same_weights(trained):
    _assert_same_weights(
        _last_weights(trained.folder, 0), _last_weights(trained.folder / "setups" / "float16-native-dynamic", 0)
    )


def test_log_has_every_iteration_of_every_setup(trained):
    log = pd.read_parquet(trained.folder / "training_log.parquet")
    assert list(log.columns) == [
        "setup",
        "iteration",
        "loss",
        "val_loss",
        "skipped",
        "failure",
        "scale",
        "iter_time_s",
        "time_s",
        "weights",
        "update",
        "lost_update_fraction",
        "grad_norm",
        "clipped",
    ]
    for label in ("float32-native-none", "float16-native-dynamic"):
        own = log[log["setup"] == label]
        assert list(own["iteration"]) == list(range(9))
        assert list(own.loc[own["val_loss"].notna(), "iteration"]) == [0, 4, 8]
        steps = own[own["iteration"] > 0]
        assert steps["loss"].notna().all() and (steps["iter_time_s"] > 0).all() and not steps["skipped"].any()
        assert steps["time_s"].is_monotonic_increasing
    float16 = log[(log["setup"] == "float16-native-dynamic") & (log["iteration"] > 0)]
    assert (float16["scale"] > 1).all()  # the dynamic adjoint scale that counted


def test_summary_numbers_are_those_of_the_log(trained):
    summary = pd.read_parquet(trained.folder / "training_summary.parquet")
    log = trained.log
    assert list(summary["setup"]) == ["float32-native-none", "float16-native-dynamic"]
    for row in summary.itertuples(index=False):
        own = log[log["setup"] == row.setup].set_index("iteration")
        assert (
            row.iterations == 8
            and row.final_loss == own.loc[8, "loss"]
            and row.final_val_loss == own.loc[8, "val_loss"]
        )
        assert row.time_per_iter_s == pytest.approx(own.loc[1:, "iter_time_s"].mean(), rel=1e-12)
        assert row.skipped_steps == 0 and row.peak_memory_bytes > 0
    reference = summary.iloc[0]
    other = summary.iloc[1]
    assert reference.val_loss_rel_to_reference == 0
    assert other.val_loss_rel_to_reference == pytest.approx(
        (other.final_val_loss - reference.final_val_loss) / abs(reference.final_val_loss)
    )
    report = (trained.folder / "training_report.md").read_text()
    assert f"{100 * other.val_loss_rel_to_reference:+.3g}%" in report and "float16-native-dynamic" in report
    assert (trained.folder / "figures" / "loss_curves.png").is_file()


# Each run of the two resume tests below is a process of its own, as a user's runs are: bit-for-bit equality is a
# claim about runs, and a test process that has run hundreds of other tests is not the state any run starts from.
_TRAIN_WITH_A_STOP = """
import json, sys
from roundoff_analyzer import training
settings, stop_at = json.loads(sys.argv[1]), json.loads(sys.argv[2])
plan = training.plan("cnf", out=sys.argv[3], **settings)
calls = iter(range(10**6))
try:
    training.run(plan, stop_requested=lambda: stop_at is not None and next(calls) == stop_at)
except training.TrainingInterrupted as stopped:
    print(json.dumps({"setup": stopped.setup, "iteration": stopped.iteration}))
    sys.exit(3)
"""
_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _train_apart(out: Path, stop_at: int | None = None) -> subprocess.CompletedProcess:
    settings = {"options": TINY_CNF, "timesteps": 4, "iters": 8, "save_at": [0, 4], "resume_every": 3, **TWO_SETUPS}
    command = [sys.executable, "-c", _TRAIN_WITH_A_STOP, json.dumps(settings), json.dumps(stop_at), str(out)]
    return subprocess.run(command, env=_ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a training stopped, resumed and trained again uninterrupted: 15 s
def test_stopped_and_resumed_equals_uninterrupted(tmp_path):
    stopped = _train_apart(tmp_path / "stopped", stop_at=10)  # in the second setup, between iterations
    assert stopped.returncode == 3, stopped.stderr
    where = json.loads(stopped.stdout)
    assert where["setup"] == "float16-native-dynamic"
    assert (
        load_resume(tmp_path / "stopped" / "setups" / "float16-native-dynamic")["iteration"] == where["iteration"] < 8
    )
    for run in (_train_apart(tmp_path / "stopped"), _train_apart(tmp_path / "straight")):
        assert run.returncode == 0, run.stderr
    for folder in (Path("."), Path("setups/float16-native-dynamic")):
        _assert_same_weights(
            _last_weights(tmp_path / "stopped" / folder, 8), _last_weights(tmp_path / "straight" / folder, 8)
        )
    columns = ["setup", "iteration", "loss", "val_loss", "skipped", "scale"]
    logs = [pd.read_parquet(tmp_path / name / "training_log.parquet")[columns] for name in ("stopped", "straight")]
    pd.testing.assert_frame_equal(*logs)


@pytest.mark.slow  # a training killed for real and resumed: 15 s
def test_killed_process_resumes_to_the_uninterrupted_weights(tmp_path):
    out = tmp_path / "killed"
    command = [
        "train",
        *TINY_CNF_ARGS,
        "--iters",
        "60",
        "--save-at",
        "5",
        "--resume-every",
        "5",
        "--dtype",
        "float32,bfloat16",
        "--out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "roundoff_cli", *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    second = out / "setups" / "bfloat16-native-none"

    def second_setup_saved_a_state_past_0() -> bool:  # the checkpoint at 5 comes just before its resume state
        return (second / "checkpoints" / "iter_0000005.pt").exists() and load_resume(second)["iteration"] > 0

    try:
        deadline = time.monotonic() + 120
        while not second_setup_saved_a_state_past_0() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert 0 < load_resume(second)["iteration"] < 60  # killed before the end
    assert not (out / "training_summary.parquet").exists()
    resumed = subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *command], env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming bfloat16-native-none at iteration" in resumed.stdout + resumed.stderr
    straight_command = [c if c != str(out) else str(tmp_path / "straight") for c in command]
    straight = subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *straight_command], env=env, capture_output=True, text=True, timeout=300
    )
    assert straight.returncode == 0, straight.stderr
    for folder in (Path("."), Path("setups/bfloat16-native-none")):
        _assert_same_weights(_last_weights(out / folder, 60), _last_weights(tmp_path / "straight" / folder, 60))
    assert not list(out.rglob(".*.tmp-*"))  # whatever the kill was writing


def test_a_resumed_training_removes_the_temporaries_a_killed_one_left(trained, tmp_path):
    # SIGKILL while a file is written leaves its `.NAME.tmp-PID`; the run that resumes the folder removes those of
    # processes that are gone, as a resumed sweep does, in the folder and below it, and keeps a live process's.
    out = tmp_path / "cnf"
    shutil.copytree(trained.folder, out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = [
        out / f".training_log.parquet.tmp-{dead.stdout.strip()}",
        out / "checkpoints" / f".iter_0000004.pt.tmp-{dead.stdout.strip()}",
        out / "setups" / "float16-native-dynamic" / "resume" / f".state.pt.tmp-{dead.stdout.strip()}",
    ]
    live = out / f".training_log.parquet.tmp-{os.getppid()}"  # the process that started this test's
    for path in (*abandoned, live):
        path.write_bytes(b"half a file")
    resumed = _train(out, **TWO_SETUPS)
    assert not any(path.exists() for path in abandoned) and live.read_bytes() == b"half a file"
    pd.testing.assert_frame_equal(resumed.log, trained.log)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dtype", "float99"], "unknown dtype 'float99'"),
        (["--iters", "3", "--save-at", "0,5"], "'save_at' has iterations beyond iters 3: 5"),
        (["-n", "4,8"], "--timesteps '4,8' takes one value"),
        (["--method", "dopri5"], "adaptive"),
        (["--library", "torchdiffeq", "--dtype", "float16", "--scaling", "dynamic"], "no setup can run"),
        (["--lr", "0"], "'lr' must be greater than 0"),
        (["-o", "widht=8"], "option 'widht'"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_written(tmp_path, args, message):
    out = tmp_path / "never"
    result = run_cli("train", *TINY_CNF_ARGS, *args, "--out", out)
    assert result.exit_code == 2
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert not out.exists()


def test_a_config_file_is_read_and_checked_like_the_sweeps(tmp_path):
    config = tmp_path / "train.toml"
    config.write_text(
        'model = "cnf"\niters = 2\ntimesteps = 4\nlearning_rate = 1\n[options]\nhidden = 4\nwidth = 8\nbatch = 16\n'
    )
    result = run_cli("train", "--config", config, "--out", tmp_path / "never")
    assert (
        result.exit_code == 2
        and f"config file '{config}': 'learning_rate' unknown key; allowed: model" in result.stderr
    )
    config.write_text(
        'model = "cnf"\niters = 2\ntimesteps = 4\n[options]\nhidden = 4\nwidth = 8\nbatch = 16\n'
        '[[setups]]\ndtype = "bfloat16"\n[[setups]]\ndtype = "float32"\n'
    )
    result = run_cli("train", "--config", config, "--iters", "3", "--seed", "3", "--out", tmp_path / "ok")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "ok" / "train_manifest.json").read_text())
    assert manifest["iters"] == 3 and manifest["seed"] == 3 and manifest["options"]["seed"] == "3"
    assert [s["label"] for s in manifest["setups"]] == ["float32-native-none", "bfloat16-native-none"]


def test_a_different_training_in_the_folder_is_refused_unless_forced(trained, tmp_path):
    before = snapshot(trained.folder)
    args = ["train", *TINY_CNF_ARGS, "--iters", "8", "--save-at", "0,4", "--out", trained.folder]
    refused = run_cli(*args, "--lr", "0.01")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"error: output folder '{trained.folder}' holds a different training (differs in: lr)"
    )
    shorter = run_cli("train", *TINY_CNF_ARGS, "--iters", "5", "--out", trained.folder)
    assert shorter.exit_code == 2 and "trained to iteration 8, past --iters 5" in shorter.stderr
    assert snapshot(trained.folder) == before
    forced_into = tmp_path / "forced"
    assert run_cli("train", *TINY_CNF_ARGS, "--iters", "2", "--out", forced_into).exit_code == 0
    again = run_cli("train", *TINY_CNF_ARGS, "--iters", "2", "--out", forced_into)
    assert again.exit_code == 0 and "float32-native-none: already trained to iteration 2" in again.output
    forced = run_cli("train", *TINY_CNF_ARGS, "--iters", "2", "--lr", "0.01", "--force", "--out", forced_into)
    assert forced.exit_code == 0, forced.output
    assert json.loads((forced_into / "train_manifest.json").read_text())["lr"] == 0.01


def test_a_model_without_a_batch_sampler_is_refused(tmp_path):
    factory = tmp_path / "fixed.py"
    factory.write_text(
        "import torch\n"
        "class Dynamics(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(2, 2)\n"
        "    def forward(self, t, y):\n"
        "        return self.lin(y)\n"
        "def make(seed: int = 0):\n"
        "    return Dynamics(), torch.ones(4, 2), lambda trajectory: trajectory[-1].pow(2).mean()\n"
    )
    result = run_cli("train", "-m", f"{factory}:make", "--iters", "2", "-n", "2", "--out", tmp_path / "never")
    assert result.exit_code == 2 and "offers no batch sampler" in result.stderr and not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("settings", "label"),
    [
        ({"dtype": "bfloat16", "mode": "pure"}, "bfloat16-native-none"),
        ({"dtype": "float16", "library": "torchdiffeq", "scaling": "grad"}, "float16-torchdiffeq-grad"),
    ],
)
def test_low_precision_setups_update_the_float32_master_weights(tmp_path, settings, label):
    result = _train(tmp_path / "t", iters=3, save_at=[0], val_every=2, **settings)
    own = result.log[result.log["setup"] == label]
    assert own.loc[own["val_loss"].notna(), "iteration"].tolist() == [
        0,
        2,
        3,
    ]  # saved, every 2nd, the last
    # float32 on float32 weights trained first, not asked for: the reference every setup is judged against
    assert list(result.summary["setup"]) == [f"float32-{settings.get('library', 'native')}-none", label]
    assert result.summary["skipped_steps"].tolist() == [0, 0]
    folder = result.folder / "setups" / label
    weights, start = _last_weights(folder, 3), _last_weights(folder, 0)
    assert all(w.dtype == torch.float32 for w in weights.values())
    assert any(not torch.equal(start[k], w) for k, w in weights.items())
    if settings.get("scaling") == "grad":  # the loss scale carried from step to step, GradScaler's initial 65536 here
        assert own.loc[own["iteration"] > 0, "scale"].tolist() == [65536.0] * 3


def test_the_loss_scale_carries_over_as_gradscaler_carries_it():
    scale = LossScale(65536.0)
    scale.update(16384.0, retries=2, finite=True)  # backed off twice within the step: the next step starts there
    assert (scale.scale, scale.good_steps) == (16384.0, 0)
    for _ in range(GROWTH_INTERVAL - 1):
        scale.update(16384.0, retries=0, finite=True)
    assert scale.scale == 16384.0
    scale.update(16384.0, retries=0, finite=True)
    assert (scale.scale, scale.good_steps) == (32768.0, 0)
    scale.update(1.0, retries=30, finite=False)  # exhausted: the step is skipped, the scale kept where it ended
    assert (scale.scale, scale.good_steps) == (1.0, 0)


def test_a_data_file_too_short_for_the_stream_is_refused(tmp_path):
    # batches 0 … 5 of 4 rows: 1 … 4 held out, 5 for iteration 1
    path = write_bsds300(tmp_path / "BSDS300.hdf5", rows=24)
    args = [
        "train",
        "-m",
        "otflow",
        "-o",
        "d=63",
        "-o",
        "hidden=4",
        "-o",
        "batch=4",
        "--data",
        f"bsds300:{path}",
        "-n",
        "2",
    ]
    refused = run_cli(*args, "--iters", "2", "--out", tmp_path / "never")
    assert refused.exit_code == 2 and not (tmp_path / "never").exists()
    assert refused.stderr.startswith("error: the last iteration trains on batch 6 (4 held out, then one per iteration)")
    assert "has 24 rows, fewer than the 28 asked for" in refused.stderr
    assert run_cli(*args, "--iters", "1", "--out", tmp_path / "ok").exit_code == 0


def test_roundoff_report_rewrites_a_training_report_from_its_tables(trained, tmp_path):
    report = trained.folder / "training_report.md"
    before = report.read_bytes()
    report.unlink()
    result = run_cli("report", trained.folder)
    assert result.exit_code == 0 and report.read_bytes() == before
    elsewhere = run_cli("report", trained.folder, "--out", tmp_path / "r.md")
    assert elsewhere.exit_code == 0 and "figures/loss_curves.png" in (tmp_path / "r.md").read_text()
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "train_manifest.json").write_text(json.dumps({"kind": "roundoff-train"}))
    refused = run_cli("report", unfinished)
    assert refused.exit_code == 2 and "has not finished" in refused.stderr


def test_the_shipped_training_configs_hold_what_the_readme_says():
    configs = Path(__file__).resolve().parents[1] / "configs"
    cpu = resolve(configs / "cnf_2spirals_train.toml", {})
    assert [s.setup_label for s in choose_setups(cpu).setups] == ["float32-native-none", "float16-native-dynamic"]
    assert (cpu.iters, cpu.save_at, cpu.val_every, cpu.timesteps, cpu.device) == (300, [0, 100, 300], 25, 16, "auto")
    gpu = resolve(configs / "cnf_2spirals_train_gpu.toml", {})
    assert [s.setup_label for s in choose_setups(gpu).setups] == [
        "float32-native-none",
        "float16-native-dynamic",
        "float16-torchdiffeq-grad",
        "bfloat16-native-none",
    ]
    assert (gpu.iters, gpu.timesteps, gpu.options["batch"], gpu.device) == (2000, 128, 1024, "cuda")


def test_the_reports_validation_table_is_the_log(trained):
    text = (trained.folder / "training_report.md").read_text()
    table = text.split("## Validation loss along training")[1].split("##")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    log = trained.log.set_index(["setup", "iteration"])["val_loss"]
    assert [int(r[0]) for r in rows] == [0, 4, 8]
    for iteration, reference, other, rel in rows:
        first, second = log["float32-native-none", int(iteration)], log["float16-native-dynamic", int(iteration)]
        assert float(reference) == pytest.approx(first, rel=1e-4) and float(other) == pytest.approx(second, rel=1e-4)
        assert float(rel.rstrip("%")) == pytest.approx(100 * (second - first) / abs(first), rel=1e-2, abs=1e-6)


def test_a_non_finite_gradient_skips_the_step_and_is_counted(tmp_path):
    """float16 torchdiffeq gradients of this OT-Flow overflow without scaling (as in the sweep's overflow fixture):
    every step is skipped and the weights stay; loss scaling (`grad`) rescues every step."""
    settings = {
        "options": {"d": 3, "hidden": 8, "batch": 16, "alpha": "1,2e5,8e4"},
        "timesteps": 4,
        "method": "euler",
        "iters": 3,
        "save_at": [0],
        "library": "torchdiffeq",
        "dtype": "float16",
        "scaling": ["none", "grad"],
    }
    result = training.train("otflow", out=tmp_path / "overflow", **settings)
    summary = result.summary.set_index("setup")
    assert (
        summary.loc["float16-torchdiffeq-none", "skipped_steps"] == 3
        and summary.loc["float16-torchdiffeq-grad", "skipped_steps"] == 0
    )
    skipped = result.log[(result.log["setup"] == "float16-torchdiffeq-none") & (result.log["iteration"] > 0)]
    assert skipped["skipped"].all() and skipped["failure"].str.startswith("overflow").all()
    skipping = result.folder / "setups" / "float16-torchdiffeq-none"  # the float32 reference trains first, added
    _assert_same_weights(_last_weights(skipping, 3), _last_weights(skipping, 0))
    rescued = result.folder / "setups" / "float16-torchdiffeq-grad"
    assert any(not torch.equal(w, _last_weights(rescued, 0)[k]) for k, w in _last_weights(rescued, 3).items())
    line = next(
        line
        for line in (result.folder / "training_report.md").read_text().splitlines()
        if line.startswith("- `float16-torchdiffeq-none`")
    )
    assert "that of `float32-torchdiffeq-none`" in line and line.endswith("3 steps skipped (non-finite gradient).")


def test_time_ratios_are_measured_interleaved_with_their_range(trained):
    summary = pd.read_parquet(trained.folder / "training_summary.parquet")
    assert (summary["timing_rounds"] == TIMING_ROUNDS).all() and (summary["interleaved_iter_s"] > 0).all()
    reference, other = summary.iloc[0], summary.iloc[1]
    assert reference.time_rel_to_reference == reference.time_rel_min == reference.time_rel_max == 1.0
    assert 0 < other.time_rel_min <= other.time_rel_to_reference <= other.time_rel_max
    report = (trained.folder / "training_report.md").read_text()
    ratio = f"{other.time_rel_to_reference:.2f}× ({other.time_rel_min:.2f}–{other.time_rel_max:.2f}×"
    assert f"time per iteration {ratio} over {TIMING_ROUNDS} interleaved rounds)" in report
    assert f"each setup ran {TIMING_ROUNDS} more iterations from its final state" in report
    # The timed iterations are not the training's: the log holds the eight iterations of each setup, no more.
    assert (trained.log.groupby("setup")["iteration"].max() == 8).all()


def test_a_summary_from_before_the_interleaved_timing_says_how_its_times_were_measured(tmp_path):
    folder = tmp_path / "cnf-weights"
    shutil.copytree(REPOSITORY / "reports" / "cnf-weights", folder)
    (folder / "training_report.md").unlink()
    assert run_cli("report", folder).exit_code == 0
    text = (folder / "training_report.md").read_text()
    assert "this folder's summary is from before the interleaved timing" in text
    assert "interleaved rounds)" not in text


def _cells(summary: pd.DataFrame) -> list[str]:
    """What `roundoff train` and `show` write of each setup: its label and every number, each to be seen whole."""
    cells = []
    for row in summary.itertuples(index=False):
        cells += [row.setup, str(row.iterations), f"{row.final_loss:.5g}", f"{row.final_val_loss:.5g}"]
        cells += [f"{100 * row.val_loss_rel_to_reference:+.3g}%", f"{row.interleaved_iter_s:.3g} s"]
    return cells


@pytest.mark.parametrize("columns", [200, 80, 60, 40])
def test_show_on_a_training_folder_prints_its_summary_whole_at_any_width(trained, columns):
    shown = run_cli("show", trained.folder, columns=columns)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    # The lines naming the folder are written whole, to be copied; the summary fits the terminal.
    assert all(len(line) <= columns for line in lines if str(trained.folder) not in line), shown.stdout
    summary = pd.read_parquet(trained.folder / "training_summary.parquet")
    for cell in _cells(summary):
        assert any(cell in line for line in lines), (cell, shown.stdout)  # on one line: not folded or cut
    assert f"report: {trained.folder / 'training_report.md'}" in shown.stdout.replace("\n", "")
    assert "no results" not in shown.output


def test_show_on_an_unfinished_training_folder_is_one_line(tmp_path):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "train_manifest.json").write_text(json.dumps({"kind": "roundoff-train"}))
    refused = run_cli("show", unfinished)
    assert refused.exit_code == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: training folder '{unfinished}' has no training_summary.parquet: its training has not finished; "
        "run the same `roundoff train` command again to finish it"
    ]


@pytest.mark.parametrize("columns", [120, 80, 50])
def test_the_progress_lines_never_cut_a_number(columns):
    console = Console(file=io.StringIO(), width=columns, force_terminal=False)
    progress = TrainRichProgress(console)
    for label in ("float32-native-none", "bfloat16-native-none-weights_bfloat16-stochastic_kahan"):
        progress.start(label, 1500, 0)
        progress.step(1188, 3.875)
    console.print(progress._progress.make_tasks_table(progress._progress.tasks))
    lines = console.file.getvalue().splitlines()
    assert sum("1188/1500" in line and "loss 3.875" in line for line in lines) == 2, lines
    assert all(len(line) <= columns for line in lines)
