"""Torch threads chosen from the problem's size: one for small problems, more where a matmul is large;
`--threads` overrides; the manifest records the choice, and the numbers do not depend on it."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest
import torch

from roundoff_analyzer.axes.models import parse_options, resolve_model
from roundoff_analyzer.core.threads import PARALLEL_MATMUL_MACS, available_cores, choose_threads, largest_matmul_macs
from roundoff_analyzer.execution import engine
from roundoff_analyzer.planning import config
from roundoff_analyzer.storage.results import ResultStore

from .conftest import TINY_OTFLOW, results, run_cli


def otflow_problem(**options):
    model = resolve_model("otflow")
    return model.build(parse_options(model, options), torch.device("cpu"))


def field_at_zero(problem):
    """One evaluation of the vector field at (0, y0)."""
    return lambda: problem.func(torch.zeros(()), problem.y0)


def test_the_largest_matmul_is_counted_from_one_evaluation():
    problem = otflow_problem(d=4, hidden=16, batch=8)
    # The trace's K_1 J_0 multiplies (16 x 16) by the Jacobian as one (16 x d * batch) matrix, as the authors' code
    # does: the largest product at this size.
    macs = largest_matmul_macs(field_at_zero(problem))
    assert macs == 16 * 16 * (4 * 8)


def test_small_problems_get_one_thread_large_ones_the_cores_of_their_share():
    small, large = otflow_problem(), otflow_problem(hidden=512, batch=512)
    cpu = torch.device("cpu")
    assert choose_threads(field_at_zero(small), cpu, None).threads == 1
    assert largest_matmul_macs(field_at_zero(large)) >= PARALLEL_MATMUL_MACS
    assert choose_threads(field_at_zero(large), cpu, None).threads == available_cores()
    assert choose_threads(field_at_zero(large), cpu, None, processes=available_cores()).threads == 1
    assert choose_threads(field_at_zero(small), cpu, 3) == choose_threads(field_at_zero(large), cpu, 3)
    assert choose_threads(field_at_zero(small), cpu, 3).threads == 3


def sweep_with_threads(request: dict, threads: int, out) -> tuple[pd.DataFrame, dict]:
    engine.run(engine.plan(config.validate({**request, "threads": threads})), out)
    table = results(out)
    cost = [c for c in table.columns if c.startswith("time_") or c == "peak_memory_bytes"]
    return table.drop(columns=cost), ResultStore(out).read_manifest()


@pytest.mark.slow  # two sweeps, one with two torch threads: 3 s on quiet cores, 30 s with the other core busy
def test_on_a_small_problem_threads_change_nothing_and_are_not_in_the_fingerprint(tmp_path):
    request = {
        "model": "otflow",
        "options": {"d": "3", "hidden": "8", "batch": "16"},
        "timesteps": [4],
        "method": ["rk4"],
        "library": ["native"],
        "dtype": ["float16", "bfloat16"],
        "scaling": ["none", "dynamic"],
        "device": "cpu",
    }
    (one, one_manifest), (two, two_manifest) = (sweep_with_threads(request, n, tmp_path / str(n)) for n in (1, 2))
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    assert [one_manifest["execution"]["threads"], two_manifest["execution"]["threads"]] == [1, 2]
    assert one_manifest["fingerprint"] == two_manifest["fingerprint"]


@pytest.mark.slow  # a problem large enough for two threads: 15-30 s
def test_on_a_large_problem_threads_move_only_the_float32_loss_reduction(tmp_path):
    """Above the threshold torch splits the work: the matmuls still give the same bits here, but the loss's
    float32 mean over the trajectory's 5 x 512 x 256 entries is summed in another order. Measured, its relative
    error moved by 1.5e-5 of itself on an AVX512 CPU and by 3.9e-4 of itself (1.3 float32 roundings of the loss)
    on an AVX2 one: the move is a few roundings of the loss, not a fraction of the error."""
    request = {
        "model": "linear",
        "options": {"d": "256", "batch": "512"},
        "timesteps": [4],
        "method": ["euler"],
        "library": ["native", "torchdiffeq"],
        "dtype": ["bfloat16", "float16"],
        "scaling": ["none"],
        "device": "cpu",
    }
    problem = engine.plan(config.validate(request)).problem
    assert largest_matmul_macs(field_at_zero(problem)) >= PARALLEL_MATMUL_MACS
    (one, _), (two, _) = (sweep_with_threads(request, n, tmp_path / str(n)) for n in (1, 2))
    loss = [c for c in one.columns if c.startswith("loss_rel_err")]
    pd.testing.assert_frame_equal(one.drop(columns=loss), two.drop(columns=loss), check_exact=True)
    # Reordering a float32 sum of n positive terms (squares) moves it by about log2(n) roundings at most.
    n_terms = 5 * 512 * 256
    moved = (one.loss_rel_err - two.loss_rel_err).abs()
    assert one.loss_rel_err.notna().any() and float(moved.max()) <= math.log2(n_terms) * 2.0**-24


def test_threads_on_the_command_line_reach_the_manifest_and_leave_torch_as_it_was(tmp_path):
    before = torch.get_num_threads()
    out = tmp_path / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
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
        "--threads",
        "2",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    execution = ResultStore(out).read_manifest()["execution"]
    assert {key: execution[key] for key in ("executor", "threads", "threads_reason")} == {
        "executor": "local",
        "threads": 2,
        "threads_reason": "--threads",
    }
    assert torch.get_num_threads() == before
    bad = run_cli("sweep", "--model", "otflow", "--threads", "0", "--out", tmp_path / "bad")
    assert bad.exit_code == 2 and "threads" in bad.output


def test_choosing_costs_no_torch_dynamo_import():
    """Counting matmuls with a dispatch mode would import torch._dynamo: seconds in every worker that starts (a worker
    plans with checked=True: the memory bound, built on the meta device, was computed by the sweep's own process)."""
    code = (
        "import sys, torch; from roundoff_analyzer.planning import config; from roundoff_analyzer.execution import "
        "engine; engine.plan(config.validate({'model': 'otflow', 'device': 'cpu'}), checked=True); "
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
