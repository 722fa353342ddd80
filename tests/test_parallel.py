"""`--workers N`: the same results as a sequential sweep, each reference solved once, Ctrl-C and a dead
worker leave whole shards and a sweep that resumes; on several GPUs the workers spread over them."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import roundoff_analyzer
from roundoff_analyzer.axes.grid import CONFIG_COLUMNS
from roundoff_analyzer.core.devices import shared_gpu_warning, worker_devices
from roundoff_analyzer.execution import engine
from roundoff_analyzer.execution.base import Execution, ExecutionReport, NoProgress
from roundoff_analyzer.execution.in_process import yardstick_reference
from roundoff_analyzer.execution.package_identity import IDENTITY, differs
from roundoff_analyzer.execution.processes import measure_here
from roundoff_analyzer.execution.start_method import PRELOAD, worker_context
from roundoff_analyzer.execution.worker import SweepMismatch, Worker, WorkerSettings
from roundoff_analyzer.planning import config
from roundoff_analyzer.planning.groups import (
    REFERENCE_RUNS,
    estimated_cost,
    evaluations,
    reference_groups,
    reference_key,
)
from roundoff_analyzer.planning.manifest import manifest
from roundoff_analyzer.storage.results import ResultStore

from .conftest import results
from .test_cli import imported_heavy
from .test_resume import shards, wait_for_first_shard


# Everything a configuration's numbers decide; times and memory are measurements of the machine, not results.
def result_columns_except_cost(table):
    return [c for c in table.columns if not c.startswith("time_") and c != "peak_memory_bytes"]


# Default otflow, rk4 at 16 steps: 7 configurations in 2 reference groups, up to a second or two each (float16 `grad`).
SLOW_GRID = ["--model", "otflow", "--timesteps", "16", "--method", "rk4", "--device", "cpu", "--no-report"]
N_SLOW = 7


def tiny_otflow_request(**extra) -> config.SweepConfig:
    options = {"d": "3", "hidden": "8", "batch": "16"}  # conftest's TINY_OTFLOW
    return config.validate({"model": "otflow", "options": options, "timesteps": [4, 16], "device": "cpu", **extra})


@pytest.mark.slow  # a sequential and a two-worker sweep of the same grid: 20-40 s
def test_two_workers_give_the_sequential_results_bit_for_bit(tiny_sweep, tmp_path):
    """tiny_sweep is the same grid run sequentially (one process, torch's default threads)."""
    outcome = engine.run(engine.plan(tiny_otflow_request(workers=2)), tmp_path / "parallel")
    parallel, sequential = results(tmp_path / "parallel"), results(tiny_sweep)
    assert len(parallel) == len(sequential) == 28
    columns = result_columns_except_cost(sequential)
    pd.testing.assert_frame_equal(parallel[columns], sequential[columns], check_exact=True)

    # Work went out by reference: one solve per (library, method, n_timesteps) that ran, none twice.
    ran = sequential[sequential.status != "skipped"]
    assert outcome.reference_solves == len(ran[["library", "method", "n_timesteps"]].drop_duplicates()) == 8
    manifest = ResultStore(tmp_path / "parallel").read_manifest()
    assert manifest["execution"]["executor"] == "processes" and manifest["execution"]["workers"] == 2
    assert manifest["execution"]["threads"] == 1  # a tiny problem: one thread per worker (core/threads.py)


def test_this_process_takes_one_end_of_work_and_leaves_the_workers_theirs(tmp_path):
    """Each process, this one included, gets its own None once the groups are gone: this process stops at the first
    it takes and leaves the rest to the workers, rather than waiting on an empty queue for work that will not come."""
    plan = engine.plan(tiny_otflow_request(workers=1))
    store = ResultStore(tmp_path / "sweep")
    store.open(manifest(plan))
    tasks = worker_context().Queue()
    for end in (None, None):
        tasks.put(end)
    try:
        execution = Execution(plan, store, [], NoProgress(), lambda: False)
        measure_here(execution, tasks, ExecutionReport())
        assert tasks.get(timeout=5) is None  # the worker's end is still there
        with pytest.raises(queue.Empty):
            tasks.get(timeout=0.2)
    finally:
        store.close()


def test_groups_keep_each_reference_together_costliest_first():
    plan = engine.plan(tiny_otflow_request())
    groups = reference_groups(plan.configurations)
    assert sorted(c.id for g in groups for c in g) == sorted(c.id for c in plan.configurations)
    assert all(len({reference_key(c) for c in group}) == 1 for group in groups)
    assert len({reference_key(g[0]) for g in groups}) == len(groups) == 8
    assert groups[0][0].n_timesteps == 16 and groups[0][0].method == "rk4" and groups[-1][0].n_timesteps == 4


@pytest.mark.unit
def test_a_groups_estimate_counts_its_reference_unless_the_yardsticks_solve_it_and_two_processes_split_evenly():
    """The default otflow grid: native rk4 at the largest n_timesteps takes its reference from the fine reference's
    quarter density; every other group solves its own, counted as REFERENCE_RUNS configurations' work. Handed out
    costliest-first to two processes that each take the next group as they free up, the estimates split evenly."""
    plan = engine.plan(config.validate({"model": "otflow", "device": "cpu", "workers": 1}))
    shared = yardstick_reference(plan)
    assert shared == ("native", "rk4", max(plan.grid.timesteps))
    groups = reference_groups(plan.configurations, shared)
    costs = []
    for group in groups:
        first = group[0]
        solved_elsewhere = (first.library, first.method, first.n_timesteps) == shared
        runs = evaluations(group)
        expected = runs if solved_elsewhere else runs * (len(group) + REFERENCE_RUNS) // len(group)
        assert estimated_cost(group, solved_elsewhere) == expected
        costs.append(expected)
    assert costs == sorted(costs, reverse=True)
    loads = [0, 0]
    for cost in costs:
        loads[loads.index(min(loads))] += cost
    assert max(loads) <= 1.05 * sum(costs) / 2, loads


def test_a_worker_refuses_to_write_into_a_folder_that_holds_another_sweep(tmp_path):
    """Workers rebuild the sweep themselves; one that rebuilt something else (other weights here) must not mix in its
    shards."""
    request = config.validate(
        {
            "model": "linear",
            "timesteps": [2],
            "method": ["euler"],
            "library": ["native"],
            "dtype": ["float16"],
            "scaling": ["none"],
            "device": "cpu",
        }
    )
    engine.run(engine.plan(request), tmp_path / "sweep")
    Worker(WorkerSettings(request, str(tmp_path / "sweep"), "cpu", threads=None))  # the same sweep: accepted
    other = request.model_copy(update={"options": {"seed": 1}})
    with pytest.raises(SweepMismatch, match=r"differs from the one .* holds now \(in: model, problem_sha256\)"):
        Worker(WorkerSettings(other, str(tmp_path / "sweep"), "cpu", threads=None))


def test_the_fork_server_imports_what_a_run_needs_and_not_the_reports_drawing():
    """A worker is ready once the server has imported its preload: torch, the measuring stage and pandas, which pyarrow
    imports to make a shard's table (a worker's first shard would import it); not matplotlib, which only the report's
    figure process needs."""
    loaded = imported_heavy("import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in PRELOAD))
    assert sorted(loaded) == ["pandas", "pyarrow", "torch"]
    shard = "import pyarrow as pa\npa.Table.from_pylist([{'a': 1.0}], schema=pa.schema([('a', pa.float64())]))"
    assert "pandas" in imported_heavy(shard)


@pytest.mark.slow  # a two-worker sweep from the command line: 15-60 s on 2 busy cores
def test_workers_run_the_package_the_sweep_imported_not_a_copy_in_the_folder_it_started_in(tmp_path):
    """An older clone in the working directory: multiprocessing's fork server (`python -c`) would put it first on the
    path and every worker would run it. The decoy is a full copy that marks each process importing it."""
    command = Path(sys.executable).with_name("roundoff")
    if not command.exists():
        pytest.skip(f"the console script {command} is not installed (the working directory must not be on the path)")
    installed = Path(roundoff_analyzer.__file__).parent
    shutil.copytree(installed, tmp_path / "roundoff_analyzer", ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "decoy-imported"
    with (tmp_path / "roundoff_analyzer" / "__init__.py").open("a") as init:
        init.write(f"\nimport os\nwith open({str(marker)!r}, 'a') as mark:\n    mark.write(f'{{os.getpid()}}\\n')\n")
    grid = ["--model", "linear", "--timesteps", "4", "--method", "euler,rk4", "--library", "native,torchdiffeq"]
    options = ["--dtype", "float16", "--scaling", "none", "--noise-batches", "0", "--device", "cpu", "--no-report"]
    out = tmp_path / "sweep"
    done = subprocess.run(
        [str(command), "sweep", *grid, *options, "--workers", "2", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "this process and 1 worker process(es)" in done.stdout
    assert "worker" not in done.stderr, done.stderr  # none refused, failed or died
    assert not marker.exists(), f"processes {marker.read_text().split()} ran the copy in the working directory"
    assert len(results(out)) == 4


@pytest.mark.unit
def test_a_worker_tells_another_copy_of_the_package_from_the_sweeps():
    folder, digest = IDENTITY
    assert differs(IDENTITY) is None
    assert differs(("/elsewhere/roundoff_analyzer", digest)) == (
        f"it imported roundoff_analyzer from {folder}, where the sweep's process imported it from "
        "/elsewhere/roundoff_analyzer"
    )
    changed = differs((folder, "0" * 32))
    assert changed is not None and "the files changed since" in changed and "the sweep's 000000000000" in changed


def test_workers_share_the_sweeps_device():
    assert worker_devices(torch.device("cpu"), 3) == ["cpu", "cpu", "cpu"]


def test_workers_sharing_a_gpu_are_warned_of_its_memory_and_time():
    """Measured on one H100: four workers on the seed grid's GPU ran 12 float64 references out of memory that one
    process runs (docs/performance.md)."""
    warning = shared_gpu_warning(torch.device("cuda:0"), 4)
    assert warning is not None and warning.startswith("4 worker processes share one GPU")
    assert "--workers 1" in warning
    assert shared_gpu_warning(torch.device("cuda:0"), 1) is None and shared_gpu_warning(torch.device("cpu"), 4) is None


@pytest.mark.cuda
@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs at least 2 visible CUDA devices to see workers spread over them"
)
def test_workers_spread_over_the_visible_gpus(tmp_path):
    n_gpus = torch.cuda.device_count()
    assert worker_devices(torch.device("cuda"), 2 * n_gpus) == [f"cuda:{i % n_gpus}" for i in range(2 * n_gpus)]
    assert worker_devices(torch.device("cuda:1"), 2) == ["cuda:1", "cuda:1"]  # a GPU named explicitly is kept
    request = tiny_otflow_request(workers=n_gpus, device="cuda")
    outcome = engine.run(engine.plan(request), tmp_path / "gpus")
    assert len(outcome.results) == 28 and set(outcome.results.status) <= {"ok", "failed"}


def test_bsds300_config_file_holds_its_84_configuration_gpu_grid():
    request = config.resolve(Path(__file__).resolve().parent.parent / "configs" / "otflow_bsds300.toml", {})
    assert request.device == "cuda" and request.data is None  # synthetic unless a BSDS300 file is named
    assert dict(request.options, alpha=list(request.options["alpha"])) == {
        "d": 63,
        "hidden": 1024,
        "n_layers": 2,
        "alpha": [1, 2000, 800],
        "batch": 256,
        "seed": 0,
    }
    plan = engine.plan(request.model_copy(update={"device": "cpu"}))  # the same grid, built where this test runs
    assert len(plan.configurations) == 6 * 2 * 7 == 84


@pytest.mark.cuda
def test_on_cuda_memory_comes_from_the_allocator_and_workers_match_a_sequential_run(tmp_path):
    sequential = engine.run(engine.plan(tiny_otflow_request(device="cuda")), tmp_path / "one").results
    parallel = engine.run(engine.plan(tiny_otflow_request(device="cuda", workers=2)), tmp_path / "two").results
    ran = sequential[sequential.status == "ok"]
    assert len(ran) and ran.peak_memory_bytes.notna().all() and (ran.peak_memory_bytes > 0).all()
    assert (ran.time_forward_s > 0).all() and (ran.time_backward_s > 0).all()
    assert parallel[list(CONFIG_COLUMNS) + ["status"]].equals(sequential[list(CONFIG_COLUMNS) + ["status"]])
    # The noise's batches are split between the processes, each reading the others' from the folder onto the GPU.
    assert parallel.grad_noise_rel.notna().all()
    assert parallel.grad_noise_rel.to_numpy() == pytest.approx(sequential.grad_noise_rel.to_numpy(), rel=1e-9)


# --- stopping: Ctrl-C, and a worker that dies -----------------------------------------------------------


def start_slow_sweep(out: Path) -> subprocess.Popen:
    # A session of its own, so that a signal can go to the whole process group, as a terminal's Ctrl-C does.
    command = [sys.executable, "-m", "roundoff_cli", "sweep", *SLOW_GRID, "--workers", "2", "--out", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def resume(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "roundoff_cli", "sweep", *SLOW_GRID, "--workers", "2", "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def child_pids(parent: int) -> list[tuple[int, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append((int(entry.name), (entry / "cmdline").read_bytes()))
        except (OSError, IndexError, ValueError):
            continue
    return found


def worker_pids(parent: int) -> list[int]:
    """The workers of `parent`: children of its fork server (or, where workers are spawned, its children running
    multiprocessing's spawn_main), not its resource tracker."""
    found = []
    for pid, cmdline in child_pids(parent):
        if b"spawn_main" in cmdline:
            found.append(pid)
        elif b"forkserver" in cmdline:
            found.extend(worker for worker, _ in child_pids(pid))
    return found


@pytest.mark.slow  # real Ctrl-C to a two-worker sweep, twice over: 1-3 minutes on 2 cores
@pytest.mark.parametrize("presses", [1, 2], ids=["ctrl-c once", "ctrl-c twice"])
def test_ctrl_c_with_workers_keeps_whole_shards_and_resumes(tmp_path, presses):
    out = tmp_path / "interrupted"
    process = start_slow_sweep(out)
    wait_for_first_shard(process, out)
    workers = worker_pids(process.pid)
    for _ in range(presses):
        os.killpg(process.pid, signal.SIGINT)  # the whole group: workers must leave Ctrl-C to the main process
        time.sleep(0.3)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    n_done = len(shards(out))
    assert 1 <= n_done < N_SLOW, "the interrupt should land in the middle of the sweep"
    assert f"interrupted: {n_done} of {N_SLOW} configurations are done" in stderr
    assert len(results(out)) == n_done  # results.parquet rebuilt from the shards
    assert workers and not any(Path(f"/proc/{pid}").exists() for pid in workers), "workers outlived the sweep"

    resumed = resume(out)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {n_done} of {N_SLOW} configurations are already on disk" in resumed.stdout
    assert len(results(out)) == N_SLOW and not results(out).duplicated(list(CONFIG_COLUMNS)).any()


@pytest.mark.slow  # a worker killed mid-sweep, then the sweep resumed: about a minute
def test_a_worker_that_dies_costs_its_group_only_and_the_sweep_says_so(tmp_path):
    out = tmp_path / "died"
    process = start_slow_sweep(out)
    wait_for_first_shard(process, out)
    workers = worker_pids(process.pid)
    assert len(workers) == 1  # --workers 2: this process and one worker
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=120)

    assert process.returncode == 1, stderr
    assert "worker" in stderr and "died" in stderr and "(exit code -9)" in stderr
    n_done = len(shards(out))
    assert f"{n_done} of {N_SLOW} configurations are done" in stderr and "run the same command again" in stderr
    assert n_done < N_SLOW
    resumed = resume(out)
    assert resumed.returncode == 0, resumed.stderr
    assert len(results(out)) == N_SLOW
