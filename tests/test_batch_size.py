"""The batch size said beside every ratio to the gradient noise is the minibatch's: the leading dimension of what
sample_batch returns, told apart from a time axis by the solve's state (torchdiffeq's ode_demo hands its step y0 of 20
trajectories, t of 10 times and the true states 10 × 20 × 1 × 2), never the state's first dimension (Rubanova's latent
ODE solves (z0 samples, batch, latent)), or the Problem's own `batch_size`; manifest.json and the report say where it
was read, or why it cannot be known."""

from __future__ import annotations

from pathlib import Path

import torch

import roundoff_analyzer as ra
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.measuring.contract import check_contract

from .fixtures import ode_demo, public_patterns
from .test_step_problems import _seeded

FIXTURE = Path(__file__).parent / "fixtures" / "ode_demo.py"
PATTERNS = Path(__file__).parent / "fixtures" / "public_patterns.py"


WHERE = (
    "the leading dimension of `batch[0]` of shape (20, 1, 2): of the batch's leading dimensions (20, 10), the one the "
    "state (20, 1, 2) of the step's first solve holds"
)


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


def test_a_state_of_samples_batch_and_dimension_is_read_at_the_minibatchs_size_not_the_samples():
    shape = _shape(_seeded(lambda: public_patterns.sampled_z0(series=5, times=7, samples=1)))
    assert shape.batch_size == 5
    assert shape.batch_size_from == (
        "the leading dimension of `batch[0]` of shape (5, 7, 2): of the batch's leading dimensions (5, 7), the one the "
        "state (1, 5, 3) of the step's first solve holds"
    )


def test_a_batch_whose_leading_sizes_the_state_cannot_tell_apart_has_no_batch_size_and_says_why():
    shape = _shape(_seeded(lambda: public_patterns.sampled_z0(series=3, times=3 + 4, samples=7)))
    assert shape.batch_size is None
    assert shape.batch_size_from == (
        "the batch's tensors lead with 2 sizes (3, 7) and the state (7, 3, 3) of the step's first solve holds 2 of "
        "them (3, 7); give the Problem its batch_size"
    )


def test_a_latent_odes_gradient_noise_is_said_at_its_minibatchs_size(tmp_path):
    out = tmp_path / "latent"
    result = ra.sweep(
        model=f"{PATTERNS}:sampled_z0",
        options={"series": 5, "times": 7, "samples": 1},
        timesteps=[4],
        library="torchdiffeq",
        method="rk4",
        dtype="float16",
        scaling="none",
        noise_batches=2,
        out=out,
        progress=False,
    )
    assert (result.results["grad_noise_batch_size"] == 5).all()
    report = (out / "report.md").read_text()
    assert "at batch 5 (the leading dimension of `batch[0]` of shape (5, 7, 2)" in report
    assert "at batch 1" not in report
