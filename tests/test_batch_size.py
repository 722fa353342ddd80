"""The batch size said beside every ratio to the gradient noise comes from the batch's structure: the first dimension
of the state the step's solve carries, which a tensor of the batch shares (never a time axis: torchdiffeq's ode_demo
hands its step y0 of 20 trajectories, t of 10 times and the true states 10 × 20 × 1 × 2), or the Problem's own
`batch_size`; manifest.json and the report say where it was read."""

from __future__ import annotations

from pathlib import Path

import torch

import roundoff_analyzer as ra
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.measuring.contract import check_contract

from .fixtures import ode_demo
from .test_step_problems import _seeded

FIXTURE = Path(__file__).parent / "fixtures" / "ode_demo.py"


WHERE = "the first dimension of the solve's state (20, 1, 2), which `batch[0]` of shape (20, 1, 2) shares"


def test_ode_demos_batch_is_read_as_its_20_trajectories():
    shape = _shape(_seeded(lambda: ode_demo.ode_demo(data_size=200)))
    assert (shape.batch_size, shape.batch_size_from) == (20, WHERE)


def test_ode_demos_gradient_noise_is_said_at_batch_20_and_where_that_was_read(tmp_path):
    out = tmp_path / "demo"
    result = ra.sweep(
        model=f"{FIXTURE}:ode_demo",
        options={"data_size": 200},
        timesteps=[4],
        library="torchdiffeq",
        method="rk4",
        dtype="float16",
        scaling="none",
        noise_batches=2,
        out=out,
        progress=False,
    )
    assert (result.results["grad_noise_batch_size"] == 20).all()
    problem = result.manifest["problem"]
    assert (problem["batch_size"], problem["batch_size_from"]) == (20, WHERE)
    report = (out / "report.md").read_text()
    assert f"at batch 20 ({WHERE}): the relative spread" in report
    assert "at batch 10" not in report


def _shape(problem: ra.Problem):
    return check_contract("a step", ProblemCopies(problem))


def test_the_problems_own_batch_size_is_taken_as_given():
    problem = _seeded(lambda: ode_demo.ode_demo(data_size=200))
    problem.batch_size = 7
    shape = _shape(problem)
    assert (shape.batch_size, shape.batch_size_from) == (7, "the Problem's batch_size")


def test_a_state_of_one_dimension_is_one_trajectory():
    def step(model, batch, odeint):
        y0, targets = batch
        return (odeint(lambda t, y: model(y), y0, torch.linspace(0, 1, 5)) - targets).square().mean()

    problem = ra.Problem(
        model=torch.nn.Linear(2, 2), step=step, sample_batch=lambda k: (torch.ones(2), torch.zeros(5, 2))
    )
    shape = _shape(problem)
    assert (shape.batch_size, shape.batch_size_from) == (1, "the solve's state (2,) is one trajectory")
