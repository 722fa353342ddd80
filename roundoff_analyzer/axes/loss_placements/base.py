"""The loss_in axis: where the loss is formed from the solver's output, outside the run's low-precision context or
inside it.

A model's step (its forward and loss, problem.py) runs either inside the run's context as a whole, as a training
script's step under `torch.autocast` does, or outside it with only its solves inside, each solve's output cast to the
loss's dtype (float32; float64 for the reference) before the step reads it."""

from __future__ import annotations

from typing import Protocol

from ...core.registry import Registry
from ..grid import AXIS_DEFAULTS


class LossPlacement(Protocol):
    name: str
    description: str
    # Words for a failure: "the loss (formed ...)".
    where: str
    # True: the whole step runs inside the run's context (autocast, emulation). False: only its solves do, and what
    # they return is cast to the loss's dtype.
    step_in_context: bool


LOSS_PLACEMENTS: Registry[LossPlacement] = Registry("loss placement")
# What every run measured before the axis existed, and what the float64 reference always does.
DEFAULT_LOSS_IN = AXIS_DEFAULTS["loss_in"]
