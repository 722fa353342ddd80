"""Runs that differ in their scaling only share their forward pass, and a loss scale's probe that overflows stops at its
first non-finite step: the rows are those of each run made alone, bit for bit."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

import roundoff_analyzer as ra
from roundoff_analyzer.axes.grid import Configuration
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.models import parse_options, resolve_model
from roundoff_analyzer.axes.modes import MODES, ProblemCopies
from roundoff_analyzer.axes.scalings import SCALINGS, ScalerSettings
from roundoff_analyzer.measuring.measure import forward_families
from roundoff_analyzer.measuring.one_run import RunOutcome, run_once, runs_sharing_forward
from roundoff_analyzer.measuring.run_spec import RunSpec
from roundoff_analyzer.solvers import SolveReport
from roundoff_analyzer.solvers.overflow_stop import BackwardOverflow, stopping_at_overflow, whole_passes


@pytest.fixture(scope="module")
def copies() -> ProblemCopies:
    model = resolve_model("otflow")
    return ProblemCopies(model.build(parse_options(model, {"d": 3, "hidden": 8, "batch": 16}), torch.device("cpu")))


def _prepared(copies):
    return MODES.get("autocast").prepare(copies, torch.float16)


def _same(shared: RunOutcome, alone: RunOutcome) -> None:
    assert (shared.failure is None) == (alone.failure is None)
    assert (shared.final_scale, shared.retries) == (alone.final_scale, alone.retries)
    assert torch.equal(shared.trajectory, alone.trajectory) and torch.equal(shared.loss, alone.loss)
    assert len(shared.grads) == len(alone.grads)
    assert all(torch.equal(a, b) for a, b in zip(shared.grads, alone.grads))
    # repr: NaN equals NaN
    assert repr(shared.report.backward) == repr(alone.report.backward)
    assert shared.report.forward_max_abs == alone.report.forward_max_abs
    assert shared.report.n_function_evals == alone.report.n_function_evals


@pytest.mark.parametrize(
    "library, scalings",
    [("native", ["grad", "none", "dynamic"]), ("native", ["dynamic", "grad"]), ("torchdiffeq", ["grad", "none"])],
)
def test_one_forward_gives_each_scaling_what_its_own_run_gives(copies, library, scalings):
    settings = ScalerSettings()
    solver, method = LIBRARIES.get(library), METHODS.get("rk4")
    backwards = [(SCALINGS.get(name), None) for name in scalings]
    shared = runs_sharing_forward(RunSpec(_prepared(copies), copies, solver, method, 8), backwards, settings)
    for name, outcome in zip(scalings, shared, strict=True):
        alone = run_once(RunSpec(_prepared(copies), copies, solver, method, 8), SCALINGS.get(name), settings)
        _same(outcome, alone)
    by_name = dict(zip(scalings, shared, strict=True))
    assert by_name["grad"].retries > 0  # the search backed off: its probes overflowed and were cut short
    if "dynamic" in by_name:
        assert by_name["dynamic"].final_scale is not None and by_name["dynamic"].final_scale > 1


class Tanh(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, t, y):
        return torch.tanh(self.linear(y))


@pytest.mark.parametrize("library", ["native", "torchdiffeq"])
def test_a_probe_stops_at_its_first_non_finite_step_and_a_whole_pass_does_not(library):
    torch.manual_seed(0)
    func, y0 = Tanh(), torch.randn(8, 4, requires_grad=True)
    grid = torch.linspace(0, 1, 9)

    def backward_records(*contexts) -> tuple[list, bool]:
        report = SolveReport()
        with torch.autocast("cpu", dtype=torch.float16):
            states = LIBRARIES.get(library).solve(func, y0, grid, METHODS.get("euler"), None, report)
        loss = 1e30 * states[-1].float().sum()  # enters the float16 adjoint as inf at the first backward step
        stopped = False
        try:
            with contexts[0] if contexts else stopping_at_overflow():
                loss.backward()
        except BackwardOverflow as overflow:
            stopped = overflow.step == 0
        return report.backward, stopped

    probe, stopped = backward_records()
    assert stopped and len(probe) == 1 and not probe[0].finite
    whole, stopped = backward_records(_both(stopping_at_overflow(), whole_passes()))
    assert not stopped and len(whole) == 8 and not any(record.finite for record in whole)
    assert math.isinf(whole[0].max_abs_low_adjoint) or math.isnan(whole[0].max_abs_low_adjoint)


class _both:
    """Two context managers entered as one (the second inside the first)."""

    def __init__(self, outer, inner) -> None:
        self.outer, self.inner = outer, inner

    def __enter__(self):
        self.outer.__enter__()
        self.inner.__enter__()

    def __exit__(self, *exc):
        self.inner.__exit__(*exc)
        return self.outer.__exit__(*exc)


def _config(**axes) -> Configuration:
    base = dict(model="otflow", library="native", method="rk4", n_timesteps=8, dtype="float16", mode="autocast")
    return Configuration(**{**base, "scaling": "none", **axes})


def test_families_join_what_differs_in_the_scaling_only():
    configs = [
        _config(scaling="none"),
        _config(scaling="grad"),
        _config(scaling="none", dtype="bfloat16"),
        _config(scaling="dynamic"),
        _config(scaling="none", arithmetic="emulated"),
        _config(scaling="grad", arithmetic="emulated"),
    ]
    families = forward_families(configs, None)
    assert families == [[configs[0], configs[1], configs[3]], [configs[2]], [configs[4]], [configs[5]]]
    # A time limit is each configuration's own: under one, every configuration runs alone.
    assert forward_families(configs, 60.0) == [[c] for c in configs]


def test_a_sweep_gives_the_rows_of_configurations_measured_alone(tmp_path):
    """Under a time limit each configuration runs alone, forward included; without one its family shares it."""
    grid = dict(
        model="otflow",
        options={"d": 3, "hidden": 8, "batch": 16},
        timesteps=[4, 16],
        library=["native", "torchdiffeq"],
        method=["rk4"],
        dtype=["float16", "bfloat16"],
        scaling=["none", "grad", "dynamic"],
        noise_batches=2,
        workers=1,
        report=False,
        progress=False,
    )
    shared = ra.sweep(out=tmp_path / "shared", **grid).results
    alone = ra.sweep(out=tmp_path / "alone", timeout=600, **grid).results
    keys = ["library", "n_timesteps", "dtype", "scaling"]
    shared, alone = (t.sort_values(keys).reset_index(drop=True) for t in (shared, alone))
    compared = [c for c in shared.columns if not c.startswith("time_") and c not in ("timeout_s", "peak_memory_bytes")]
    assert (shared.status == "ok").sum() == 20 and (shared.final_scale > 1).any()
    pd.testing.assert_frame_equal(shared[compared], alone[compared])
