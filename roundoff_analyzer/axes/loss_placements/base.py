"""The loss_in axis: where the loss is formed from the solver's output, outside the run's low-precision context or
inside it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

import torch

from ...core.registry import Registry
from ..grid import AXIS_DEFAULTS


class LossPlacement(Protocol):
    name: str
    description: str
    # Words for a failure: "the loss (formed ...)".
    where: str

    def form(
        self,
        loss: Callable[[torch.Tensor], torch.Tensor],
        trajectory: torch.Tensor,
        context: Callable[[], AbstractContextManager],
        loss_dtype: torch.dtype,
    ) -> torch.Tensor:
        """The loss of `trajectory`; `context` is the run's (autocast, emulation, or none in pure mode), `loss_dtype`
        the dtype a loss formed outside it is computed in (float32; float64 for the reference)."""
        ...


LOSS_PLACEMENTS: Registry[LossPlacement] = Registry("loss placement")
# What every run measured before the axis existed, and what the float64 reference always does.
DEFAULT_LOSS_IN = AXIS_DEFAULTS["loss_in"]
