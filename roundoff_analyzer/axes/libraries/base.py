"""The library axis: something that solves an ODE on the time grid and lets autograd reach y0 and the parameters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ...core.registry import Registry, RegistryWithDefaults
from ...solvers import DynamicAdjointScaler, SolveReport
from ...solvers.scaler import AdjointScalerSlot
from ..methods import Method


class LibraryAdapter(Protocol):
    """What a library's adapter itself must have; the optional libraries' adapter modules hold one as `LIBRARY`, whose
    description and the members with defaults below come from its registration (optional.py)."""

    name: str
    # Whether the library can scale the adjoint inside its own backward (the `dynamic` strategy).
    supports_adjoint_scaling: bool

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


class SolverLibrary(LibraryAdapter, Protocol):
    description: str
    # The line the answer's code imports its `odeint` with to solve as this library does (None: the script's own
    # torchdiffeq import stands); a library without it: a comment saying to solve with the library by name.
    import_line: str | None
    # Whether it is this package's solver (roundoff_analyzer.solvers.odeint): it sums the gradients in float32, and
    # the answer's code imports it and names its classical rk4 `rk4_classical`.
    native_solver: bool = False
    # Whether it returns the stored low-precision states as the trajectory (`trajectory_dtype="low"`).
    returns_low_trajectory: bool = False
    # The torchdiffeq function a model's own torchdiffeq calls keep to solve as this library does (None: none).
    routed_function: str | None = None
    # The library that answers a model's own `odeint_adjoint` call as this library's adjoint form would (torchdiffeq's
    # odeint_adjoint for torchdiffeq); None: this library answers it as it answers `odeint`.
    adjoint_form: str | None = None

    def tableau_name(self, method: Method) -> str:
        """The rule the library runs for `method` (a library without it: the method's own tableau)."""
        return getattr(method, "tableau", method.name)


@dataclass(frozen=True)
class UnavailableLibrary:
    """A library that cannot be used here: its package is not installed, or its plug-in did not load."""

    name: str
    reason: str
    install: str | None = None  # the command that installs it, where one does


def _tableau_of_method(name: str) -> Callable[[Method], str]:
    return lambda method: SolverLibrary.tableau_name(None, method)  # type: ignore[arg-type]


# What a library that leaves out an optional member of the protocol reads as, given its name.
_OPTIONAL: dict[str, Callable[[str], Any]] = {
    "import_line": lambda name: f"# solve with {name}, as this sweep did",
    "native_solver": lambda name: False,
    "returns_low_trajectory": lambda name: False,
    "routed_function": lambda name: None,
    "adjoint_form": lambda name: None,
    "tableau_name": _tableau_of_method,
}

LIBRARIES: RegistryWithDefaults[SolverLibrary] = RegistryWithDefaults("library", _OPTIONAL)
MISSING_LIBRARIES: Registry[UnavailableLibrary] = Registry("library")


def library_member(name: str, member: str) -> Any:
    """Library `name`'s declared `member` (SolverLibrary); a name not registered here reads the protocol's default.
    Registered names only: reading results runs no plug-in code."""
    return getattr(LIBRARIES.get(name), member) if name in LIBRARIES.names() else LIBRARIES.optional[member](name)
