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
from ..measuring.one_run import step_forward
from ..measuring.run_spec import RunSpec
from ..measuring.solve_calls import ConfiguredOdeint

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
            run = RunSpec(prepared, copies, library, method, n_timesteps, loss_in=placement)
            losses.append(float(step_forward(run, ConfiguredOdeint(run))))
    return sum(losses) / len(losses)
