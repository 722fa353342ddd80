"""What one run solves, and how: the one object a run, its forward and the `odeint` it hands the step are built from
(one_run.py, solve_calls.py), in place of a dozen positional parameters passed down the three."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..axes.libraries import SolverLibrary
from ..axes.loss_placements import DEFAULT_LOSS_IN, LOSS_PLACEMENTS, LossPlacement
from ..axes.methods import Method
from ..axes.modes import PreparedRun, ProblemCopies

if TYPE_CHECKING:
    from .module_hooks import ModuleObserver


def _default_placement() -> LossPlacement:
    return LOSS_PLACEMENTS.get(DEFAULT_LOSS_IN)


@dataclass(frozen=True)
class RunSpec:
    """A run: the problem in the run's precision (`prepared`) and the copies it was cast from, each solve by `library`
    and `method` in `n_timesteps` equal steps, the loss in `loss_dtype` (float64: a reference, whose grid's times are
    float64 too) and formed where `loss_in` puts it (default: outside the run's context).

    `observer`: told where each solve's field runs and where the backward begins (per-module measurement);
    `recompute_field`: the field's activations computed again in the backward rather than kept (the same values, for
    one more evaluation each); `draw`: which draw of the step's random numbers the run is given, alike in every run of
    that draw (None: the step draws as it will, as in training)."""

    prepared: PreparedRun
    copies: ProblemCopies
    library: SolverLibrary
    method: Method
    n_timesteps: int
    loss_dtype: torch.dtype = torch.float32
    loss_in: LossPlacement = field(default_factory=_default_placement)
    observer: ModuleObserver | None = None
    recompute_field: bool = False
    draw: int | None = None

    @property
    def time_dtype(self) -> torch.dtype:
        """The grid's times: float64 where the loss is (the reference), else float32."""
        return torch.float64 if self.loss_dtype == torch.float64 else torch.float32
