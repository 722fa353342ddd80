"""`--executor slurm` against a real single-node Slurm cluster started by these tests (slurm_cluster.py).

Skipped, with the reason, where submitit or Slurm and munge are not installed or the cluster does not
start; nothing here fakes Slurm. The cluster is shared by the tests of this module and stopped at its end.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from roundoff_analyzer.execution import engine
from roundoff_analyzer.execution.executors import EXECUTORS
from roundoff_analyzer.planning import config

from .conftest import results, run_cli
from .slurm_cluster import ClusterUnavailable, SlurmCluster, missing_programs

# linear, euler, n_timesteps 2 and 4: 14 configurations in 4 reference groups (4 array tasks), under a second of work
# each.
GRID = ["--model", "linear", "--timesteps", "2,4", "--method", "euler", "--device", "cpu", "--no-report"]
N_CONFIGURATIONS, N_GROUPS = 14, 4
TIMEOUT_S = 300
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        import submitit  # noqa: F401
    except ImportError:
        pytest.skip('submitit is not installed (pip install -e ".[slurm]" -c constraints.txt in the checkout)')
    missing = missing_programs()
    if missing:
        pytest.skip(
            f"Slurm and munge are not installed here (missing {', '.join(missing)}; apt-get install slurmctld slurmd "
            "slurm-client munge)"
        )
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except (ClusterUnavailable, OSError, subprocess.SubprocessError) as exc:
        cluster.stop()
        pytest.skip(f"the test cluster did not start: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def sequential(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("sequential") / "sweep"
    result = run_cli("sweep", *GRID, "--out", out)
    assert result.exit_code == 0, result.output
    return results(out)


def roundoff(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "roundoff_cli", "sweep", *GRID, "--executor", "slurm", *extra, "--out", str(out)]


def same_results(table: pd.DataFrame, sequential: pd.DataFrame) -> None:
    """Same configurations in the same order, same statuses and errors, bit for bit (times aside)."""
    columns = [c for c in sequential.columns if not c.startswith("time_")]
    pd.testing.assert_frame_equal(table[columns], sequential[columns], check_exact=True)


def arrays(out: Path) -> list[dict]:
    return json.loads((out / "slurm" / "arrays.json").read_text())


def wait_for_submission(process: subprocess.Popen, out: Path) -> dict:
    deadline = time.monotonic() + TIMEOUT_S
    while not (out / "slurm" / "arrays.json").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no array was submitted"
        time.sleep(0.2)
    return arrays(out)[-1]


def slurm(cluster: SlurmCluster, *command: str) -> None:
    subprocess.run(command, env=cluster.env(), check=True, capture_output=True, timeout=60)


def test_a_gpu_sweep_is_planned_on_a_login_node_without_gpus():
    reason = EXECUTORS.get("slurm").unavailable_reason()
    if reason:
        pytest.skip(f"--executor slurm {reason}")
    request = config.resolve(
        REPO / "configs" / "otflow_bsds300.toml", {"executor": "slurm", "slurm": {"gpus_per_task": 1}}
    )
    plan = engine.plan(request)  # this machine has no GPU: the problem is built on the CPU, only to fingerprint it
    assert (
        plan.device == torch.device("cuda") and plan.problem.y0.device.type == "cpu" and len(plan.configurations) == 84
    )


@pytest.mark.slow  # a real single-node Slurm cluster, started for these tests
def test_sweep_through_slurm_gives_the_sequential_results(cluster, sequential, tmp_path):
    out = tmp_path / "array"
    done = subprocess.run(roundoff(out), env=cluster.env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    same_results(results(out), sequential)

    (array,) = arrays(out)
    assert len(array["tasks"]) == N_GROUPS  # one task per (library, method, n_timesteps)
    assert sorted(i for ids in array["tasks"].values() for i in ids) == sorted(
        p.stem for p in (out / "shards").glob("*.parquet")
    )
    assert f"{N_CONFIGURATIONS} configurations ({N_CONFIGURATIONS} ok)" in done.stdout
    assert f"{N_GROUPS} reference solves" in done.stdout  # each task solved its one reference, none was solved twice
    assert f"submitted Slurm job {array['job_id']}: {N_GROUPS} task(s)" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["execution"]["executor"] == "slurm" and manifest["device"] == "cpu"


@pytest.mark.slow  # a real single-node Slurm cluster, started for these tests
def test_the_same_command_while_the_array_runs_waits_for_it_and_submits_nothing_twice(cluster, sequential, tmp_path):
    out = tmp_path / "held"
    # Held tasks stay queued until released, so the array is certainly still on the cluster when the command runs again.
    first = subprocess.Popen(
        roundoff(out, "--slurm-option", "hold"),
        env=cluster.env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    array = wait_for_submission(first, out)
    first.send_signal(signal.SIGINT)  # Ctrl-C stops the watching, not the array
    _, stderr = first.communicate(timeout=TIMEOUT_S)
    assert first.returncode == 130, stderr
    assert f"Slurm array {array['job_id']} keeps running without this process" in stderr

    again = subprocess.Popen(
        roundoff(out), env=cluster.env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    waiting = ""
    while "still queued or running" not in waiting:
        line = again.stdout.readline()
        assert line, again.communicate()
        waiting = line
    assert f"{N_GROUPS} Slurm task(s) of an earlier submission" in waiting
    slurm(cluster, "scontrol", "release", array["job_id"])
    stdout, stderr = again.communicate(timeout=TIMEOUT_S)
    assert again.returncode == 0, stdout + stderr
    assert len(arrays(out)) == 1 and "submitted Slurm job" not in stdout
    same_results(results(out), sequential)


@pytest.mark.slow  # a real single-node Slurm cluster, started for these tests
def test_a_cancelled_task_is_reported_and_only_its_configurations_run_again(cluster, sequential, tmp_path):
    out = tmp_path / "cancelled"
    first = subprocess.Popen(
        roundoff(out, "--slurm-option", "hold"),
        env=cluster.env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    array = wait_for_submission(first, out)
    cancelled = sorted(array["tasks"])[-1]
    slurm(cluster, "scancel", cancelled)
    slurm(cluster, "scontrol", "release", array["job_id"])
    _, stderr = first.communicate(timeout=TIMEOUT_S)
    lost = len(array["tasks"][cancelled])
    assert first.returncode == 1, stderr
    assert f"Slurm task {cancelled} left {lost} configuration(s) without a result: it ended without a report" in stderr
    assert f"{N_CONFIGURATIONS - lost} of {N_CONFIGURATIONS} configurations are done" in stderr

    again = subprocess.run(roundoff(out), env=cluster.env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        f"resuming: {N_CONFIGURATIONS - lost} of {N_CONFIGURATIONS} configurations are already on disk" in again.stdout
    )
    resubmitted = arrays(out)[-1]
    assert len(arrays(out)) == 2 and [sorted(ids) for ids in resubmitted["tasks"].values()] == [
        sorted(array["tasks"][cancelled])
    ]
    same_results(results(out), sequential)


@pytest.mark.slow  # a real single-node Slurm cluster, started for these tests
def test_a_sweep_over_checkpoints_through_slurm_gives_the_local_rows(cluster, tmp_path):
    """One task per checkpoint's reference group; each prepares its own checkpoint's yardsticks."""
    from .test_checkpoint_axis import TINY_CNF_ARGS, write_train_folder

    folder = write_train_folder(tmp_path / "train", iterations=(0, 5))
    grid = [
        "--model",
        "cnf",
        *TINY_CNF_ARGS,
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--dtype",
        "bfloat16",
        "--library",
        "native",
        "--scaling",
        "none",
        "--noise-batches",
        "2",
        "--device",
        "cpu",
        "--no-report",
        "--checkpoint",
        str(folder),
    ]
    local = run_cli("sweep", *grid, "--out", tmp_path / "local")
    assert local.exit_code == 0, local.output
    out = tmp_path / "array"
    command = [sys.executable, "-m", "roundoff_cli", "sweep", *grid, "--executor", "slurm", "--out", str(out)]
    done = subprocess.run(command, env=cluster.env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    same_results(results(out), results(tmp_path / "local"))
    assert list(results(out)["checkpoint"]) == ["train/iter_0000000", "train/iter_0000005"]
    (array,) = arrays(out)
    assert len(array["tasks"]) == 2
    assert not (out / "yardsticks").exists()  # the finished sweep removed its pieces
    assert results(out)["grad_noise_rel"].nunique() == 2  # each checkpoint's own noise, as in the local run
