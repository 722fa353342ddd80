"""The batch size said beside every ratio to the gradient noise, read from the batch's structure, with where it was
read.

A training step's batch may hold tensors whose first dimension is time: torchdiffeq's ode_demo hands its step y0 of 20
trajectories, t of 10 times and the true trajectories as 10 × 20 × 1 × 2, and the first dimension of the largest of
them is its time axis. The batch is what the solve carries: the first dimension of the state of the step's first
solve, which a tensor of the batch shares. In order: the Problem's own `batch_size`; that dimension (a state of one
dimension is one trajectory); where no solve was seen, the first dimension of the batch's largest tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..axes.models.inputs import tensors_with_names


@dataclass(frozen=True)
class BatchSize:
    size: int
    source: str  # where it was read, in the report's words


def step_batch_size(declared: int | None, batch: Any, state_shapes: Sequence[Sequence[int]]) -> BatchSize:
    """A training step's batch size: `declared` (its Problem's `batch_size`) where given, else read from the shapes of
    the first solve's state (its parts', for a tuple state) and the batch that state came from."""
    if declared is not None:
        return BatchSize(declared, "the Problem's batch_size")
    if not state_shapes:
        return largest_first_dimension(batch)
    shape = tuple(state_shapes[0])
    if len(shape) < 2:
        return BatchSize(1, f"the solve's state {shape} is one trajectory")
    size = shape[0]
    sharing = next(
        (
            f"`{name}` of shape {tuple(tensor.shape)}"
            for name, tensor in tensors_with_names(batch, "batch")
            if size in tensor.shape
        ),
        None,
    )
    where = f"the first dimension of the solve's state {shape}"
    return BatchSize(size, where + (f", which {sharing} shares" if sharing else ""))


def largest_first_dimension(batch: Any) -> BatchSize:
    """The first dimension of the batch's largest floating-point tensor: where no solve says what the batch is."""
    named = [(name, t) for name, t in tensors_with_names(batch, "batch") if t.is_floating_point()]
    if not named:
        return BatchSize(1, "the batch holds no floating-point tensor")
    name, largest = max(named, key=lambda item: item[1].numel())
    size = int(largest.shape[0]) if largest.dim() else 1
    return BatchSize(size, f"the first dimension of the batch's largest tensor, `{name}`")
