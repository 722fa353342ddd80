"""The library axis: something that solves an ODE on a fixed grid and lets autograd reach y0 and the parameters."""
from __future__ import annotations

from typing import Protocol

import torch

from ..methods import ExplicitRK
from ..registry import Registry
from ..solvers import DynamicAdjointScaler, SolveReport


class SolverLibrary(Protocol):
    name: str
    description: str
    # Whether the library can scale the adjoint inside its own backward (the `dynamic` strategy).
    supports_adjoint_scaling: bool

    def unsupported_method_reason(self, method: ExplicitRK) -> str | None: ...

    def solve(
        self,
        func: torch.nn.Module,
        y0: torch.Tensor,
        t: torch.Tensor,
        method: ExplicitRK,
        scaler: DynamicAdjointScaler | None,
        report: SolveReport,
    ) -> torch.Tensor:
        """All N+1 states, differentiable with respect to y0 and func's parameters."""
        ...


LIBRARIES: Registry[SolverLibrary] = Registry("library")
