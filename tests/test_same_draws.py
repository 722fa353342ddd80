"""A step that draws random numbers is measured on one draw: the float64 reference and every run of a repeat are given
the same numbers (roundoff_analyzer/measuring/draws.py). Each pattern's row is checked against a float16 run and a
float64 run of its step written here with torchdiffeq alone, both given one draw made here: the sweep's draw 0, each
random tensor from the generator draws.py defines for it, drawn in float64 and cast as each run asks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import roundoff_analyzer as ra
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.measuring.draws import (
    DRAW_SEED,
    DrawMismatch,
    draw_generator,
    draws_anew,
    same_draws,
    short_run,
)

from .conftest import run_cli
from .fixtures import drawing_steps
from .test_step_problems import _seeded, flat, rel_err, torchdiffeq_step_run

FIXTURE = Path(__file__).parent / "fixtures" / "drawing_steps.py"
N = 4


def sweep(factory: str, out: Path, options: dict | None = None, **settings) -> ra.SweepResult:
    grid = {"timesteps": [N], "method": "rk4", "library": "torchdiffeq", "dtype": "float16", "scaling": "none"}
    return ra.sweep(
        model=f"{FIXTURE}:{factory}",
        options=options or {},
        out=out,
        progress=False,
        **(grid | {"noise_batches": 0, "report": False} | settings),
    )


class Draw:
    """Draw `draw` as one run sees it: `generator()` gives the generator of its next random tensor."""

    def __init__(self, draw: int) -> None:
        self.draw, self.made = draw, 0

    def generator(self) -> torch.Generator:
        self.made += 1
        return draw_generator(self.draw, self.made - 1)


def same_draw_errors(problem: ra.Problem, step, draw: int = 0) -> dict[str, float]:
    """The errors of a float16 run against a float64 run of `step(model, batch, odeint, draws)`, each run handed draw
    `draw` afresh, from which the step makes its random tensors in the order the user's step makes them."""

    def with_draw(model, batch, odeint):
        return step(model, batch, odeint, Draw(draw))

    same = ra.Problem(model=problem.model, step=with_draw, sample_batch=problem.sample_batch)
    low, high = torchdiffeq_step_run(same, N, torch.float16), torchdiffeq_step_run(same, N, None)
    return {
        "final_rel_err": rel_err(low[0][-1], high[0][-1]),
        "grad_params_rel_err": rel_err(flat(low[2].values()), flat(high[2].values())),
    }


def assert_row_is(row, expected: dict[str, float]) -> None:
    assert row["status"] == "ok", row["failure_message"]
    for column, value in expected.items():
        assert row[column] == pytest.approx(value, rel=1e-6), column


def epsilon_step(source: str):
    """The held-out step with ε drawn from `generator` as torch's randn_like draws it in the sweep (float64, cast to
    std's dtype), or as numpy's global generator seeded for the draw gives it."""

    def step(model, x, odeint, draws):
        def epsilon(std):
            if source == "numpy":
                seeded = np.random.RandomState(DRAW_SEED + draws.draw)
                return torch.from_numpy(seeded.standard_normal(tuple(std.shape))).to(std)
            return torch.randn(std.shape, generator=draws.generator(), dtype=torch.float64).to(std.dtype)

        return drawing_steps.reparameterised(model, x, odeint, epsilon)

    return step


@pytest.mark.parametrize("source", ["torch", "numpy"])
def test_the_held_out_epsilon_inside_the_step_is_measured_on_the_draw_of_its_reference(tmp_path, source):
    result = sweep("held_out", tmp_path / "vae", {"source": source})
    problem = _seeded(lambda: drawing_steps.held_out(source=source))
    assert_row_is(result.results.iloc[0], same_draw_errors(problem, epsilon_step(source)))


@pytest.mark.parametrize("noise", ["gaussian", "rademacher"])
def test_a_hutchinson_trace_is_measured_on_the_noise_of_its_reference(tmp_path, noise):
    result = sweep("hutchinson", tmp_path / noise, {"noise": noise})

    def step(model, x, odeint, draws):
        if noise == "gaussian":
            model.e = torch.randn(x.shape, generator=draws.generator(), dtype=torch.float64).to(x.dtype)
        else:
            model.e = torch.randint(0, 2, x.shape, generator=draws.generator()).to(x) * 2 - 1
        return drawing_steps.hutchinson_loss(model, x, odeint)

    problem = _seeded(lambda: drawing_steps.hutchinson(noise=noise))
    assert_row_is(result.results.iloc[0], same_draw_errors(problem, step))


def dropout_step(model, y0, odeint, draws):
    """The dropout field with each evaluation's mask drawn here: kept where a float64 uniform falls below 1 - p."""
    inner, activation, dropout, outer = model.net

    def field(t, y):
        hidden = activation(inner(y))
        keep = torch.rand(hidden.shape, generator=draws.generator(), dtype=torch.float64) < 1 - dropout.p
        return outer(hidden * (keep.to(hidden.dtype) / (1 - dropout.p)))

    return odeint(field, y0, torch.tensor([0.0, 1.0]))[-1].square().mean()


