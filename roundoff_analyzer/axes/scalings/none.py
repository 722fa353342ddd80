"""The `none` scaling: a plain backward, nothing scaled."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...solvers import DynamicAdjointScaler
from ..libraries import SolverLibrary
from ..scaler_settings import ScalerSettings
from .base import SCALINGS, BackwardResult, Scaling, plain_backward


class NoScaling(Scaling):
    name = "none"
    shares_forward = True
    scales = False
    description = "plain backward, no scaling"
    words = "no scaling"

    def skip_reason(self, library: SolverLibrary) -> str | None:
        return None

    def adjoint_scaler(self, settings: ScalerSettings) -> DynamicAdjointScaler | None:
        return None

    def backward(
        self,
        loss: torch.Tensor,
        leaves: Sequence[torch.Tensor],
        adjoint_scaler: DynamicAdjointScaler | None,
        settings: ScalerSettings,
        hint: int | None = None,
        keep_graph: bool = False,
    ) -> BackwardResult:
        return BackwardResult(plain_backward(loss, leaves, keep_graph))


SCALINGS.register(NoScaling())
