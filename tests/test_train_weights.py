"""Weights in low precision: the update roundings against their closed form, the optimizer's state in the weights'
format, the optimizer axis, lost updates, bytes, clipping, and a killed low-precision training resumed bit for bit
(weights, compensation buffers and stochastic-rounding stream)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from roundoff_analyzer import training
from roundoff_analyzer.training.config import resolve
from roundoff_analyzer.training.files import load_resume
from roundoff_analyzer.training.log import read_log
from roundoff_analyzer.training.setups import REFERENCE_WHY, choose_setups
from roundoff_analyzer.training.stored_weights import StoredWeights, bytes_per_value

from .conftest import WIDE_TABLES, run_cli

TINY_CNF = {"hidden": 4, "width": 8, "batch": 16}
TINY_CNF_ARGS = ["-m", "cnf", "-o", "hidden=4", "-o", "width=8", "-o", "batch=16", "-n", "4"]
REPOSITORY = Path(__file__).resolve().parents[1]
STEP = 2.0**-10  # an eighth of bfloat16's unit in the last place at 1 (2^-7): below half of it, lost to nearest
STEPS = 256


def _run_closed_form(update: str, seed: int = 0) -> tuple[float, list[float | None]]:
    """w = 1 in bfloat16, a real optimizer stepping it by +2^-10 each time (SGD, lr 2^-10, gradient -1)."""
    w = torch.nn.Parameter(torch.ones(1))
    stored = StoredWeights([w], "bfloat16", update, seed=seed)
    optimizer = torch.optim.SGD([w], lr=STEP)
    lost = []
    for _ in range(STEPS):
        w.grad = -torch.ones(1)
        before = stored.before_step()
        optimizer.step()
        lost.append(stored.after_step(before, optimizer))
    return float(w.detach()), lost


def test_nearest_loses_every_update_below_half_an_ulp():
    final, lost = _run_closed_form("nearest")
    assert final == 1.0 and lost == [1.0] * STEPS


def test_kahan_ends_at_the_exact_sum():
    final, lost = _run_closed_form("kahan")
    assert final == 1.0 + STEPS * STEP == 1.25
    assert 0 < sum(lost) < STEPS  # most steps leave the weight where it was; the buffer carries them


def test_stochastic_rounding_is_unbiased_over_seeds():
    finals = torch.tensor([_run_closed_form("stochastic", seed)[0] for seed in range(64)], dtype=torch.float64)
    standard_error = float(finals.std()) / math.sqrt(len(finals))
    assert standard_error > 0 and abs(float(finals.mean()) - 1.25) <= 3 * standard_error
    assert _run_closed_form("stochastic-kahan", 3)[0] == 1.25  # the buffer takes what stochastic rounding dropped


def test_every_update_leaves_a_value_of_the_format():
    torch.manual_seed(0)
    for weights in ("bfloat16", "float16", "e5m2"):
        for update in ("nearest", "stochastic", "kahan", "stochastic-kahan"):
            w = torch.nn.Parameter(torch.randn(64))
            stored = StoredWeights([w], weights, update, optimizer_state="weights", seed=1)
            optimizer = torch.optim.Adam([w], lr=1e-2)
            for _ in range(5):
                w.grad = torch.randn(64)
                before = stored.before_step()
                optimizer.step()
                stored.after_step(before, optimizer)
            values = [w.detach(), *(v for v in optimizer.state[w].values() if v.dim() > 0)]
            if weights != "e5m2":
                for value in values:
                    assert torch.equal(value, value.to(getattr(torch, weights)).float()), (weights, update)
            if stored.compensation is not None and weights != "e5m2":
                assert torch.equal(stored.compensation[0], stored.compensation[0].to(getattr(torch, weights)).float())


def test_bytes_of_weights_and_state():
    w = torch.nn.Parameter(torch.zeros(10))
    assert (
        bytes_per_value("float32"),
        bytes_per_value("bfloat16"),
        bytes_per_value("e5m2"),
        bytes_per_value("e5m7"),
    ) == (4, 2, 1, 2)
    for state, update, expected in (("float32", "nearest", 80), ("weights", "nearest", 40), ("weights", "kahan", 60)):
        stored = StoredWeights([w], "bfloat16", update, optimizer_state=state)
        optimizer = torch.optim.Adam([w], lr=1e-3)
        w.grad = torch.ones(10)
        optimizer.step()
        assert (stored.weight_bytes(), stored.optimizer_state_bytes(optimizer)) == (20, expected)


def test_the_stream_and_buffers_continue_from_a_saved_state():
    def steps(stored, w, optimizer, n):
        for _ in range(n):
            w.grad = torch.full((8,), -1.0)
            before = stored.before_step()
            optimizer.step()
            stored.after_step(before, optimizer)

    w = torch.nn.Parameter(torch.ones(8))
    stored, optimizer = StoredWeights([w], "bfloat16", "stochastic-kahan", seed=5), torch.optim.SGD([w], lr=STEP / 3)
    steps(stored, w, optimizer, 7)
    saved, saved_w = stored.state_dict(), w.detach().clone()
    steps(stored, w, optimizer, 9)
    w2 = torch.nn.Parameter(saved_w)
    again, optimizer2 = StoredWeights([w2], "bfloat16", "stochastic-kahan", seed=99), torch.optim.SGD([w2], lr=STEP / 3)
    again.load_state_dict(saved)
    steps(again, w2, optimizer2, 9)
    assert torch.equal(w, w2) and torch.equal(stored.compensation[0], again.compensation[0])
    assert torch.equal(stored.generator.get_state(), again.generator.get_state())


def test_setups_of_the_weights_axis():
    config = resolve(
        None,
        {
            "model": "cnf",
            "dtype": ["float32", "bfloat16"],
            "weights": ["float32", "bfloat16"],
            "update": ["nearest", "kahan"],
        },
    )
    labels = [s.setup_label for s in choose_setups(config).setups]
    assert labels == [
        "float32-native-none",
        "bfloat16-native-none",
        "float32-native-none-weights_bfloat16-nearest",
        "bfloat16-native-none-weights_bfloat16-nearest",
        "float32-native-none-weights_bfloat16-kahan",
        "bfloat16-native-none-weights_bfloat16-kahan",
    ]
    entries = resolve(
        None,
        {
            "model": "cnf",
            "setups": [
                {"dtype": "bfloat16", "weights": "bfloat16", "update": "stochastic", "optimizer_state": "weights"}
            ],
        },
    )
    chosen = choose_setups(entries)
    assert [s.setup_label for s in chosen.setups] == [
        "float32-native-none",  # the reference, added: not asked for
        "bfloat16-native-none-weights_bfloat16-stochastic-state_bfloat16",
    ]
    assert chosen.added == [f"float32-native-none: {REFERENCE_WHY}"]


def test_a_training_is_judged_against_float32_on_float32_weights_even_when_not_asked_for(tmp_path):
    """`--weights bfloat16` alone: the float32 reference is trained too, first, and every line names it."""
    out = tmp_path / "out"
    result = run_cli(
        "train", *TINY_CNF_ARGS, "--iters", "2", "--weights", "bfloat16", "--out", out, columns=WIDE_TABLES
    )
    assert result.exit_code == 0, result.output
    assert f"added: float32-native-none: {REFERENCE_WHY}" in result.stdout
    manifest = json.loads((tmp_path / "out" / "train_manifest.json").read_text())
    assert [s["label"] for s in manifest["setups"]] == [
        "float32-native-none",
        "float32-native-none-weights_bfloat16-nearest",
    ]
    report = (tmp_path / "out" / "training_report.md").read_text()
    line = next(line for line in report.splitlines() if line.startswith("- `float32-native-none-weights_bfloat16"))
    assert "that of `float32-native-none` (float32 compute on float32 master weights)" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--weights", "float99"], "unknown dtype 'float99'"),
        (["--update", "round-up"], "unknown update 'round-up'"),
        (["--optimizer-state", "float64"], "'float64' is not a place for the optimizer's state"),
        (["--optimizer", "lion"], "unknown optimizer 'lion'"),
        (["--optimizer", "no_such_module_x:make"], "cannot import no_such_module_x"),
        (["--clip-grad-norm", "0"], "'clip_grad_norm' must be greater than 0"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_written(tmp_path, args, message):
    result = run_cli("train", *TINY_CNF_ARGS, "--iters", "2", *args, "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_setups_entry_asking_to_round_float32_master_weights_is_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('model = "cnf"\n[[setups]]\ndtype = "float32"\nupdate = "kahan"\n')
    result = run_cli("train", "--config", config, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "update 'kahan' with float32 master weights" in result.stderr


@pytest.fixture(scope="module")
def low_weights(tmp_path_factory) -> training.TrainResult:
    return training.train(
        "cnf",
        out=tmp_path_factory.mktemp("weights") / "cnf",
        options=TINY_CNF,
        timesteps=4,
        iters=6,
        save_at=[0],
        dtype="bfloat16",
        weights=["float32", "bfloat16"],
        update=["nearest", "stochastic-kahan"],
        optimizer="adamw",
        clip_grad_norm=0.05,
    )


def test_the_log_and_summary_carry_the_weights_axis(low_weights):
    log, summary = low_weights.log, low_weights.summary
    assert list(summary["setup"]) == [
        "float32-native-none",  # the reference, added
        "bfloat16-native-none",
        "bfloat16-native-none-weights_bfloat16-nearest",
        "bfloat16-native-none-weights_bfloat16-stochastic_kahan",
    ]
    assert list(summary["weights"]) == ["float32", "float32", "bfloat16", "bfloat16"]
    assert list(summary["update"]) == ["nearest", "nearest", "nearest", "stochastic-kahan"]
    steps = log[log["iteration"] > 0]
    assert steps[steps["weights"] == "float32"]["lost_update_fraction"].isna().all()
    low = steps[steps["weights"] == "bfloat16"]
    assert low["lost_update_fraction"].between(0, 1).all()
    for row in summary.itertuples(index=False):
        own = steps[steps["setup"] == row.setup]["lost_update_fraction"]
        assert (pd.isna(row.lost_update_fraction) and own.isna().all()) or row.lost_update_fraction == pytest.approx(
            own.mean()
        )
    params = summary["weight_bytes"].iloc[0] // 4
    assert list(summary["weight_bytes"]) == [4 * params, 4 * params, 2 * params, 2 * params]
    assert list(summary["optimizer_state_bytes"]) == [
        8 * params,
        8 * params,
        8 * params,
        10 * params,
    ]  # AdamW's two moments (+ Kahan's buffer)


def test_the_optimizer_and_clipping_are_recorded(low_weights):
    manifest = low_weights.manifest
    assert manifest["optimizer"] == "adamw" and manifest["clip_grad_norm"] == 0.05
    assert (
        manifest["fingerprint"]["optimizer"] == {"name": "adamw"} and manifest["fingerprint"]["clip_grad_norm"] == 0.05
    )
    steps = low_weights.log[low_weights.log["iteration"] > 0]
    assert (steps["grad_norm"] > 0).all()
    assert (steps["clipped"] == (steps["grad_norm"] > 0.05)).all() and steps["clipped"].any()
    assert list(low_weights.summary["clipped_steps"]) == [
        int(steps[steps["setup"] == s]["clipped"].sum()) for s in low_weights.summary["setup"]
    ]
    report = (low_weights.folder / "training_report.md").read_text()
    assert "Clipped (gradient norm above clip_grad_norm): `float32-native-none` " in report
    assert "AdamW" in report and ("**holds**" in report or "**does not hold**" in report)


def test_clipping_bounds_the_step_it_sees():
    w = torch.nn.Parameter(torch.zeros(4))
    w.grad = torch.full((4,), 3.0)
    from roundoff_analyzer.training.clipping import clip_gradients

    norm, clipped = clip_gradients([w], 1.0)
    assert norm == pytest.approx(6.0) and clipped and float(w.grad.norm()) == pytest.approx(1.0, rel=1e-5)
    w.grad = torch.full((4,), 0.1)
    assert clip_gradients([w], 1.0) == (pytest.approx(0.2), False) and torch.equal(w.grad, torch.full((4,), 0.1))


def test_a_users_optimizer_factory_trains_and_is_fingerprinted(tmp_path):
    factory = tmp_path / "my_optim.py"
    factory.write_text("import torch\n\ndef make(params, lr):\n    return torch.optim.RMSprop(params, lr=lr)\n")
    result = training.train(
        "cnf", out=tmp_path / "out", options=TINY_CNF, timesteps=4, iters=2, optimizer=f"{factory}:make"
    )
    assert result.manifest["optimizer"] == f"{factory}:make"
    assert len(result.manifest["fingerprint"]["optimizer"]["source_sha256"]) == 64
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def make(params, lr):\n    return 3\n")
    refused = run_cli("train", *TINY_CNF_ARGS, "--iters", "1", "--optimizer", f"{wrong}:make", "--out", tmp_path / "w")
    assert refused.exit_code == 2 and "returned int, not a torch.optim.Optimizer" in refused.stderr


def test_a_log_from_before_the_axis_reads_as_float32_master_weights():
    log = read_log(REPOSITORY / "reports" / "cnf-train" / "training_log.parquet")
    assert (log["weights"] == "float32").all() and (log["update"] == "nearest").all() and not log["clipped"].any()


# a low-precision-weight training killed for real, resumed, and trained again uninterrupted: 20 s on an idle 2-core CPU
@pytest.mark.slow
def test_killed_low_weight_training_resumes_bit_for_bit(tmp_path):
    out = tmp_path / "killed"
    command = [
        "train",
        *TINY_CNF_ARGS,
        "--iters",
        "20",
        "--save-at",
        "5",
        "--resume-every",
        "5",
        "--dtype",
        "bfloat16",
        "--weights",
        "bfloat16",
        "--update",
        "stochastic-kahan",
        "--out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # The float32 reference trains first (added: not asked for); the low-precision setup in its own folder after it.
    low = Path("setups") / "bfloat16-native-none-weights_bfloat16-stochastic_kahan"
    process = subprocess.Popen(
        [sys.executable, "-m", "roundoff_cli", *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            if (out / low / "checkpoints" / "iter_0000005.pt").exists() and (load_resume(out / low) or {}).get(
                "iteration", 0
            ) > 5:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert 5 < load_resume(out / low)["iteration"] < 20
    resumed = subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *command], env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    straight_command = [c if c != str(out) else str(tmp_path / "straight") for c in command]
    straight = subprocess.run(
        [sys.executable, "-m", "roundoff_cli", *straight_command], env=env, capture_output=True, text=True, timeout=300
    )
    assert straight.returncode == 0, straight.stderr
    ends = [load_resume(folder / low) for folder in (out, tmp_path / "straight")]
    assert ends[0]["iteration"] == ends[1]["iteration"] == 20
    for name in ends[0]["func"]:
        assert torch.equal(ends[0]["func"][name], ends[1]["func"][name]), name
    for a, b in zip(ends[0]["stored_weights"]["compensation"], ends[1]["stored_weights"]["compensation"], strict=True):
        assert torch.equal(a, b) and a.abs().sum() > 0
    assert torch.equal(ends[0]["stored_weights"]["generator"], ends[1]["stored_weights"]["generator"])
    columns = ["iteration", "loss", "val_loss", "lost_update_fraction", "grad_norm"]
    logs = [pd.read_parquet(folder / "training_log.parquet")[columns] for folder in (out, tmp_path / "straight")]
    pd.testing.assert_frame_equal(*logs)


def test_clipping_sees_the_unscaled_gradient_with_gradscaler(tmp_path):
    result = training.train(
        "cnf",
        out=tmp_path / "out",
        options=TINY_CNF,
        timesteps=4,
        iters=2,
        dtype=["float32", "float16"],
        scaling="grad",
        clip_grad_norm=1e-3,
    )
    first = result.log[result.log["iteration"] == 1].set_index("setup")
    assert first.loc["float16-native-grad", "scale"] >= 2**10  # the loss was scaled, the norm is not
    ratio = first.loc["float16-native-grad", "grad_norm"] / first.loc["float32-native-none", "grad_norm"]
    assert 0.1 < ratio < 10 and first["clipped"].all()


def test_the_committed_weights_report_is_the_shipped_config():
    config = resolve(REPOSITORY / "configs" / "cnf_2spirals_weights.toml", {})
    manifest = json.loads((REPOSITORY / "reports" / "cnf-weights" / "train_manifest.json").read_text())
    assert [s.setup_label for s in choose_setups(config).setups] == [s["label"] for s in manifest["setups"]]
    assert (config.iters, config.lr, config.timesteps, config.options) == (
        manifest["iters"],
        manifest["lr"],
        16,
        {"hidden": 32, "width": 64, "batch": 256, "seed": 0},
    )
    summary = pd.read_parquet(REPOSITORY / "reports" / "cnf-weights" / "training_summary.parquet")
    assert (summary["iterations"] == config.iters).all() and config.iters >= 300
