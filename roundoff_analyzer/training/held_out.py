"""The validation loss: the same computation for every setup, so that setups trained in different precisions are
compared on equal terms: float32, the native solver's classical rk4 at the setup's n_timesteps, no autocast,
the mean of the loss over the held-out batches."""

from __future__ import annotations

import torch

from ..axes.models import Problem
from ..measuring.one_run import time_grid
from ..solvers import odeint

VALIDATION_METHOD = "rk4_classical"  # the classical rule, named so the drop-in does not warn


def validation_loss(problem: Problem, batches: list[torch.Tensor], n_timesteps: int) -> float:
    t = time_grid(n_timesteps, torch.float32, problem.y0.device)
    with torch.no_grad():
        losses = [
            float(problem.loss(odeint(problem.func, batch.to(torch.float32), t, method=VALIDATION_METHOD)))
            for batch in batches
        ]
    return sum(losses) / len(losses)
