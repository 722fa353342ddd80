"""The validation loss: the same computation for every setup, so that setups trained in different precisions are
compared on equal terms: float32, the native solver's classical rk4 at the setup's n_timesteps, no autocast,
the mean of the loss over the held-out batches."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from ..axes.libraries import LIBRARIES
from ..axes.loss_placements import LOSS_PLACEMENTS
from ..axes.methods import METHODS
from ..axes.models import ModelProblem
from ..axes.models.inputs import on_device
from ..axes.modes import PreparedRun, ProblemCopies
from ..axes.modes.base import run_device
from ..measuring.one_run import configured_odeint, step_forward
from ..solvers import SolveReport

VALIDATION_METHOD = "rk4_classical"  # the classical rule, named so the drop-in does not warn


def validation_loss(problem: ModelProblem, batches: list[Any], n_timesteps: int) -> float:
    copies = ProblemCopies(problem)
    device = run_device(copies.model, copies.batch)
    placement = LOSS_PLACEMENTS.get("float32")
    library, method = LIBRARIES.get("native"), METHODS.get(VALIDATION_METHOD)
    losses = []
    with torch.no_grad():
        for batch in batches:
            prepared = PreparedRun(problem.model, on_device(batch, device), nullcontext)
            odeint = configured_odeint(
                prepared, library, method, n_timesteps, torch.float32, placement, None, SolveReport()
            )
            losses.append(float(step_forward(prepared, copies, odeint, placement)))
    return sum(losses) / len(losses)
