"""torchdiffeq's fixed-grid options: the grid the solver steps on (`step_size`, `grid_constructor`), and the states
at the requested times read off it (`interp`: "linear" or "cubic" Hermite). Either direction of time."""

from __future__ import annotations

from collections.abc import Callable

import torch

INTERPOLATIONS = ("linear", "cubic")


def step_size_grid(t: torch.Tensor, step_size: float | torch.Tensor) -> torch.Tensor:
    """Steps of `step_size` from t[0] towards t[-1], the last one shortened to end on t[-1] exactly."""
    span = (t[-1] - t[0]).abs()
    n_points = int(torch.ceil(span / step_size + 1).item())
    direction = 1.0 if bool(t[-1] >= t[0]) else -1.0
    offsets = torch.arange(0, n_points, dtype=t.dtype, device=t.device) * step_size
    grid = t[0] + offsets if direction > 0 else t[0] - offsets
    return torch.cat([grid[:-1], t[-1:]])


def checked_grid(grid: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    if not isinstance(grid, torch.Tensor) or grid.dim() != 1 or grid.numel() < 2:
        raise ValueError("grid_constructor must return a 1-D tensor of at least two times")
    if bool(grid[0] != t[0]) or bool(grid[-1] != t[-1]):
        raise ValueError("the grid of grid_constructor must start at t[0] and end at t[-1]")
    return grid


def read_off(
    trajectory: torch.Tensor,
    grid: torch.Tensor,
    t: torch.Tensor,
    interp: str,
    slope: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The states at the times `t`, from the states `trajectory` at the times `grid`: each time from the first step
    whose end reaches it, as torchdiffeq reads its fixed grids. `slope(t, y)` for the cubic interpolation."""
    forward = bool(grid[-1] >= grid[0])
    states = [trajectory[0]]
    j = 1
    for k in range(grid.numel() - 1):
        start, end = grid[k], grid[k + 1]
        slopes = None
        while j < t.numel() and (bool(end >= t[j]) if forward else bool(end <= t[j])):
            if interp == "cubic":
                slopes = slopes or (slope(start, trajectory[k]), slope(end, trajectory[k + 1]))
                states.append(cubic_hermite(start, end, trajectory[k], trajectory[k + 1], *slopes, t[j]))
            else:
                states.append(linear(start, end, trajectory[k], trajectory[k + 1], t[j]))
            j += 1
    return torch.stack(states)


def linear(start, end, y_start, y_end, at):
    if bool(at == start):
        return y_start
    if bool(at == end):
        return y_end
    return y_start + (at - start) / (end - start) * (y_end - y_start)


def cubic_hermite(start, end, y_start, y_end, f_start, f_end, at):
    s = (at - start) / (end - start)
    h = end - start
    return (
        (1 + 2 * s) * (1 - s) * (1 - s) * y_start
        + s * (1 - s) * (1 - s) * h * f_start
        + s * s * (3 - 2 * s) * y_end
        + s * s * (s - 1) * h * f_end
    )


class EqualSteps:
    """A `grid_constructor` (torchdiffeq's fixed-grid option, and this package's `odeint`'s): `n_steps` equal steps from
    t[0] to t[-1], whatever the times in between; the states at `t` are read off the grid by the solver's `interp`."""

    def __init__(self, n_steps: int) -> None:
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
            raise ValueError(f"n_steps must be a whole number of at least 1, not {n_steps!r}")
        self.n_steps = n_steps

    def __call__(self, func, y0, t: torch.Tensor) -> torch.Tensor:
        return equal_grid(float(t[0]), float(t[-1]), self.n_steps, t.dtype, t.device)

    def __repr__(self) -> str:
        return f"equal_steps({self.n_steps})"


def equal_steps(n_steps: int) -> EqualSteps:
    """`options=dict(grid_constructor=equal_steps(32))`: 32 equal steps across each solve's span, as a sweep's
    n_timesteps = 32 solved it; output times between steps are interpolated (`interp`, linear by default)."""
    return EqualSteps(n_steps)


def equal_grid(t0: float, t1: float, n_steps: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """`n_steps` equal steps from t0 to t1 (either direction); the ends exactly t0 and t1."""
    return torch.linspace(t0, t1, n_steps + 1, dtype=dtype, device=device)
