"""The scaling axis: how the backward pass keeps low-precision gradients inside the dtype's range."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field

from ..registry import Registry
from ..solvers import DynamicAdjointScaler


class ScalerSettings(BaseModel):
    """Knobs of the loss scaler (`grad`) and of the adjoint scaler (`dynamic`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    init_scale: float = Field(2.0**16, gt=0, description="grad: initial loss scale (GradScaler's default)")
    backoff_factor: float = Field(0.5, gt=0, lt=1, description="grad: factor applied to the scale after a non-finite gradient")
    max_retries: int = Field(30, ge=0, description="grad: backward retries; dynamic: halvings per step")


@dataclass
class BackwardResult:
    grads: list[torch.Tensor | None]
    final_scale: float | None = None
    retries: int | None = None
    passes: int = 1  # backward passes it took


class Scaling(Protocol):
    name: str
    description: str

    def skip_reason(self, library) -> str | None: ...

    def adjoint_scaler(self, settings: ScalerSettings) -> DynamicAdjointScaler | None:
        """A fresh scaler for the solver's own backward, or None when the solver should not scale."""
        ...

    def backward(
        self,
        loss: torch.Tensor,
        leaves: Sequence[torch.Tensor],
        adjoint_scaler: DynamicAdjointScaler | None,
        settings: ScalerSettings,
        hint: int | None = None,
    ) -> BackwardResult:
        """`hint`: the retries of an earlier run of the same setup, where a scaler that searches can start;
        it may change how long the search takes, never its result."""
        ...


SCALINGS: Registry[Scaling] = Registry("scaling")


def plain_backward(loss: torch.Tensor, leaves: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    for leaf in leaves:
        leaf.grad = None
    loss.backward()
    return [leaf.grad for leaf in leaves]
