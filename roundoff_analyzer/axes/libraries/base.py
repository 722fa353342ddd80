"""The library axis: something that solves an ODE on the time grid and lets autograd reach y0 and the parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ...core.registry import Registry
from ...solvers import DynamicAdjointScaler, SolveReport
from ...solvers.scaler import AdjointScalerSlot
from ..methods import Method


class SolverLibrary(Protocol):
    name: str
    description: str
    # Whether the library can scale the adjoint inside its own backward (the `dynamic` strategy).
    supports_adjoint_scaling: bool
    # Optional: the line the answer's code imports its `odeint` with to solve as this library does (None: the
    # script's own torchdiffeq import stands); without it, the code says to solve with the library by name.
    # import_line: str | None

    def unsupported_method_reason(self, method: Method) -> str | None:
        """None when the library runs `method`; otherwise why not (the configuration is then skipped with it)."""
        ...

    def solve(
        self,
        func: torch.nn.Module,
        y0: torch.Tensor,
        t: torch.Tensor,
        method: Method,
        scaler: DynamicAdjointScaler | AdjointScalerSlot | None,
        report: SolveReport,
    ) -> torch.Tensor:
        """The states at the N+1 points of `t`, differentiable with respect to y0 and func's parameters. `scaler`:
        only for a library that `supports_adjoint_scaling` (a slot where runs share the forward: its backward reads
        the slot's scaler when it starts).

        An adaptive `method` (`method.adaptive`) carries `rtol`, `atol` and `max_steps`; the library
        records its accepted and rejected steps with `report.record_steps` and raises
        `errors.StepBudgetExhausted` once it has attempted `max_steps` steps.
        """
        ...


@dataclass(frozen=True)
class UnavailableLibrary:
    """A library that cannot be used here: its package is not installed, or its plug-in did not load."""

    name: str
    reason: str
    install: str | None = None  # the command that installs it, where one does


LIBRARIES: Registry[SolverLibrary] = Registry("library")
MISSING_LIBRARIES: Registry[UnavailableLibrary] = Registry("library")
