"""The `dynamic` scaling: the native solver scales the adjoint step by step inside its own backward."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...solvers import DynamicAdjointScaler
from ..libraries import SolverLibrary
from ..scaler_settings import ScalerSettings
from .base import SCALINGS, BackwardResult, Scaling, ScalingCode, plain_backward


class DynamicScaling(Scaling):
    name = "dynamic"
    shares_forward = True
    description = "the native solver's dynamic adjoint scaling, step by step inside its backward"
    words = "`dynamic` adjoint scaling"
    code = ScalingCode(
        imports=("from roundoff_analyzer.solvers import DynamicAdjointScaler",),
        solver_arguments=("scaler=DynamicAdjointScaler()",),
        backward_comment="  # the adjoint scaler leaves the gradients unscaled",
    )
    glossary = (
        "the native solver's adjoint scaling (`DynamicAdjointScaler`): each backward step multiplies the "
        "adjoint by its own power-of-two scale, and halves it and redoes the step when the product overflows."
    )

    def skip_reason(self, library: SolverLibrary) -> str | None:
        if not library.supports_adjoint_scaling:
            return (
                f"{library.name} has no adjoint of its own to scale: "
                "dynamic adjoint scaling needs the native solver's backward"
            )
        return None

    def adjoint_scaler(self, settings: ScalerSettings) -> DynamicAdjointScaler:
        return DynamicAdjointScaler(max_retries=settings.max_retries)

    def backward(
        self,
        loss: torch.Tensor,
        leaves: Sequence[torch.Tensor],
        adjoint_scaler: DynamicAdjointScaler | None,
        settings: ScalerSettings,
        hint: int | None = None,
        keep_graph: bool = False,
    ) -> BackwardResult:
        assert adjoint_scaler is not None, "the dynamic scaling's backward needs the scaler its adjoint_scaler made"
        grads = plain_backward(loss, leaves, keep_graph)
        return BackwardResult(grads, final_scale=adjoint_scaler.scale, retries=adjoint_scaler.retries)


SCALINGS.register(DynamicScaling())
