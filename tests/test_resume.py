"""Nothing lost: a killed or interrupted sweep resumes where it stopped and gives the numbers an
uninterrupted one gives; a folder holding another sweep is refused unless --force."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from roundoff_analyzer.axes.grid import CONFIG_COLUMNS
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.columns import ERROR_METRICS
from roundoff_analyzer.planning import config

from .conftest import results, run_cli

# 2 n_timesteps x euler x the default grid's 7 triples = 14 configurations of a few tenths of a second each.
GRID = ["--model", "linear", "--timesteps", "2,4", "--method", "euler", "--no-report"]
N_CONFIGURATIONS = 14
ERROR_COLUMNS = [f"{name}{suffix}" for name in ERROR_METRICS for suffix in ("", "_over_u")]


def start_sweep(out: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "roundoff_cli", "sweep", *GRID, "--device", "cpu", "--out", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_sweep(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "roundoff_cli", "sweep", *GRID, "--device", "cpu", "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def shards(out: Path) -> list[Path]:
    return sorted((out / "shards").glob("*.parquet"))


def wait_for_first_shard(process: subprocess.Popen, out: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not shards(out):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no shard appeared"
        time.sleep(0.02)


def by_configuration(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(list(CONFIG_COLUMNS)).reset_index(drop=True)


@pytest.mark.slow  # a sweep killed for real, resumed and compared: 15-25 s
def test_killed_sweep_resumes_and_matches_an_uninterrupted_one(tmp_path):
    out = tmp_path / "killed"
    process = start_sweep(out)
    wait_for_first_shard(process, out)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    n_before = len(shards(out))
    assert 1 <= n_before < N_CONFIGURATIONS, "the kill should land in the middle of the sweep"

    resumed = finish_sweep(out)
    assert resumed.returncode == 0, resumed.stderr
    n_skipped = int(resumed.stdout.split("resuming: ")[1].split(" of ")[0])
    assert n_skipped >= n_before  # a shard may have been renamed into place between counting and the kill
    assert f"resuming: {n_skipped} of {N_CONFIGURATIONS} configurations are already on disk" in resumed.stdout

    table = by_configuration(results(out))
    assert len(table) == len(shards(out)) == N_CONFIGURATIONS
    assert not table.duplicated(list(CONFIG_COLUMNS)).any()

    uninterrupted = tmp_path / "uninterrupted"
    assert finish_sweep(uninterrupted).returncode == 0
    reference = by_configuration(results(uninterrupted))
    pd.testing.assert_frame_equal(
        table[list(CONFIG_COLUMNS) + ["status"]], reference[list(CONFIG_COLUMNS) + ["status"]]
    )
    pd.testing.assert_frame_equal(table[ERROR_COLUMNS], reference[ERROR_COLUMNS], check_exact=True)


@pytest.mark.slow  # a real Ctrl-C to a sweep in a fresh process, once and twice: 10 s each
@pytest.mark.parametrize("presses", [1, 2], ids=["ctrl-c once", "ctrl-c twice"])
def test_ctrl_c_keeps_what_finished_and_says_how_to_resume(tmp_path, presses):
    out = tmp_path / "interrupted"
    process = start_sweep(out)
    wait_for_first_shard(process, out)
    for _ in range(presses):
        process.send_signal(signal.SIGINT)
        time.sleep(0.05)
    stdout, stderr = process.communicate(timeout=120)

    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr
    n_done = len(shards(out))
    assert 1 <= n_done < N_CONFIGURATIONS
    assert f"interrupted: {n_done} of {N_CONFIGURATIONS} configurations are done and saved in {out}" in stderr
    assert "run the same command again" in stderr
    assert len(results(out)) == n_done  # results.parquet was rebuilt from the shards on the way out


def test_stop_between_configurations_leaves_the_finished_ones(tmp_path):
    out = tmp_path / "stopped"
    plan = engine.plan(config.validate({"model": "linear", "timesteps": [2], "method": ["euler"]}))
    with pytest.raises(engine.SweepInterrupted) as stopped:
        engine.run(plan, out, stop_requested=lambda: len(shards(out)) >= 3)
    assert (stopped.value.n_done, stopped.value.n_total) == (3, 7)
    assert len(results(out)) == 3

    outcome = engine.run(plan, out)
    assert (outcome.n_reused, outcome.n_run, len(outcome.results)) == (3, 4, 7)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_another_grid_in_the_folder_is_refused_unless_forced(tmp_path):
    out = tmp_path / "sweep"
    one = [
        "sweep",
        "--model",
        "linear",
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
    assert run_cli(*one, "--timesteps", "2", "--out", out).exit_code == 0
    before = _snapshot(out)

    refused = run_cli(*one, "--timesteps", "4", "--out", out)
    assert refused.exit_code == 2
    assert refused.stderr.strip().count("\n") == 0 and "holds a different sweep (differs in: grid)" in refused.stderr
    assert _snapshot(out) == before

    forced = run_cli(*one, "--timesteps", "4", "--force", "--out", out)
    assert forced.exit_code == 0, forced.output
    assert results(out).n_timesteps.tolist() == [4] and len(shards(out)) == 1


def test_results_table_is_rebuilt_from_the_shards(tmp_path):
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--library",
        "native",
        "--no-report",
        "--out",
        out,
    ]
    assert run_cli(*args).exit_code == 0
    expected = results(out)
    (out / "results.parquet").write_bytes(b"a crash while writing left this")

    again = run_cli(*args)
    assert again.exit_code == 0, again.output
    assert f"resuming: {len(expected)} of {len(expected)} configurations are already on disk" in again.stdout
    pd.testing.assert_frame_equal(results(out), expected)
