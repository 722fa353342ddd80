"""The scaling axis: how the backward pass keeps low-precision gradients inside the dtype's range."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ...core.registry import Registry, RegistryWithDefaults
from ...solvers import DynamicAdjointScaler
from ..libraries import SolverLibrary
from ..scaler_settings import ScalerSettings

if TYPE_CHECKING:  # a worker imports this module and not pandas (the tables are the sweep's own process's)
    import pandas as pd


@dataclass
class BackwardResult:
    grads: list[torch.Tensor | None]
    final_scale: float | None = None
    retries: int | None = None
    passes: int = 1  # backward passes it took
    # Which of them gave `grads` (0 = the first); None: the last. The solver's per-step record and a module
    # observer's statistics are read from that pass.
    counted_pass: int | None = None

    def passes_after_counted(self) -> int:
        return 0 if self.counted_pass is None else self.passes - 1 - self.counted_pass


@dataclass(frozen=True)
class ScalingCode:
    """How the answer's training loop writes a scaling (report/sections/code_parts.py): lines without their indent,
    `{device}` standing for the device type and `{clip}` for the clip of the gradients."""

    imports: tuple[str, ...] = ()
    solver_arguments: tuple[str, ...] = ()  # keyword arguments of the solve
    before_loop: tuple[str, ...] = ()  # written once, before the training loop
    backward: str = "loss.backward()"
    backward_comment: str = ""  # after the backward of a `(func, y0, loss)` model's loop
    # After the backward: None, the clip and `optimizer.step()`; or these lines.
    optimizer_step: tuple[str, ...] | None = None
    # In `pure` mode, which measures the gradients only: what the loop says of them instead of an update.
    pure_note: tuple[str, ...] = ()


class Scaling(Protocol):
    """What a scaling implements. A class that subclasses this protocol inherits `searches_scale = False`; one that
    only matches it structurally and does not set it is registered as one that does not search (`SCALINGS`)."""

    name: str
    description: str
    # Whether `backward` searches a loss scale over several backward passes. The first run of such a scaling at a
    # large n_timesteps is preceded by a cheap run of the same setup, whose retries become its `hint`.
    searches_scale: bool = False
    # Whether it scales at all (False only for a plain backward: the report's "unscaled" runs).
    scales: bool = True
    # Whether its runs may share one forward pass with the other scalings that do (measuring/one_run.py): its backward
    # then takes `keep_graph`, True for every pass but the forward's last, which must leave the graph for the next.
    shares_forward: bool = False
    # How the report's sentences name it ("`grad` loss scaling"); a scaling without it is "`NAME` scaling".
    words: str
    # Its entry in the report's words (after "**NAME**: "), where a report uses it; None: no entry.
    glossary: str | None = None
    # How the answer's code writes it; a scaling without it is written as a plain backward.
    code: ScalingCode = ScalingCode()

    def skip_reason(self, library: SolverLibrary) -> str | None:
        """None when the scaling runs with `library`; otherwise why not (the configuration is then skipped with it)."""
        ...

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
        keep_graph: bool = False,
    ) -> BackwardResult:
        """`hint`: the retries of an earlier run of the same setup, where a scaler that searches can start;
        it may change how long the search takes, never its result. `keep_graph`: leave the forward's graph for
        another backward pass (asked only of a scaling that `shares_forward`)."""
        ...


# What a scaling that leaves out an optional attribute of the protocol reads as, given its name.
_OPTIONAL: dict[str, Callable[[str], Any]] = {
    "searches_scale": lambda name: False,
    "shares_forward": lambda name: False,
    "scales": lambda name: True,
    "words": lambda name: f"`{name}` scaling",
    "glossary": lambda name: None,
    "code": lambda name: ScalingCode(),
}


class ScalingRegistry(RegistryWithDefaults[Scaling]):
    """The scalings by name, each with every attribute of the protocol (the optional ones with their defaults)."""

    def __init__(self, axis: str) -> None:
        super().__init__(axis, _OPTIONAL)


SCALINGS: Registry[Scaling] = ScalingRegistry("scaling")


def scales(name: str) -> bool:
    """Whether scaling `name` scales (`Scaling.scales`); a name not registered here (a plug-in of the machine that
    ran the sweep) reads the default: reading results runs no plug-in's code."""
    return SCALINGS.get(name).scales if name in SCALINGS.names() else True


def searches_scale(name: str) -> bool:
    """Whether scaling `name` searches a loss scale (`Scaling.searches_scale`); as `scales` for a name not here."""
    return SCALINGS.get(name).searches_scale if name in SCALINGS.names() else False


def unscaled(scalings: pd.Series) -> pd.Series:
    """Where a `scaling` column names a scaling that does not scale."""
    return ~scalings.map(scales).astype(bool)


def plain_backward(
    loss: torch.Tensor, leaves: Sequence[torch.Tensor], keep_graph: bool = False
) -> list[torch.Tensor | None]:
    for leaf in leaves:
        leaf.grad = None
    loss.backward(retain_graph=keep_graph)
    return [leaf.grad for leaf in leaves]