def test_dropout_in_training_mode_is_measured_with_the_masks_of_its_reference(tmp_path):
    result = sweep("dropout", tmp_path / "dropout")
    problem = _seeded(drawing_steps.dropout)
    assert_row_is(result.results.iloc[0], same_draw_errors(problem, dropout_step))
    # Every evaluation drew a mask: the manifest counts one draw per evaluation of the check (one Euler step).
    assert result.manifest["problem"]["draws"]["functions"] == {"bernoulli_": 1}


def test_repeats_draw_anew_each_against_the_reference_of_its_draw(tmp_path):
    result = sweep("held_out", tmp_path / "repeats", repeats=2)
    row = result.results.iloc[0]
    problem = _seeded(drawing_steps.held_out)
    errors = [same_draw_errors(problem, epsilon_step("torch"), draw)["grad_params_rel_err"] for draw in (0, 1)]
    assert errors[0] != errors[1]
    assert row["n_repeats"] == 2
    assert row["grad_params_rel_err"] == pytest.approx(sum(errors) / 2, rel=1e-6)
    assert row["grad_params_rel_err_spread"] == pytest.approx(abs(errors[0] - errors[1]), rel=1e-5)


def test_stochastic_rounding_draws_apart_from_the_steps_draws(tmp_path):
    emulated = {"dtype": "bfloat16", "arithmetic": "emulated", "rounding": "stochastic"}
    result = sweep("held_out", tmp_path / "sr", repeats=2, **emulated)
    row = result.results.iloc[0]
    assert row["status"] == "ok", row["failure_message"]
    # Both repeats ran on draw 0: their spread is the rounding's, a few units of bfloat16's roundoff at most.
    assert 0 < row["grad_params_rel_err"] < 20 * row["unit_roundoff"]


def test_the_report_and_manifest_say_the_draws_were_replayed_and_how_many(tmp_path):
    out = tmp_path / "report"
    sweep("held_out", out, {"batch": 16}, report=True, repeats=2)
    manifest = json.loads((out / "manifest.json").read_text())
    draws = manifest["problem"]["draws"]
    assert draws == {"functions": {"randn_like": 1}, "tensors": 1, "numbers": 32, "numpy": False, "python": False}
    # In the fingerprint: a folder measured before the runs were given the same draws is another sweep's.
    assert manifest["fingerprint"]["draws"] == draws
    report = (out / "report.md").read_text()
    assert "**Random draws**: the step draws random numbers (torch's randn_like ×1: 32 numbers" in report
    assert "Every run was given the draws of its float64 reference" in report
    assert "each repeat drew anew" in report


def test_a_step_that_draws_nothing_says_nothing_of_draws(tmp_path):
    out = tmp_path / "plain"
    result = ra.sweep(model="linear", timesteps=[4], dtype="float16", scaling="none", noise_batches=0, out=out)
    assert result.manifest["problem"]["draws"] is None and result.manifest["fingerprint"]["draws"] is None
    assert "Random draws" not in (out / "report.md").read_text()


def test_a_step_with_a_generator_of_its_own_is_refused_in_one_line(tmp_path):
    out = tmp_path / "own"
    result = run_cli("sweep", "--model", f"{FIXTURE}:own_generator", "--timesteps", "4", "--out", out)
    assert result.exit_code == 2
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    assert "another loss when evaluated again in float64 on the same random draws" in message
    assert "a random generator of its own" in message
    assert not out.exists()


def _copies() -> ProblemCopies:
    return ProblemCopies(_seeded(drawing_steps.held_out))


def test_a_run_that_draws_otherwise_than_the_first_fails_naming_the_draw():
    copies = _copies()
    with same_draws(copies, 0, "solve") as first:
        torch.randn(3, dtype=torch.float64)
        first.complete = True
    other = r"random draw 1 in the forward of the run is randn \(normal of shape \(4,\)\)"
    with pytest.raises(DrawMismatch, match=other), same_draws(copies, 0, "solve"):
        torch.randn(4)
    more = "draws more random tensors than the first complete run of its solve"
    with pytest.raises(DrawMismatch, match=more), same_draws(copies, 0, "solve"):
        torch.randn(3)
        torch.rand(2)


def test_the_same_draw_reaches_every_dtype_and_a_new_draw_differs():
    copies, drawn = _copies(), {}
    for dtype in (torch.float64, torch.float16, torch.float32):
        with same_draws(copies, 0, "solve") as run:
            drawn[dtype] = torch.randn(64, dtype=dtype), torch.empty(64, dtype=dtype).bernoulli_(0.3)
            run.complete = True
    for dtype in (torch.float16, torch.float32):
        assert torch.equal(drawn[dtype][0], drawn[torch.float64][0].to(dtype))
        assert torch.equal(drawn[dtype][1], drawn[torch.float64][1].to(dtype))
    with same_draws(copies, 1, "solve"):
        assert not torch.equal(torch.randn(64, dtype=torch.float64), drawn[torch.float64][0])
    before = torch.random.get_rng_state()
    with same_draws(copies, 0, "solve"):
        torch.randn(64)
        torch.empty(64).bernoulli_(0.3)
    assert torch.equal(torch.random.get_rng_state(), before), "the step's draws moved torch's global generator"


