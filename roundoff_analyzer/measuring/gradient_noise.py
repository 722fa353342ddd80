"""Gradient noise: how far one minibatch's parameter gradient lies from another's, the yardstick for gradient roundoff.

A low-precision gradient error matters for training only if it is comparable with the noise that stochastic
gradient descent lives with anyway. Once per sweep, the parameter gradient is computed in float64 (native
solver, rk4, NOISE_TIMESTEPS steps or the sweep's largest n_timesteps if smaller: the spread
between batches hardly depends on the grid) for `n_batches` independent batches of the model's data, none of them
the sweep's own batch, and

    grad_noise_rel = sqrt( Σ_b ‖g_b − ḡ‖² / (B − 1) ) / sqrt( Σ_b ‖g_b‖² / B ),

the typical distance of one batch's gradient from the mean gradient, relative to the typical size of one
batch's gradient: a relative error of the same kind as `grad_params_rel_err`, so the two can be divided.

The spread shrinks with the batch: it is measured at `batch_size` points per batch (the batch a user trains with;
by default the sweep's), each noise batch the first `batch_size` rows of as many of the sampler's batches, joined
along the first dimension, as it takes. How well B batches know it, `uncertainty`, is its relative standard error as
the jackknife estimates it from the batches themselves (each left out in turn). No formula in B alone says it:
1/sqrt(2(B − 1)), a standard deviation's along one direction, is 5× the default OT-Flow's (3.4% with 16 batches,
bench/noise_uncertainty.py), whose gradients spread along many directions; a heavy-tailed batch makes it larger.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..axes.libraries import LIBRARIES
from ..axes.loss_placements import LOSS_PLACEMENTS
from ..axes.methods import METHODS
from ..axes.models import NoMoreBatches
from ..axes.models.inputs import on_device
from ..axes.modes import PreparedRun, ProblemCopies
from ..core.errors import InputError
from . import metrics
from .contract import ProblemShape, problem_batch
from .one_run import step_forward
from .run_spec import RunSpec
from .solve_calls import ConfiguredOdeint

# The batches' spread hardly depends on the grid, so a coarse one does: with 16 batches, grad_noise_rel at 8 steps
# against 16 differed by 0.04% (otflow), 6e-9 relative (cnf) and 0.5% (linear), each at its default options, where
# the estimate's own sampling error is 3.4% (otflow, bench/noise_uncertainty.py); 8 steps cost otflow 1.0 s, 16 2.4 s.
NOISE_TIMESTEPS = 8
# The float64 solver of the noise's gradients (the spread between batches, not the solver, is measured).
NOISE_LIBRARY, NOISE_METHOD = "native", "rk4_classical"


@dataclass(frozen=True)
class GradientNoise:
    rel: float | None  # None when unknown
    n_batches: int
    n_timesteps: int | None
    reason: str | None = None  # why it is unknown
    seconds: float = 0.0
    batch_size: int | None = None  # points per batch
    uncertainty: float | None = None  # the relative standard error of `rel`

    def describe(self) -> dict:
        return {
            "grad_noise_rel": self.rel,
            "uncertainty": self.uncertainty,
            "n_batches": self.n_batches,
            "batch_size": self.batch_size,
            "n_timesteps": self.n_timesteps,
            "method": f"{NOISE_METHOD.removesuffix('_classical')} ({NOISE_LIBRARY} solver, float64)",
            "unknown_because": self.reason,
            "seconds": round(self.seconds, 3),
        }


def measure_gradient_noise(
    copies: ProblemCopies, n_timesteps: int, n_batches: int, device: torch.device, batch_size: int | None = None
) -> GradientNoise:
    started = time.perf_counter()
    gradients, stopped = batch_gradients(copies, n_timesteps, range(1, n_batches + 1), device, batch_size)
    seconds, size = time.perf_counter() - started, batch_size or problem_batch_size(copies)
    return noise_from(gradients, stopped, n_batches, n_timesteps, seconds, size)


def batch_size_of(y0: torch.Tensor) -> int:
    """The batch size of an initial state: its first dimension."""
    return int(y0.shape[0]) if y0.dim() else 1


def problem_batch_size(copies: ProblemCopies, shape: ProblemShape | None = None) -> int | None:
    """The points of one batch of the model's data (contract.py's `problem_batch`; `shape`: what the contract check
    found, where it ran); None where they cannot be known."""
    if shape is not None and (shape.batch_size is not None or shape.batch_size_from is not None):
        return shape.batch_size
    return problem_batch(copies).size


def noise_batch(sampler: Callable[[int], torch.Tensor], index: int, size: int, sampled: int) -> torch.Tensor:
    """Noise batch `index` (from 1) of `size` points, from a sampler whose batches hold `sampled`: the first `size`
    rows of the sampler's batches (index − 1)·k + 1 … index·k, k = ceil(size / sampled), joined."""
    per = -(-size // sampled)
    if per == 1:
        return sampler(index)[:size]
    return torch.cat([sampler((index - 1) * per + j) for j in range(1, per + 1)])[:size]


def batch_gradients(
    copies: ProblemCopies, n_timesteps: int, batches: range, device: torch.device, batch_size: int | None = None
) -> tuple[list[torch.Tensor], str | None]:
    """The flattened float64 parameter gradient of each batch in `batches` (the model's `sample_batch(k)`; a trajectory
    problem's at `batch_size` points each, default its own), and why the batches ran out before the range did (None
    when they did not). A sweep computes the range in parts."""
    if not copies.problem.has_more_batches or not batches:
        return [], None
    model = copies.model_in(torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    library, method = LIBRARIES.get(NOISE_LIBRARY), METHODS.get(NOISE_METHOD)
    placement = LOSS_PLACEMENTS.get("float32")
    trajectory = copies.trajectory
    sampled = batch_size_of(trajectory.y0) if trajectory is not None else None
    gradients: list[torch.Tensor] = []
    for b in batches:
        try:
            if trajectory is not None and sampled is not None and batch_size not in (None, sampled):
                batch = noise_batch(trajectory.sample_batch, b, batch_size, sampled)
            else:
                batch = copies.problem.sample_batch(b)
        except (InputError, NoMoreBatches) as exc:  # a data file without rows for another batch: those it has must do
            return gradients, str(exc)
        prepared = PreparedRun(model, on_device(batch, device, torch.float64), nullcontext)
        run = RunSpec(prepared, copies, library, method, n_timesteps, torch.float64, placement)
        with torch.enable_grad():
            loss = step_forward(run, ConfiguredOdeint(run))
            found = torch.autograd.grad(loss, params, allow_unused=True)
        # Kept on the sweep's device, where a piece read back from the folder lands too: a sweep whose pieces were
        # computed partly here and partly by another process (or before a resume) stacks them together.
        gradients.append(
            metrics.flatten([torch.zeros_like(p) if g is None else g for g, p in zip(found, params)], device)
        )
    return gradients, None


def noise_from(
    gradients: list[torch.Tensor],
    stopped: str | None,
    n_batches: int,
    n_timesteps: int,
    seconds: float,
    batch_size: int | None = None,
) -> GradientNoise:
    """The noise of the batches' gradients (in batch order; `stopped`: why there are fewer than asked for)."""
    if n_batches < 2:
        return GradientNoise(None, n_batches, None, "not measured (--noise-batches below 2)")
    if not gradients and stopped is None:
        return GradientNoise(
            None, n_batches, None, "the model offers no batch sampler, so no second batch can be drawn"
        )
    if len(gradients) < 2:
        return GradientNoise(None, n_batches, n_timesteps, stopped)
    stacked = torch.stack(gradients)
    return GradientNoise(
        relative_spread(stacked), len(gradients), n_timesteps, None, seconds, batch_size, relative_uncertainty(stacked)
    )


def relative_uncertainty(gradients: torch.Tensor) -> float | None:
    """The relative standard error of `relative_spread` over the rows, as the jackknife estimates it (each batch left
    out in turn); tests/test_context.py holds it against the spread of independent draws. Two rows leave no jackknife:
    then 1/sqrt(2(B − 1)), the standard error of a spread along one direction, the most a normal spread has."""
    count = gradients.shape[0]
    if count < 2:
        return None
    floor = 1 / math.sqrt(2 * (count - 1))
    whole = relative_spread(gradients)
    if count < 3 or not whole:
        return floor
    # Each batch left out, from per-row sums (no copy of the stack): about the mean of the others, the rows' squared
    # distances sum to C − |c_i|² B/(B − 1), with c the rows' distances from the mean of all and C their sum.
    centred = ((gradients - gradients.mean(dim=0)) ** 2).sum(dim=1)
    squares = (gradients**2).sum(dim=1)
    spread = ((centred.sum() - centred * count / (count - 1)).clamp(min=0) / (count - 2)).sqrt()
    size = ((squares.sum() - squares) / (count - 1)).sqrt()
    left_out = spread / size
    jackknife = math.sqrt((count - 1) / count * float(((left_out - left_out.mean()) ** 2).sum())) / whole
    return jackknife if math.isfinite(jackknife) else floor


def relative_spread(gradients: torch.Tensor) -> float | None:
    """sqrt(Σ‖g_b − ḡ‖² / (B − 1)) / sqrt(Σ‖g_b‖² / B) over the rows g_b of `gradients`."""
    count = gradients.shape[0]
    spread = float(((gradients - gradients.mean(dim=0)) ** 2).sum() / (count - 1)) ** 0.5
    size = float((gradients**2).sum() / count) ** 0.5
    return spread / size if size > 0 else None
