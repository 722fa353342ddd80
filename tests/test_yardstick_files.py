"""The fine reference and the gradient noise are computed once per sweep, in pieces saved in the folder: read by
the sweep's other processes and by a resumed sweep, never taken from another sweep, and computed by a process
that waited for a piece whose holder died."""

from __future__ import annotations

import subprocess
import sys
import threading

import pandas as pd
import pytest
import torch

from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.gradient_noise import measure_gradient_noise
from roundoff_analyzer.measuring.yardstick_files import YARDSTICKS, YardstickFiles
from roundoff_analyzer.measuring.yardsticks import PIECES, Yardsticks
from roundoff_analyzer.planning import config

from .test_parallel import result_columns_except_cost

CPU = torch.device("cpu")


def tiny_request(**extra) -> config.SweepConfig:
    options = {"d": "3", "hidden": "8", "batch": "16"}
    grid = {"timesteps": [4, 8], "method": ["rk4"], "library": ["native"], "dtype": ["bfloat16"], "scaling": ["none"]}
    return config.validate(
        {"model": "otflow", "options": options, **grid, "device": "cpu", "noise_batches": 6, **extra}
    )


def test_the_noise_computed_in_pieces_equals_the_noise_computed_in_one_go():
    copies = ProblemCopies(engine.plan(tiny_request()).problem)
    whole = measure_gradient_noise(copies, 8, 6, CPU)
    in_pieces = Yardsticks(copies, [4, 8], 6, CPU).noise()
    assert whole.rel is not None and in_pieces.rel == whole.rel
    assert in_pieces.n_batches == whole.n_batches == 6 and in_pieces.n_timesteps == whole.n_timesteps == 8


def test_a_resumed_sweep_reads_the_saved_pieces_instead_of_solving_again(tmp_path):
    out, whole = tmp_path / "sweep", tmp_path / "whole"
    reference = engine.run(engine.plan(tiny_request()), whole).results
    assert not (whole / YARDSTICKS).exists()  # a finished sweep leaves no pieces behind

    stopped = lambda: any((out / "shards").glob("*.parquet"))  # noqa: E731 - after the first configuration
    with pytest.raises(engine.SweepInterrupted):
        engine.run(engine.plan(tiny_request()), out, stop_requested=stopped)
    saved = {piece: (out / YARDSTICKS / f"{piece}.pt").stat().st_mtime_ns for piece in PIECES}
    seen = []
    resumed = engine.run(
        engine.plan(tiny_request()),
        out,
        stop_requested=lambda: (
            seen.append({piece: (out / YARDSTICKS / f"{piece}.pt").stat().st_mtime_ns for piece in PIECES}) and False
        ),
    ).results
    assert seen and all(mtimes == saved for mtimes in seen)  # read, never written again, while the sweep went on
    assert resumed["grad_noise_rel"].notna().all() and resumed["disc_grad_params_rel_err"].notna().all()
    columns = result_columns_except_cost(reference)
    pd.testing.assert_frame_equal(resumed[columns], reference[columns], check_exact=True)


def test_a_sweep_replaced_with_force_does_not_read_the_pieces_of_the_one_before(tmp_path):
    out = tmp_path / "sweep"
    engine.run(engine.plan(tiny_request()), out)
    other = tiny_request(options={"d": "3", "hidden": "8", "batch": "16", "seed": "1"})
    replaced = engine.run(engine.plan(other), out, force=True).results
    fresh = engine.run(engine.plan(other), tmp_path / "fresh").results
    assert replaced["grad_noise_rel"].tolist() == fresh["grad_noise_rel"].tolist()
    assert replaced["disc_final_rel_err"].tolist() == fresh["disc_final_rel_err"].tolist()


def test_a_piece_saved_under_another_key_is_computed_again(tmp_path):
    assert (
        YardstickFiles(tmp_path, "one sweep", CPU).obtain("noise_0", lambda: {"value": torch.tensor(1.0)})["value"] == 1
    )
    other = YardstickFiles(tmp_path, "another sweep", CPU)
    assert other.load("noise_0") is None
    assert other.obtain("noise_0", lambda: {"value": torch.tensor(2.0)})["value"] == 2
    assert YardstickFiles(tmp_path, "another sweep", CPU).load("noise_0")["value"] == 2


def test_a_process_waits_while_another_holds_a_piece_and_computes_it_when_that_one_dies(tmp_path):
    hold = (
        "import fcntl, os, sys, time; d = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(d, "
        "fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path / ".fine.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        killed = threading.Event()
        threading.Timer(0.5, lambda: (killed.set(), holder.kill())).start()
        computed_after_the_holder_died = []
        content = YardstickFiles(tmp_path, "key", CPU).obtain(
            "fine", lambda: computed_after_the_holder_died.append(killed.is_set()) or {"value": torch.tensor(3.0)}
        )
    finally:
        holder.kill()
        holder.wait()
    assert computed_after_the_holder_died == [True] and content["value"] == 3
