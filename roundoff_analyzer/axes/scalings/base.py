"""The scaling axis: how the backward pass keeps low-precision gradients inside the dtype's range."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from ...core.registry import Registry
from ...solvers import DynamicAdjointScaler
from ..scaler_settings import ScalerSettings


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
