"""Terminal events on a fixed grid, as torchdiffeq's fixed-grid solvers find them: steps of `step_size` from t0 until
the event function changes sign, then bisection (to `atol`) on the last step's interpolant.

The steps are taken by the native solver in chunks, each chunk one solve whose start is the previous chunk's end, so
that gradients reach y0 and the parameters through every step. As in torchdiffeq's `odeint(..., event_fn=...)`, the
event time itself carries no gradient (torchdiffeq's `odeint_event` adds one by the implicit function theorem).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .grid_output import cubic_hermite, linear

MAX_STEPS = 20000  # torchdiffeq's bound on the steps before an event
_FIRST_CHUNK, _LARGEST_CHUNK = 8, 512


def solve_until_event(
    solve: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    slope: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    event: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    y0: torch.Tensor,
    t: torch.Tensor,
    step_size: float | torch.Tensor,
    interp: str,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(event time, states at t0 and at the event); `solve(y, grid)` the states on `grid` from y at grid[0]."""
    direction = 1.0 if bool(t[1] >= t[0]) else -1.0
    start = t[0]
    with torch.no_grad():
        signs = torch.sign(event(start, y0))

    def crossing(time, y):
        return torch.sign(torch.min(event(time, y) * signs))

    sign0 = crossing(start, y0)
    y, taken, chunk = y0, 0, _FIRST_CHUNK
    while True:
        # Times by repeated addition of the step, as torchdiffeq advances them.
        times = [start]
        for _ in range(min(chunk, MAX_STEPS - taken)):
            times.append(times[-1] + direction * step_size)
        grid = torch.stack(times)
        states = solve(y, grid)
        for k in range(1, grid.numel()):
            if bool(crossing(grid[k], states[k]) != sign0):
                return _bisect(states[k - 1], states[k], grid[k - 1], grid[k], sign0, crossing, slope, interp, tol, y0)
        taken += grid.numel() - 1
        if taken >= MAX_STEPS:
            raise RuntimeError(f"no event within {MAX_STEPS} steps of step_size {float(step_size):g}")
        y, start, chunk = states[-1], grid[-1], min(2 * chunk, _LARGEST_CHUNK)


def _bisect(y_start, y_end, start, end, sign0, crossing, slope, interp, tol, y0):
    if interp == "cubic":
        f_start, f_end = slope(start, y_start), slope(end, y_end)

        def at(time):
            return cubic_hermite(start, end, y_start, y_end, f_start, f_end, time)
    else:

        def at(time):
            return linear(start, end, y_start, y_end, time)

    low, high = start.detach(), end.detach()
    with torch.no_grad():
        iterations = math.ceil(math.log(abs(float(high - low)) / tol) / math.log(2.0))
        for _ in range(max(iterations, 0)):
            middle = (low + high) / 2.0
            same = crossing(middle, at(middle)) == sign0
            low, high = torch.where(same, middle, low), torch.where(same, high, middle)
        event_time = (low + high) / 2.0
    return event_time, torch.stack([y0, at(event_time)])