def test_after_a_first_run_without_draws_a_draw_stops_the_sweep():
    copies = _copies()
    with same_draws(copies, 0, "solve") as run:
        run.complete = True
    late = "drew random numbers in a run after its first run in this process drew none"
    with pytest.raises(InputError, match=late), same_draws(copies, 0, "solve"):
        torch.randn(3)


@pytest.mark.parametrize("checkpoint", ["states", "auto"])
def test_a_solver_that_evaluates_the_field_again_in_its_backward_gives_every_pass_the_same_masks(
    tmp_path, monkeypatch, checkpoint
):
    # The native solver's low-memory backward ("states") evaluates the dropout field again, step by step; the default
    # ("auto", here its stored stages) differentiates the forward's own graph. The scalings share one forward, and the
    # loss scaler's search runs several backward passes: each pass draws as the reference's backward drew.
    monkeypatch.setattr(LIBRARIES.get("native"), "checkpoint", checkpoint)  # the run is in this process
    scalings = ["none", "grad", "dynamic"]
    result = sweep("dropout", tmp_path / "native", library="native", method="euler", scaling=scalings, executor="local")
    rows = result.results.set_index("scaling")
    assert (rows["status"] == "ok").all(), rows["failure_message"]
    u = rows["unit_roundoff"].iloc[0]
    # Another mask in any pass: an error of order one (0.04 with torchdiffeq before same draws); roundoff is of u's.
    assert (rows["grad_params_rel_err"] < 10 * u).all(), rows["grad_params_rel_err"]
    # The same masks: `grad`'s power-of-two scale changes only the low-precision adjoint's rounding, where the kept
    # stages' products see it (a relative difference of 1e-5 measured), nothing near another mask's.
    tolerance = 1e-6 if checkpoint == "states" else 1e-3
    assert rows.loc["grad", "grad_params_rel_err"] == pytest.approx(
        rows.loc["none", "grad_params_rel_err"], rel=tolerance
    )


class _DrawsInBackward(torch.autograd.Function):
    """Identity whose backward adds noise: a draw in a backward pass whose forward draws nothing."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad + torch.randn_like(grad)


def _short_run(copies: ProblemCopies, body) -> None:
    with short_run(copies) as drawn:
        assert drawn is not None
        body()
        drawn.complete = True


def test_a_short_run_that_drew_nothing_leaves_a_full_run_that_draws_to_be_replayed():
    # Draws that depend on the steps: the short run made none, the first full run's forward does, so its backward is
    # watched too, and a later run of its draw is given the same numbers in both passes.
    copies = _copies()
    _short_run(copies, lambda: None)
    x = torch.ones(5, dtype=torch.float64, requires_grad=True)
    grads, noise = [], []
    for dtype in (torch.float64, torch.float32):
        with same_draws(copies, 0, "solve") as run:
            y = x.to(dtype) * torch.randn(5, dtype=dtype)
            noise.append(y.detach().double())
            (grad,) = torch.autograd.grad(_DrawsInBackward.apply(y).sum(), x)
            grads.append(grad)
            run.complete = True
    assert torch.equal(noise[1], noise[0].float().double()), "the forward's draws differ between the runs"
    assert torch.allclose(grads[0], grads[1].double(), rtol=1e-5), "the backward's draws differ between the runs"
    assert draws_anew(copies)


def test_a_short_run_that_drew_decides_that_the_step_draws():
    copies = _copies()
    _short_run(copies, lambda: torch.randn(2))
    assert draws_anew(copies)
    with short_run(copies) as again:
        assert again is None, "decided: no second short run"


def test_a_backward_that_draws_where_the_short_run_and_its_forward_drew_nothing_stops_the_sweep():
    copies = _copies()
    _short_run(copies, lambda: None)
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(InputError, match="in a backward pass whose forward drew none"), same_draws(copies, 0, "solve"):
        _DrawsInBackward.apply(x * 2).sum().backward()


def test_a_short_run_that_failed_leaves_the_first_full_run_watched_whole():
    copies = _copies()
    with short_run(copies):
        pass  # not complete: it says nothing
    x = torch.ones(3, requires_grad=True)
    runs = []
    for _ in range(2):
        with same_draws(copies, 0, "solve") as run:
            _DrawsInBackward.apply(x * 2).sum().backward()
            run.complete = True
        runs.append(run)
    assert runs[0].functions == {"randn_like": 1} and draws_anew(copies)


def test_a_watched_run_does_not_import_dynamo():
    # torch would import torch._dynamo (about a second) at the first operation a dispatch mode sees; where it is not
    # loaded nothing can be compiling, so the replay answers without it.
    code = (
        "import sys, torch\n"
        "from types import SimpleNamespace\n"
        "from roundoff_analyzer.measuring.draws import same_draws\n"
        "copies = SimpleNamespace(draws=None)  # what same_draws keeps its findings in\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "with same_draws(copies, 0, 'solve') as run:\n"
        "    (x * torch.randn(3)).sum().backward()\n"
        "    run.complete = True\n"
        "assert run.functions, run\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
