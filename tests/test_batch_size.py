"""The batch size said beside every ratio to the gradient noise is the minibatch's: the leading dimension of what
sample_batch returns, told apart from a time axis by the solve's state (torchdiffeq's ode_demo hands its step y0 of 20
trajectories, t of 10 times and the true states 10 × 20 × 1 × 2), never the state's first dimension (Rubanova's latent
ODE solves (z0 samples, batch, latent)), or the Problem's own `batch_size`; manifest.json and the report say where it
was read, or why it cannot be known."""

from __future__ import annotations

from pathlib import Path

import pytest
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


LATENT_WHERE = (
    "the leading dimension of `batch[0]` of shape (5, 7, 2): of the batch's leading dimensions (5, 7), the one the "
    "state (1, 5, 3) of the step's first solve holds"
)


@pytest.mark.parametrize(
    ("model", "options", "size", "where", "not_said"),
    [
        (f"{FIXTURE}:ode_demo", {"data_size": 200}, 20, WHERE, 10),  # not its time axis
        (f"{PATTERNS}:sampled_z0", {"series": 5, "times": 7, "samples": 1}, 5, LATENT_WHERE, 1),  # not its z0 samples
    ],
    ids=["ode_demo", "latent ODE (samples, batch, latent)"],
)
def test_the_gradient_noise_is_said_at_the_minibatchs_size_and_where_that_was_read(
    tmp_path, model, options, size, where, not_said
):
    out = tmp_path / "sweep"
    result = ra.sweep(
        model=model,
        options=options,
        timesteps=[4],
        library="torchdiffeq",
        method="rk4",
        dtype="float16",
        scaling="none",
        noise_batches=2,
        out=out,
        progress=False,
    )
    assert (result.results["grad_noise_batch_size"] == size).all()
    problem = result.manifest["problem"]
    assert (problem["batch_size"], problem["batch_size_from"]) == (size, where)
    report = (out / "report.md").read_text()
    assert f"at batch {size} ({where}): the relative spread" in report
    assert f"at batch {not_said} " not in report


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


@pytest.mark.unit
def test_a_state_of_samples_batch_and_dimension_is_read_at_the_minibatchs_size_not_the_samples():
    shape = _shape(_seeded(lambda: public_patterns.sampled_z0(series=5, times=7, samples=1)))
    assert (shape.batch_size, shape.batch_size_from) == (5, LATENT_WHERE)


@pytest.mark.unit
def test_a_batch_whose_leading_sizes_the_state_cannot_tell_apart_has_no_batch_size_and_says_why():
    shape = _shape(_seeded(lambda: public_patterns.sampled_z0(series=3, times=3 + 4, samples=7)))
    assert shape.batch_size is None
    assert shape.batch_size_from == (
        "the batch's tensors lead with 2 sizes (3, 7) and the state (7, 3, 3) of the step's first solve holds 2 of "
        "them (3, 7); give the Problem its batch_size"
    )
