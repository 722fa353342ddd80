"""The watch in a user's own training loop (roundoff_analyzer.watch): a float16 training whose weights grow until its
loss turns non-finite is warned about iterations before; the watched training is bit-identical to the unwatched one;
the folder renders; raise_on raises; a bad argument is one line; the overflow margin is every operation's, backward
included; a step that draws is given the same numbers in its run and its reference."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torchdiffeq import odeint as torchdiffeq_odeint

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.training.watch import OVERFLOW_MARGIN

# Each iteration multiplies every weight by this: the field's values grow by about its square, until float16 overflows.
GROWTH = 1.25
ITERATIONS = 40
EVERY = 2
LR = 1e-5


class Field(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, t, y):
        return self.net(y)


def step(model, batch, odeint):
    # The step draws its own random numbers too: the watch must leave the user's generator where it was.
    noisy = batch + 0.01 * torch.randn_like(batch)
    states = odeint(model, noisy, torch.linspace(0.0, 1.0, 3), method="rk4", options={"step_size": 0.125})
    return (states[-1] ** 2).mean()


def train(out=None, **options):
    """The user's loop: float16 autocast, SGD with momentum, every weight scaled up after each step, watched where
    `out` is given; the losses (NaN and inf alike), the final model, the optimizer and the watch."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = Field()
    settings = {"every": EVERY, "n_timesteps": 8, "noise_batches": 3, **options}
    watched = ra.watch(model, step, out=out, **settings) if out else None
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for iteration in range(ITERATIONS):
        batch = torch.randn(32, 2) + float(np.random.rand()) + random.random()
        if watched is not None:
            watched(iteration, batch)
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = step(model, batch, torchdiffeq_odeint)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(GROWTH)
        losses.append(loss.detach().float())
    return torch.stack(losses), model, optimizer, watched


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits: equal bits are the same number, NaN and inf included (torch.equal calls NaN unequal)."""
    return tensor.detach().contiguous().view(torch.int32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("watch") / "out"
    plain = train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watched = train(folder)
    return {"plain": plain, "watched": watched, "warnings": caught, "folder": folder}


@pytest.mark.slow
def test_the_first_warning_comes_iterations_before_the_first_non_finite_loss(runs):
    losses, _, _, watched = runs["watched"]
    non_finite = int((~torch.isfinite(losses)).nonzero()[0])
    assert watched.first_warning is not None and watched.first_warning <= non_finite - EVERY
    warned = [w for w in runs["warnings"] if issubclass(w.category, ra.RoundoffWarning)]
    assert warned and f"iteration {watched.first_warning}:" in str(warned[0].message)
    # The overflow margin warns before the loss turns non-finite too, having shrunk from far above its floor.
    margins = [row for row in watched.rows if row["status"] == "ok"]
    overflow = next(row["iteration"] for row in margins if row["overflow_margin"] < OVERFLOW_MARGIN)
    assert overflow <= non_finite - EVERY and margins[0]["overflow_margin"] > 100 * OVERFLOW_MARGIN


@pytest.mark.slow
def test_the_watched_training_is_bit_identical_to_the_unwatched_one(runs):
    plain_losses, plain_model, plain_optimizer, _ = runs["plain"]
    losses, model, optimizer, _ = runs["watched"]
    assert not torch.isfinite(losses).all()  # the training did overflow, so the comparison covers the failure too
    assert torch.equal(bits(plain_losses), bits(losses))
    for (name, a), (_, b) in zip(plain_model.state_dict().items(), model.state_dict().items(), strict=True):
        assert torch.equal(bits(a), bits(b)), name
    for a, b in zip(plain_optimizer.state.values(), optimizer.state.values(), strict=True):
        assert torch.equal(bits(a["momentum_buffer"]), bits(b["momentum_buffer"]))
    assert model.training and all(p.requires_grad for p in model.parameters())


@pytest.mark.slow
def test_the_watch_folder_renders(runs, tmp_path):
    folder = runs["folder"]
    _, _, _, watched = runs["watched"]
    table = pd.read_parquet(folder / "watch.parquet")
    assert list(table["iteration"]) == list(range(0, ITERATIONS, EVERY))
    done = subprocess.run(
        [sys.executable, "-m", "roundoff_cli", "report", str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    text = (folder / "watch_report.md").read_text()
    assert f"**Unsafe from iteration {watched.first_warning}**" in text
    assert "roundoff sweep --model" in text and (folder / "figures" / "watch.png").is_file()
    assert text.count("\n| ") >= len(table)


@pytest.mark.slow
def test_a_resumed_watch_appends_and_another_watch_is_refused(runs, tmp_path):
    folder = runs["folder"]
    before = pd.read_parquet(folder / "watch.parquet")
    torch.manual_seed(0)
    again = ra.watch(Field(), step, every=EVERY, out=folder, n_timesteps=8, noise_batches=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again(ITERATIONS, torch.randn(32, 2))
    after = pd.read_parquet(folder / "watch.parquet")
    assert len(after) == len(before) + 1 and after["iteration"].iloc[-1] == ITERATIONS
    other = ra.watch(Field(), step, every=EVERY, out=folder, n_timesteps=16)
    with pytest.raises(InputError, match="holds another watch's rows .*setup differs") as caught:
        other(0, torch.randn(32, 2))
    assert "\n" not in str(caught.value)


def large_field(factor: float) -> Field:
    torch.manual_seed(0)
    model = Field()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(factor)
    return model


@pytest.mark.unit
def test_raise_on_raises_where_it_would_warn(tmp_path):
    # Weights 100× their draw: the field's values sit within 8× of float16's largest finite at the first call.
    model = large_field(100.0)
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    batch = torch.randn(16, 2)
    with pytest.warns(ra.RoundoffWarning, match="iteration 0: .*largest magnitude"):
        ra.watch(model, step, every=5, out=tmp_path / "warned", n_timesteps=4, noise_batches=2)(0, batch)
    with pytest.raises(ra.RoundoffWarning, match="iteration 3: .*largest magnitude"):
        ra.watch(model, step, every=5, out=tmp_path / "raised", n_timesteps=4, raise_on="overflow")(3, batch)
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())
    assert (tmp_path / "raised" / "watch.parquet").is_file()  # the row that raised is kept


@pytest.mark.unit
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": 0}, "watch: every must be a whole number ≥ 1, got 0"),
        ({"dtype": "float17"}, "watch: unknown dtype 'float17'; one of "),
        ({"dtype": "e4m3"}, "watch: dtype e4m3 has no torch dtype"),
        ({"library": "scipy"}, "watch: unknown library 'scipy'"),
        ({"raise_on": "nan"}, "watch: raise_on takes roundoff, overflow, failure or any, got 'nan'"),
        ({"scaler": 2.0}, "watch: scaler must have get_scale()"),
        ({"noise_batches": 1}, "watch: noise_batches must be a whole number ≥ 2, got 1"),
    ],
)
def test_a_bad_argument_is_one_line(tmp_path, options, message):
    with pytest.raises(InputError) as caught:
        ra.watch(Field(), step, out=tmp_path / "out", **options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.unit
def test_a_bad_call_is_one_line(tmp_path):
    watched = ra.watch(Field(), step, out=tmp_path / "out")
    with pytest.raises(InputError, match="^watch: iteration must be a whole number ≥ 0, got -1$"):
        watched(-1, torch.randn(4, 2))
    with pytest.raises(InputError, match="^watch: model must be a torch.nn.Module, got a str$"):
        ra.watch("model", step, out=tmp_path / "out")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "paper.md").write_text("mine")
    with pytest.raises(InputError, match="holds files roundoff did not write \\(paper.md\\)"):
        ra.watch(Field(), step, out=tmp_path / "mine")(0, torch.randn(4, 2))


UNINITIALISED = ("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided")


class EveryOperation(TorchDispatchMode):
    """The oracle of the overflow margin: the largest magnitude of every operation's float16 results, read one by one
    (what the watch measured this way before it read them cheaper), those of the forward (before the first backward
    operation) and the backward apart."""

    def __init__(self) -> None:
        super().__init__()
        self.forward = self.backward = 0.0
        self.began = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in UNINITIALISED:
            return result.zero_()  # memory as found: its bits, none of them the run's, made ones no read can exceed
        for tensor in tree_leaves(result):
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float16 and tensor.numel():
                largest = float(tensor.detach().abs().amax())
                largest = largest if largest == largest else float("inf")  # NaN: an overflow, as the watch reads it
                self.began = self.began or torch._C._current_autograd_node() is not None
                if self.began:
                    self.backward = max(self.backward, largest)
                else:
                    self.forward = max(self.forward, largest)
        return result


def measured_by_both(model, step, batch, **options):
    """One measurement of the watch, inside the oracle: its row and the oracle. The float64 runs hold no float16
    value, so the oracle reads the float16 run's operations (and the watch's reads, which hold no larger)."""
    watched = ra.watch(model, step, every=5, noise_batches=2, out=options.pop("out"), **options)
    oracle = EveryOperation()
    with warnings.catch_warnings(), oracle:
        warnings.simplefilter("ignore")
        row = watched(0, batch)
    return row, oracle


@pytest.mark.unit
@pytest.mark.parametrize("library", ["torchdiffeq", "native", "torchode"])
@pytest.mark.parametrize("factor", [1.0, GROWTH**20, GROWTH**25])
def test_the_overflow_margin_reads_every_operations_largest(tmp_path, library, factor):
    # The field's float16 values at its draw, near float16's largest finite, and past it (inf: margin 0). torchode
    # allocates its stages with new_empty, whose bits (an inf, at times) were read as an overflow at every step.
    if library == "torchode":
        pytest.importorskip("torchode", reason="torchode is an optional extra")
    torch.manual_seed(0)
    row, oracle = measured_by_both(large_field(factor), step, torch.randn(32, 2), out=tmp_path, library=library)
    largest = max(oracle.forward, oracle.backward)
    assert row["largest_magnitude"] == largest
    if "overflow_margin" in row:  # a row whose float16 step failed has no margin
        assert row["overflow_margin"] == (0.0 if largest == float("inf") else row["dtype_max"] / largest)


@pytest.mark.unit
def test_the_overflow_margin_reads_the_default_models_functions_and_autocasts_summed_weight_gradients(tmp_path):
    # OT-Flow's potential is functions, not layers (its gradient and Hessian trace in closed form), and autocast's
    # float16 copy of each weight gathers its gradient over every evaluation of the solve: there the largest sits.
    problem = ra.model("otflow", d=2, hidden=8, batch=16)
    times = torch.linspace(0.0, 1.0, 5)

    def otflow_step(model, batch, odeint):
        return problem.loss(odeint(model, batch, times, method="rk4"))

    row, oracle = measured_by_both(problem.model, otflow_step, problem.sample_batch(1), out=tmp_path, n_timesteps=4)
    assert row["status"] == "ok" and row["largest_magnitude"] == max(oracle.forward, oracle.backward)


@pytest.mark.unit
def test_the_overflow_margin_reads_the_backward(tmp_path):
    # A loss weighted 3000×: the float16 gradients are far larger than any float16 value of the forward, so a margin
    # that read the forward alone would be hundreds of times too wide.
    def weighted_step(model, batch, odeint):
        return 3000.0 * step(model, batch, odeint)

    torch.manual_seed(0)
    row, oracle = measured_by_both(large_field(1.0), weighted_step, torch.randn(32, 2), out=tmp_path)
    assert oracle.backward > 100 * oracle.forward
    assert row["largest_magnitude"] == oracle.backward
    assert row["overflow_margin"] < 100 * OVERFLOW_MARGIN


def drawing_step(model, batch, odeint):
    # The draw moves the loss by about itself: runs given other numbers would differ by that, not by roundoff.
    states = odeint(model, batch + torch.randn_like(batch), torch.linspace(0.0, 1.0, 3), method="rk4")
    return (states[-1] ** 2).mean()


def quiet_step(model, batch, odeint):
    return (odeint(model, batch, torch.linspace(0.0, 1.0, 3), method="rk4")[-1] ** 2).mean()


@pytest.mark.unit
@pytest.mark.parametrize("the_step", [drawing_step, quiet_step])
def test_a_measurements_run_and_reference_get_the_same_draws_and_a_later_measurement_what_a_first_does(
    tmp_path, the_step
):
    torch.manual_seed(0)
    model, batches = large_field(1.0), [torch.randn(32, 2) for _ in range(2)]
    options = {"every": 1, "n_timesteps": 4, "noise_batches": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watched = ra.watch(model, the_step, out=tmp_path / "b", **options)
        later = [watched(i, b) for i, b in enumerate(batches)][-1]
        first = ra.watch(model, the_step, out=tmp_path / "c", **options)(0, batches[1])
    # float16's roundoff of this loss is ~1e-4 of it; another draw would move it by ~1.
    assert all(row["status"] == "ok" and row["loss_rel_err"] < 1e-2 for row in (later, first))
    # The second measurement (the step's draws found in the first) measures the weights and batch as a first does.
    for column in ("loss", "reference_loss", "loss_rel_err", "grad_params_rel_err", "largest_magnitude"):
        assert later[column] == first[column], column


@pytest.mark.unit
def test_memory_a_solver_allocates_uninitialised_is_not_read_as_an_overflow(tmp_path):
    pytest.importorskip("torchode", reason="torchode is an optional extra")
    # torchode allocates its stages with new_empty; with deterministic algorithms torch fills such memory with NaN,
    # which a reading of it would take for an overflow (margin 0, a warning at every measurement).
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(0)
        watched = ra.watch(large_field(1.0), step, every=1, noise_batches=2, out=tmp_path, library="torchode")
        with warnings.catch_warnings():
            warnings.simplefilter("error", ra.RoundoffWarning)
            row = watched(0, torch.randn(32, 2))
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert row["status"] == "ok" and 0 < row["largest_magnitude"] < 100 and row["overflow_margin"] > 8
