"""The scaling axis: how the backward pass keeps low-precision gradients inside the dtype's range."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch

from ...core.registry import Registry
from ...solvers import DynamicAdjointScaler
from ..libraries import SolverLibrary
from ..scaler_settings import ScalerSettings


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


class Scaling(Protocol):
    """What a scaling implements. A class that subclasses this protocol inherits `searches_scale = False`; one that
    only matches it structurally and does not set it is registered as one that does not search (`SCALINGS`)."""

    name: str
    description: str
    # Whether `backward` searches a loss scale over several backward passes. The first run of such a scaling at a
    # large n_timesteps is preceded by a cheap run of the same setup, whose retries become its `hint`.
    searches_scale: bool = False

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
    ) -> BackwardResult:
        """`hint`: the retries of an earlier run of the same setup, where a scaler that searches can start;
        it may change how long the search takes, never its result."""
        ...


class _NotSearching:
    """A scaling that does not declare `searches_scale`, read as one that does not search; all else is its own."""

    searches_scale = False

    def __init__(self, scaling: Any) -> None:
        self._scaling = scaling

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scaling, name)


class ScalingRegistry(Registry[Scaling]):
    """The scalings by name, each with every attribute of the protocol (`searches_scale` defaults to False)."""

    def register(self, item: Scaling, name: str | None = None) -> Scaling:
        return super().register(item if hasattr(item, "searches_scale") else cast(Scaling, _NotSearching(item)), name)


SCALINGS: Registry[Scaling] = ScalingRegistry("scaling")


def plain_backward(loss: torch.Tensor, leaves: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    for leaf in leaves:
        leaf.grad = None
    loss.backward()
    return [leaf.grad for leaf in leaves]
