"""Gradient noise: how far one minibatch's parameter gradient lies from another's, the yardstick for gradient roundoff.

A low-precision gradient error matters for training only if it is comparable with the noise that stochastic
gradient descent lives with anyway. Once per sweep, the parameter gradient is computed in float64 (native
solver, rk4, NOISE_TIMESTEPS steps or the sweep's largest n_timesteps if smaller: the spread
between batches hardly depends on the grid) for `n_batches` independent batches of the model's data, none of them
the sweep's own batch, and

    grad_noise_rel = sqrt( Σ_b ‖g_b − ḡ‖² / (B − 1) ) / sqrt( Σ_b ‖g_b‖² / B ),

the typical distance of one batch's gradient from the mean gradient, relative to the typical size of one
batch's gradient: a relative error of the same kind as `grad_params_rel_err`, so the two can be divided.
"""

from __future__ import annotations

import time
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
from ..solvers import SolveReport
from . import metrics
from .one_run import configured_odeint, step_forward

# The batches' spread hardly depends on the grid, so a coarse one does: with 16 batches, grad_noise_rel at 8 steps
# against 16 differed by 0.04% (otflow), 6e-9 relative (cnf) and 0.5% (linear), each at its default options, where
# the estimate's own sampling error is about 1/sqrt(2(B - 1)) = 18%; 8 steps cost otflow 1.0 s against 2.4 s.
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

    def describe(self) -> dict:
        return {
            "grad_noise_rel": self.rel,
            "n_batches": self.n_batches,
            "n_timesteps": self.n_timesteps,
            "method": f"{NOISE_METHOD.removesuffix('_classical')} ({NOISE_LIBRARY} solver, float64)",
            "unknown_because": self.reason,
            "seconds": round(self.seconds, 3),
        }


def measure_gradient_noise(
    copies: ProblemCopies, n_timesteps: int, n_batches: int, device: torch.device
) -> GradientNoise:
    started = time.perf_counter()
    gradients, stopped = batch_gradients(copies, n_timesteps, range(1, n_batches + 1), device)
    return noise_from(gradients, stopped, n_batches, n_timesteps, time.perf_counter() - started)


def batch_gradients(
    copies: ProblemCopies, n_timesteps: int, batches: range, device: torch.device
) -> tuple[list[torch.Tensor], str | None]:
    """The flattened float64 parameter gradient of each batch in `batches` (the model's `sample_batch(k)`), and why
    the batches ran out before the range did (None when they did not). A sweep computes the range in parts."""
    if not copies.problem.has_more_batches or not batches:
        return [], None
    model = copies.model_in(torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    library, method = LIBRARIES.get(NOISE_LIBRARY), METHODS.get(NOISE_METHOD)
    placement = LOSS_PLACEMENTS.get("float32")
    gradients: list[torch.Tensor] = []
    for b in batches:
        try:
            batch = copies.problem.sample_batch(b)
        except (InputError, NoMoreBatches) as exc:  # a data file without rows for another batch: those it has must do
            return gradients, str(exc)
        prepared = PreparedRun(model, on_device(batch, device, torch.float64), nullcontext)
        odeint = configured_odeint(
            prepared, library, method, n_timesteps, torch.float64, placement, None, SolveReport()
        )
        with torch.enable_grad():
            loss = step_forward(prepared, copies, odeint, placement)
            found = torch.autograd.grad(loss, params, allow_unused=True)
        # Kept on the sweep's device, where a piece read back from the folder lands too: a sweep whose pieces were
        # computed partly here and partly by another process (or before a resume) stacks them together.
        gradients.append(
            metrics.flatten([torch.zeros_like(p) if g is None else g for g, p in zip(found, params)], device)
        )
    return gradients, None


def noise_from(
    gradients: list[torch.Tensor], stopped: str | None, n_batches: int, n_timesteps: int, seconds: float
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
    return GradientNoise(relative_spread(torch.stack(gradients)), len(gradients), n_timesteps, None, seconds)


def relative_spread(gradients: torch.Tensor) -> float | None:
    """sqrt(Σ‖g_b − ḡ‖² / (B − 1)) / sqrt(Σ‖g_b‖² / B) over the rows g_b of `gradients`."""
    count = gradients.shape[0]
    spread = float(((gradients - gradients.mean(dim=0)) ** 2).sum() / (count - 1)) ** 0.5
    size = float((gradients**2).sum() / count) ** 0.5
    return spread / size if size > 0 else None
