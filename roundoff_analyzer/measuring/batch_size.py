"""The batch size said beside every ratio to the gradient noise: the points of one minibatch, what `sample_batch`
returns, with where it was read.

The minibatch's size is the leading dimension of its tensors. A batch may also hold tensors whose leading dimension
is time: torchdiffeq's ode_demo hands its step y0 of 20 trajectories, t of 10 times and the true trajectories as
10 × 20 × 1 × 2. The solve's state is not the answer either: Rubanova et al.'s latent ODE solves a state of
(1, 50, 20), its z0 samples first, for a minibatch of 50 series. So, in order: the Problem's own `batch_size`; the
leading dimension of the batch's tensors where they all share it; where they do not, the one of their leading
dimensions that the first solve's state holds (a state of one dimension is one trajectory). Where that leaves none or
several, the size is not known and `BatchSize.source` says why, rather than a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..axes.models.inputs import tensors_with_names

_DECLARE = "give the Problem its batch_size"


@dataclass(frozen=True)
class BatchSize:
    size: int | None  # None: not known
    source: str  # where it was read, or why it is not known, in the report's words


def step_batch_size(declared: int | None, batch: Any, state_shapes: Sequence[Sequence[int]]) -> BatchSize:
    """A training step's batch size: `declared` (its Problem's `batch_size`) where given, else the leading dimension
    of the minibatch `batch`, told apart from a time axis by the shapes of the first solve's state (its parts', for a
    tuple state)."""
    if declared is not None:
        return BatchSize(declared, "the Problem's batch_size")
    state = tuple(tuple(shape) for shape in state_shapes)
    if len(state) == 1 and len(state[0]) < 2:
        return BatchSize(1, f"the solve's state {state[0]} is one trajectory")
    leading: dict[int, list[str]] = {}
    for name, tensor in tensors_with_names(batch, "batch"):
        if tensor.dim():
            leading.setdefault(int(tensor.shape[0]), []).append(f"`{name}` of shape {tuple(tensor.shape)}")
    if not leading:
        return BatchSize(None, f"the batch holds no tensor with a leading dimension; {_DECLARE}")
    if len(leading) == 1:
        ((size, names),) = leading.items()
        return BatchSize(size, f"the leading dimension of {_listed(names)}")
    held = [size for size in leading if any(size in shape for shape in state)]
    dimensions = tuple(leading)
    if len(held) == 1:
        size = held[0]
        where = f"the state {state[0]}" if len(state) == 1 else f"the state's parts {state}"
        return BatchSize(
            size,
            f"the leading dimension of {_listed(leading[size])}: of the batch's leading dimensions {dimensions}, the "
            f"one {where} of the step's first solve holds",
        )
    solve = f"the state {state[0] if len(state) == 1 else state} of the step's first solve"
    if not state:
        why = "no solve tells them apart"
    else:
        why = f"{solve} holds {f'{len(held)} of them {tuple(held)}' if held else 'none of them'}"
    return BatchSize(None, f"the batch's tensors lead with {len(dimensions)} sizes {dimensions} and {why}; {_DECLARE}")


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more of the batch's tensors"
