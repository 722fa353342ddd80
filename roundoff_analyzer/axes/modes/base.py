"""The mode axis: what is low precision: the arithmetic only (autocast) or parameters and inputs too (pure)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import torch

from ...core.registry import Registry
from ..models import ModelProblem, TrajectoryProblem
from ..models.inputs import as_leaves, floating_inputs


@dataclass
class PreparedRun:
    """A run's model and batch, in the run's precision, and the context its arithmetic runs in."""

    model: torch.nn.Module
    # The batch, its floating-point tensors fresh leaves; a trajectory problem's (y0) require grad, a step's do not.
    batch: Any
    context: Callable[[], AbstractContextManager]
    # After the run: (phase, count) of values that left the dtype's range without becoming non-finite
    # (a format that saturates instead of overflowing), or None.
    silent_overflow: Callable[[], tuple[str, int] | None] | None = None
    # The dtypes of one step's share of a weight's gradient and of their sum over the steps, where the mode decides
    # them (an overflow's message says where it can have been); None where it does not say.
    weight_gradient_dtypes: tuple[torch.dtype, torch.dtype] | None = None

    def __post_init__(self) -> None:
        # Taken before the step runs: a step that makes its batch require grad itself does not add to the leaves.
        self._inputs = [value for value in floating_inputs(self.batch) if value.requires_grad]

    @property
    def inputs(self) -> list[torch.Tensor]:
        """The leaves of the input gradient: the batch's floating-point tensors that required grad when the run was
        prepared (a trajectory problem's y0; none of a step's batch, ProblemCopies.differentiates_batch)."""
        return self._inputs

    @property
    def leaves(self) -> list[torch.Tensor]:
        """What a run differentiates: the batch's floating-point inputs, then every trainable parameter."""
        return [*self.inputs, *(p for p in self.model.parameters() if p.requires_grad)]

    @property
    def device(self) -> torch.device:
        return run_device(self.model, self.batch)


@dataclass
class ProblemCopies:
    """The problem, the batch its runs use, and its model cast to other dtypes, each made once per sweep."""

    problem: ModelProblem
    given_batch: Any = None  # the runs' batch where not the sweep's fixed one (a training step's)
    _casts: dict[torch.dtype, torch.nn.Module] = field(default_factory=dict)
    # What the runs have learned of the step's random draws, so that every run is given the same (measuring/draws.py).
    draws: object = None
    # Which of the step's solves is the one of record, as the contract check found it (measuring/contract.py).
    solve_of_record: int = 0

    @property
    def model(self) -> torch.nn.Module:
        return self.problem.model

    @property
    def trajectory(self) -> TrajectoryProblem | None:
        """The problem where it is one solve on [0, 1] whose loss reads every state (its yardsticks take a shortcut)."""
        return self.problem if isinstance(self.problem, TrajectoryProblem) else None

    @property
    def differentiates_batch(self) -> bool:
        """Whether the runs differentiate the loss with respect to the batch: a trajectory problem's y0, whose gradient
        is the tool's own measurement. A step's batch is handed to the user's code as their training hands it, no
        tensor requiring grad: asking for its gradient changes what some code does (torchcde's `cdeint` warns that
        its adjoint gives the path's coefficients none; a time tensor that requires grad takes another path through
        the native solver), and a training step never uses it; the rows' grad_y0 columns are then empty."""
        return self.trajectory is not None

    @cached_property
    def batch(self) -> Any:
        """The runs' batch: the sweep's fixed batch (batch 0) as the model built it (float32, on the sweep's device),
        unless another was given."""
        return self.given_batch if self.given_batch is not None else self.problem.sample_batch(0)

    def model_in(self, dtype: torch.dtype) -> torch.nn.Module:
        if dtype == torch.float32:
            return self.model
        if dtype not in self._casts:
            self._casts[dtype] = copy.deepcopy(self.model).to(dtype)
        return self._casts[dtype]


def run_device(model: torch.nn.Module, batch: Any) -> torch.device:
    """Where a run computes: its batch's device, or its model's where the batch holds no tensor."""
    for found in (*floating_inputs(batch), *model.parameters()):
        return found.device
    return torch.device("cpu")


class Mode(Protocol):
    name: str
    description: str

    def prepare(self, copies: ProblemCopies, dtype: torch.dtype) -> PreparedRun: ...


MODES: Registry[Mode] = Registry("mode")


def cast_run(copies: ProblemCopies, dtype: torch.dtype) -> PreparedRun:
    """Parameters and inputs in `dtype`, no autocast: pure low precision, and also the float64 reference."""
    # The parameters are `dtype`: each step's share of a weight's gradient, and their sum, are too.
    return PreparedRun(
        copies.model_in(dtype),
        as_leaves(copies.batch, copies.differentiates_batch, dtype),
        nullcontext,
        None,
        (dtype, dtype),
    )
