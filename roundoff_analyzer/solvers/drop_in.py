"""The native solver with torchdiffeq's calling conventions: the state may be a tuple of tensors, as with
torchdiffeq and rampde. The tuple travels through the solver as one flat tensor per time point, so the
solver itself (forward, stored states, backward, scaling) sees exactly what it sees for a single tensor."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..axes.methods import ExplicitRK
from . import native
from .report import SolveReport
from .scaler import DynamicAdjointScaler

State = torch.Tensor | tuple[torch.Tensor, ...]


def odeint(
    func: Callable[[torch.Tensor, State], State],
    y0: State,
    t: torch.Tensor,
    method: str | ExplicitRK = "rk4",
    scaler: DynamicAdjointScaler | None = None,
    report: SolveReport | None = None,
    params: Sequence[torch.Tensor] | None = None,
    trajectory_dtype: native.TrajectoryDtype = "state",
) -> State:
    """Solve dy/dt = func(t, y) on the fixed grid `t`; the states at every point of `t`, as `y0` is: a tensor of shape
    (len(t), *y0.shape), or a tuple of such tensors, one per part of the state.

    Gradients reach `y0` (each part), `params` (default: the trainable parameters of `func` when it is an
    `nn.Module`) and `t` when it requires them. `trajectory_dtype`: "state" (y0's dtype) or "low" (the
    stored low-precision states themselves).
    """
    if isinstance(y0, torch.Tensor):
        return native.odeint(func, y0, t, method, scaler=scaler, report=report, params=params, trajectory_dtype=trajectory_dtype)
    parts = tuple(y0)
    if not parts or not all(isinstance(p, torch.Tensor) for p in parts):
        raise TypeError("y0 must be a tensor or a non-empty tuple of tensors")
    if len({p.dtype for p in parts}) > 1:
        raise TypeError(f"the parts of y0 must share one dtype, got {', '.join(sorted({str(p.dtype) for p in parts}))}")
    if params is None:
        params = [p for p in func.parameters() if p.requires_grad] if isinstance(func, torch.nn.Module) else []
    flat = _FlatDynamics(func, [p.shape for p in parts])
    solution = native.odeint(
        flat, torch.cat([p.reshape(-1) for p in parts]), t, method, scaler=scaler, report=report, params=params,
        trajectory_dtype=trajectory_dtype,
    )  # fmt: skip
    return flat.split(solution, leading=(t.numel(),))


class _FlatDynamics(torch.nn.Module):
    """f on one flat tensor: split it into the tuple's parts, call f, flatten what it returns."""

    def __init__(self, func, shapes: list[torch.Size]) -> None:
        super().__init__()
        self.func, self.shapes = func, shapes
        self.sizes = [shape.numel() for shape in shapes]

    def split(self, flat: torch.Tensor, leading: tuple[int, ...] = ()) -> tuple[torch.Tensor, ...]:
        pieces = flat.split(self.sizes, dim=-1)
        return tuple(piece.reshape(*leading, *shape) for piece, shape in zip(pieces, self.shapes))

    def forward(self, t, y):
        derivative = self.func(t, self.split(y))
        return torch.cat([d.reshape(-1) for d in derivative])
