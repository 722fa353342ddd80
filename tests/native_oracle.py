"""A plain implementation of the native solver's arithmetic, kept as the oracle of the optimised one.

It computes what `roundoff_analyzer.solvers.odeint` computes, op for op in the same order, without any
of its optimisations: each backward step opens its own autocast region (so every weight is cast again,
to the same values), keeps its graph until the step ends, divides by the adjoint scale and checks
finiteness tensor by tensor, and adds gradients one tensor at a time. Run in the same process on the
same machine, the two must agree bit for bit; float32 kernels differ between CPUs, so numbers frozen on
one machine are no oracle for another.

The arithmetic (rampde's, from its paper "Mixed Precision Training of Neural ODEs"): forward, the slopes
k_i and their weighted sum S = sum_i b_i k_i in the autocast dtype, then y <- y + h * S in the state's
dtype, each state stored in the low dtype. Backward, for each step from the last: rebuild S from the
stored state (or, with stored stages, take the forward's own graph of S), take the vector-Jacobian product of S with
the (scaled) adjoint in the low dtype, unscale, and only then multiply by h in float32 as it is added to the adjoint
and the parameter gradients (`add(part, alpha=h)`, one operation).
"""

from __future__ import annotations

import torch

from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.solvers import DynamicAdjointScaler


def _weighted_slopes(func, tableau, t, y, h, perturb=False):
    stages = []
    width = float(h)  # a stage's time is t + c h with c h a Python float, as the solver defines it
    for i, (a_row, c) in enumerate(zip(tableau.a, tableau.c)):
        stage_y = y
        for a_ij, k_j in zip(a_row, stages):
            if a_ij:
                stage_y = stage_y + (h * a_ij) * k_j
        time = t + c * width
        if perturb and (i == 0 or (c == 1.0 and i == len(tableau.c) - 1)):
            # torchdiffeq's perturb: the first stage just after the step's start, a last one at its end just before it
            toward = 1.0 if width > 0 else -1.0
            time = torch.nextafter(time, time + (toward if i == 0 else -toward))
        stages.append(func(time, stage_y))
    return sum(b * k for b, k in zip(tableau.b, stages) if b)


def odeint(
    func, y0, t, method="rk4", scaler: DynamicAdjointScaler | None = None, perturb: bool = False, stages: bool = False
):
    """`stages`: each step's graph kept from the forward and differentiated in the backward (`checkpoint="stages"`),
    else rebuilt there from the stored low-precision state (`"states"`)."""
    tableau = METHODS.get(method)
    params = [p for p in func.parameters() if p.requires_grad]
    return _Solve.apply(func, tableau, scaler, perturb, stages, y0, t, *params)


class _Solve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, func, tableau, scaler, perturb, stages, y0, t, *params):
        device = y0.device.type
        autocast_on, autocast_dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
        low_dtype = autocast_dtype if autocast_on else y0.dtype
        trajectory, stored = [y0.detach()], [y0.detach().to(low_dtype)]
        y = y0.detach()
        ctx.kept = [] if stages else None
        for k in range(t.numel() - 1):
            h = t[k + 1] - t[k]
            if stages:
                with torch.enable_grad():
                    leaf = y.detach().requires_grad_(True)
                    slopes = _weighted_slopes(func, tableau, t[k], leaf, h, perturb)
                ctx.kept.append((leaf, slopes))
                y = y + h * slopes.detach().to(y.dtype)
            else:
                y = y + h * _weighted_slopes(func, tableau, t[k], y, h, perturb).to(y.dtype)
            trajectory.append(y)
            stored.append(y.to(low_dtype))
        ctx.func, ctx.tableau, ctx.scaler, ctx.perturb = func, tableau, scaler, perturb
        ctx.autocast, ctx.low_dtype, ctx.state_dtype = (autocast_on, autocast_dtype), low_dtype, y0.dtype
        ctx.save_for_backward(t, torch.stack(stored), *params)
        return torch.stack(trajectory)

    @staticmethod
    def backward(ctx, grad_trajectory):
        t, stored, *params = ctx.saved_tensors
        autocast_on, autocast_dtype = ctx.autocast
        accumulate = torch.promote_types(ctx.state_dtype, torch.float32)
        n_steps = t.numel() - 1
        adjoint = grad_trajectory[n_steps].to(accumulate)
        param_grads = [torch.zeros(p.shape, dtype=accumulate) for p in params]
        for k in reversed(range(n_steps)):
            h = t[k + 1] - t[k]
            scale = ctx.scaler.scale_for(adjoint, ctx.low_dtype) if ctx.scaler is not None else 1.0
            while True:
                if ctx.kept is not None:
                    y, slopes = ctx.kept[k]
                else:
                    with (
                        torch.enable_grad(),
                        torch.autocast(stored.device.type, dtype=autocast_dtype, enabled=autocast_on),
                    ):
                        y = stored[k].to(ctx.state_dtype).requires_grad_(True)
                        slopes = _weighted_slopes(ctx.func, ctx.tableau, t[k], y, h, ctx.perturb)
                cotangent = (adjoint * scale).to(slopes.dtype)
                grads = torch.autograd.grad(
                    slopes, (y, *params), cotangent, allow_unused=True, retain_graph=ctx.kept is not None
                )
                parts = [
                    torch.zeros(x.shape, dtype=accumulate) if g is None else g.to(accumulate) / scale
                    for g, x in zip(grads, (y, *params))
                ]
                if ctx.scaler is None or all(bool(torch.isfinite(p).all()) for p in parts):
                    break
                scale = ctx.scaler.backoff()
            width = float(h.to(accumulate))  # h times each part inside the sum, as one operation
            adjoint = adjoint.add(parts[0], alpha=width) + grad_trajectory[k].to(accumulate)
            for total, part in zip(param_grads, parts[1:]):
                total.add_(part, alpha=width)
        return (
            None,
            None,
            None,
            None,
            None,
            adjoint.to(ctx.state_dtype),
            None,
            *[g.to(p.dtype) for g, p in zip(param_grads, params)],
        )
