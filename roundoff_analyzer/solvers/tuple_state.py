"""A tuple state (torchdiffeq's convention, e.g. a CNF's (z, log-density)) as the solvers hold it: one flat tensor per
time point, the parts concatenated, so that a solver sees exactly what it sees for a single tensor; and back."""

from __future__ import annotations

import torch

State = torch.Tensor | tuple[torch.Tensor, ...]


class FlatState:
    """y0 as the solver holds it (one flat tensor), and how to give the user's functions and results their shape."""

    def __init__(self, flat: torch.Tensor, shapes: list[torch.Size] | None) -> None:
        self.flat, self.shapes = flat, shapes
        self.sizes = [shape.numel() for shape in shapes] if shapes is not None else None

    @classmethod
    def of(cls, y0: State) -> FlatState:
        if isinstance(y0, torch.Tensor):
            return cls(y0, None)
        parts = tuple(y0)
        if not parts or not all(isinstance(p, torch.Tensor) for p in parts):
            raise TypeError("y0 must be a tensor or a non-empty tuple of tensors")
        if len({p.dtype for p in parts}) > 1:
            raise TypeError(
                f"the parts of y0 must share one dtype, got {', '.join(sorted({str(p.dtype) for p in parts}))}"
            )
        return cls(torch.cat([p.reshape(-1) for p in parts]), [p.shape for p in parts])

    def unflat(self, flat: torch.Tensor) -> State:
        return self.split(flat, None)

    def split(self, flat: torch.Tensor, leading: int | None) -> State:
        if self.shapes is None:
            return flat
        lead = () if leading is None else (leading,)
        pieces = flat.split(self.sizes, dim=-1)
        return tuple(piece.reshape((*lead, *shape)) for piece, shape in zip(pieces, self.shapes))

    def dynamics(self, func):
        return func if self.shapes is None else FlatDynamics(func, self)

    def event(self, event_fn):
        return event_fn if self.shapes is None else (lambda time, y: event_fn(time, self.unflat(y)))


class FlatDynamics(torch.nn.Module):
    """f on one flat tensor: split it into the tuple's parts, call f, flatten what it returns."""

    def __init__(self, func, state: FlatState) -> None:
        super().__init__()
        self.func, self.state = func, state

    def forward(self, t, y):
        derivative = self.func(t, self.state.unflat(y))
        return torch.cat([d.reshape(-1) for d in derivative])
