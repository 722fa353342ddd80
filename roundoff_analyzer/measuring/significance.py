"""Significant digits from the spread of repeated stochastically rounded runs, without a reference.

As Monte Carlo arithmetic tools do: K runs of the same computation with random rounding give K
samples of each result; s = -log10(sigma / |mu|), here normwise over a tensor (the norm of the
entries' standard deviations over the norm of their means), so that it reads like -log10 of the
reference-based relative error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import metrics


def significant_digits(samples: Sequence[torch.Tensor]) -> float | None:
    """None for fewer than two samples; infinity when all samples agree bit for bit."""
    if len(samples) < 2:
        return None
    stacked = torch.stack([s.detach().to(torch.float64).reshape(-1) for s in samples])
    spread = float(torch.linalg.vector_norm(stacked.std(dim=0)))
    size = float(torch.linalg.vector_norm(stacked.mean(dim=0)))
    if spread == 0.0:
        return math.inf
    return -math.log10(spread / size) if size > 0 else None


def quantities(
    trajectory: torch.Tensor, loss: torch.Tensor, grads: list[torch.Tensor], n_inputs: int = 1
) -> dict[str, torch.Tensor | None]:
    """Each error metric's quantity, keyed like ERROR_METRICS without `_rel_err` (`grads`: the `n_inputs` inputs'
    first, then the parameters')."""
    return {
        "sol": trajectory,
        "final": trajectory[-1],
        "loss": loss,
        "grad_y0": metrics.joined(grads[:n_inputs]),
        "grad_params": metrics.flatten([g for g in grads[n_inputs:] if g is not None]),
    }
