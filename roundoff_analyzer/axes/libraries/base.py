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
    # The line the answer's code imports its `odeint` with, torchdiffeq's signature, to solve as this library's runs
    # did (None: the script's own torchdiffeq import stands; `odeint_of` in handed.py makes such a function from an
    # adapter). A library without it gets no code: the answer says so in one line (NO_IMPORT_LINE).
    import_line: str | None
    # Whether that `odeint` takes `model=`: the module whose parameters a field that is not a module reaches, which a
    # library differentiating func.parameters() only needs (the answer's step code passes it, as the sweep does).
    odeint_takes_model: bool = False
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


# The answer's code for a library without `import_line`: no code, in one line saying what to add. The `#` marks it.
NO_CODE = "# no code: "
NO_IMPORT_LINE = (
    NO_CODE + "library {name} declares no import_line, the line a script imports an odeint with torchdiffeq's "
    "signature from to solve as its runs did; add one (see `SolverLibrary`)"
)


def writes_no_code(import_line: str | None) -> bool:
    """Whether a library's `import_line` is the refusal of a library that declares none."""
    return import_line is not None and import_line.startswith(NO_CODE)


# What a library that leaves out an optional member of the protocol reads as, given its name.
_OPTIONAL: dict[str, Callable[[str], Any]] = {
    "import_line": lambda name: NO_IMPORT_LINE.format(name=name),
    "odeint_takes_model": lambda name: False,
    "native_solver": lambda name: False,
    "returns_low_trajectory": lambda name: False,
    "routed_function": lambda name: None,
    "adjoint_form": lambda name: None,
    "tableau_name": _tableau_of_method,
}

LIBRARIES: RegistryWithDefaults[SolverLibrary] = RegistryWithDefaults("library", _OPTIONAL)
MISSING_LIBRARIES: Registry[UnavailableLibrary] = Registry("library")


def import_line_of(name: str) -> str | None:
    """Library `name`'s `import_line` (`library_member`); for a library not installed here, the refusal saying so."""
    if name not in LIBRARIES.names() and name in MISSING_LIBRARIES.names():
        reason = MISSING_LIBRARIES.get(name).reason
        return f"{NO_CODE}library {name} cannot be loaded here ({reason}), and its adapter declares the import_line"
    return library_member(name, "import_line")


def library_member(name: str, member: str) -> Any:
    """Library `name`'s declared `member` (SolverLibrary); a name not registered here reads the protocol's default.
    Registered names only: reading results runs no plug-in code."""
    return getattr(LIBRARIES.get(name), member) if name in LIBRARIES.names() else LIBRARIES.optional[member](name)
