"""The native mixed-precision solver: discretise, then optimise, with a hand-written backward.

Forward: each increment is evaluated under the ambient autocast (so in the low dtype), the state
update `y <- y + increment` happens in the input's dtype, and each state is stored in the low dtype;
only those N+1 stored states are kept for backward. Backward: walk the grid back, rebuild each
increment from its stored state, and take its vector-Jacobian product with the adjoint by autograd,
optionally under a dynamic adjoint scale; adjoint and parameter gradients accumulate in (at least)
float32.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..methods import METHODS, ExplicitRK
from .report import SolveReport
from .scaler import DynamicAdjointScaler

OdeFunc = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def odeint(
    func: OdeFunc,
    y0: torch.Tensor,
    t: torch.Tensor,
    method: str | ExplicitRK = "rk4",
    scaler: DynamicAdjointScaler | None = None,
    report: SolveReport | None = None,
    params: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Solve dy/dt = func(t, y) on the fixed grid `t`; returns the states at every point of `t`.

    `params` defaults to the trainable parameters of `func` when it is an `nn.Module`; gradients
    reach exactly those tensors and `y0`.
    """
    tableau = METHODS.get(method) if isinstance(method, str) else method
    if t.dim() != 1 or t.numel() < 2:
        raise ValueError("t must be a 1-D grid of at least two points")
    if params is None:
        params = [p for p in func.parameters() if p.requires_grad] if isinstance(func, torch.nn.Module) else []
    return _NativeSolve.apply(func, tableau, scaler, report, y0, t, *params)


def increment(func: OdeFunc, tableau: ExplicitRK, t: torch.Tensor, y: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """h * sum_i b_i k_i for one explicit Runge-Kutta step from (t, y)."""
    stages: list[torch.Tensor] = []
    for a_row, c in zip(tableau.a, tableau.c):
        stage_y = y
        for a_ij, k_j in zip(a_row, stages):
            if a_ij:
                stage_y = stage_y + (h * a_ij) * k_j
        stages.append(func(t + c * h, stage_y))
    weighted = sum(b * k for b, k in zip(tableau.b, stages) if b)
    return h * weighted


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


class _NativeSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, func, tableau, scaler, report, y0, t, *params):
        device_type = y0.device.type
        autocast_on, autocast_dtype = _autocast_state(device_type)
        low_dtype = autocast_dtype if autocast_on else y0.dtype
        n_steps = t.numel() - 1
        trajectory = torch.empty((n_steps + 1, *y0.shape), dtype=y0.dtype, device=y0.device)
        stored = torch.empty((n_steps + 1, *y0.shape), dtype=low_dtype, device=y0.device)
        y = y0.detach()
        trajectory[0] = y
        stored[0] = y
        for k in range(n_steps):
            h = t[k + 1] - t[k]
            y = y + increment(func, tableau, t[k], y, h).to(y.dtype)
            trajectory[k + 1] = y
            stored[k + 1] = y
        ctx.func, ctx.tableau, ctx.scaler, ctx.report = func, tableau, scaler, report
        ctx.autocast = (autocast_on, autocast_dtype)
        ctx.low_dtype, ctx.state_dtype = low_dtype, y0.dtype
        ctx.save_for_backward(t, stored, *params)
        return trajectory

    @staticmethod
    def backward(ctx, grad_trajectory):
        t, stored, *params = ctx.saved_tensors
        func, tableau, scaler, report = ctx.func, ctx.tableau, ctx.scaler, ctx.report
        autocast_on, autocast_dtype = ctx.autocast
        accumulate = torch.promote_types(ctx.state_dtype, torch.float32)
        device_type = stored.device.type
        n_steps = t.numel() - 1

        adjoint = grad_trajectory[n_steps].to(accumulate)
        param_grads = [torch.zeros(p.shape, dtype=accumulate, device=p.device) for p in params]
        # Gradients with respect to the grid: each step's ends enter its increment as two more inputs.
        grad_t = torch.zeros(t.shape, dtype=accumulate, device=t.device) if ctx.needs_input_grad[5] else None
        for k in reversed(range(n_steps)):
            ends = [t[k].detach().requires_grad_(), t[k + 1].detach().requires_grad_()] if grad_t is not None else [t[k], t[k + 1]]
            with torch.enable_grad(), torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_on):
                y = stored[k].to(ctx.state_dtype).requires_grad_(True)
                step_increment = increment(func, tableau, ends[0], y, ends[1] - ends[0])
            wrt = [*params, *ends] if grad_t is not None else params
            vjp_y, vjp_params, low_adjoint, finite = _vjp(step_increment, y, wrt, adjoint, scaler, ctx.low_dtype, accumulate)
            if grad_t is not None:
                *vjp_params, grad_start, grad_end = vjp_params
                grad_t[k] += grad_start
                grad_t[k + 1] += grad_end
            adjoint = adjoint + vjp_y + grad_trajectory[k].to(accumulate)
            if report is not None:
                report.record_backward(n_steps - 1 - k, adjoint, low_adjoint, finite)
            for total, part in zip(param_grads, vjp_params):
                total.add_(part)
        grad_params = [g.to(p.dtype) for g, p in zip(param_grads, params)]
        grad_t = grad_t.to(t.dtype) if grad_t is not None else None
        return (None, None, None, None, adjoint.to(ctx.state_dtype), grad_t, *grad_params)


def _vjp(step_increment, y, params, adjoint, scaler, low_dtype, accumulate):
    """Vector-Jacobian product of one increment with the adjoint, redone at half the scale while non-finite."""
    scale = scaler.scale_for(adjoint, low_dtype) if scaler is not None else 1.0
    inputs = (y, *params)
    while True:
        low_adjoint = (adjoint * scale).to(step_increment.dtype)
        grads = torch.autograd.grad(step_increment, inputs, low_adjoint, retain_graph=scaler is not None, allow_unused=True)
        parts = [
            torch.zeros(x.shape, dtype=accumulate, device=x.device) if g is None else g.to(accumulate) / scale
            for g, x in zip(grads, inputs)
        ]
        finite = bool(torch.stack([torch.isfinite(p).all() for p in parts]).all())
        if finite or scaler is None:
            return parts[0], parts[1:], low_adjoint, finite
        scale = scaler.backoff()
