"""The native mixed-precision solver: discretise, then optimise, with a hand-written backward.

Forward: each step's slopes and their weighted sum are evaluated under the ambient autocast (so in
the low dtype); the step size multiplies that sum afterwards, in the input's dtype (float32), where
the state update `y <- y + h * sum_i b_i k_i` happens too, and each state is stored in the low dtype;
only those N+1 stored states are kept for backward. Backward: walk the grid back, rebuild each
step's weighted slopes from its stored state, take their vector-Jacobian product with the adjoint
by autograd (optionally under a dynamic adjoint scale), and only then multiply by h, in float32:
the adjoint that enters the low-precision product is not shrunk by the step size, so a small
adjoint does not sink into the low dtype's subnormals as n_timesteps grows. This is the ordering of
"Mixed Precision Training of Neural ODEs", the paper behind rampde (rampde's, in the backward); torchdiffeq and
torchode multiply by h inside the low-precision graph.
In the forward rampde forms h * S in the low dtype (a float32 0-dim h times a low-precision S stays low) and
adds that to its float32 state; `step_product="low"` does the same, for a comparison with it.
Adjoint and parameter gradients accumulate in (at least) float32. One step's graph is freed before
the next is built, and the whole backward is one autocast region, so that each weight is cast to the
low dtype once per backward rather than once per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Literal

import torch

from ..axes.methods import METHODS, ExplicitRK
from ..emulation import active_emulation
from .field_tensors import reached_tensors
from .overflow_stop import stop_if_overflowed
from .scaler import AdjointScalerSlot, DynamicAdjointScaler
from .step_magnitudes import SolveReport
from .unscale import unscale_and_check

OdeFunc = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
TrajectoryDtype = Literal["state", "low"]
# "state": the states in y0's dtype (float32 under autocast), a copy beside the stored low-precision
# ones; "low": the stored low-precision states themselves, as rampde returns them (a third of the
# memory for float16 states, but the loss then sees states rounded to the low dtype, and its
# gradient arrives in the low dtype).
TRAJECTORY_DTYPES: tuple[str, ...] = ("state", "low")
StepProduct = Literal["state", "low"]
# "state": h * S in y0's dtype (float32 under autocast), the low-precision S cast up first (this solver's);
# "low": h * S in S's (the low) dtype, then added to the state, as rampde forms its update.
STEP_PRODUCTS: tuple[str, ...] = ("state", "low")
StepCallback = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class Stepping:
    """How each step is taken beyond its tableau: torchdiffeq's `perturb` (the first stage just after the step's start,
    a last stage at its end just before it), where h * S is formed, a hook called before each step as
    `step_callback(t0, y0, dt)` (torchdiffeq's `callback_step`; y0 without a graph), and one called before each step
    of the backward as `adjoint_callback(t, adjoint, dt)` (torchdiffeq's `callback_step_adjoint`: t the time that
    step starts from, the end of the forward's step, and the adjoint there, a copy)."""

    perturb: bool = False
    step_product: StepProduct = "state"
    step_callback: StepCallback | None = None
    adjoint_callback: StepCallback | None = None


def odeint(
    func: OdeFunc,
    y0: torch.Tensor,
    t: torch.Tensor,
    method: str | ExplicitRK = "rk4",
    scaler: DynamicAdjointScaler | AdjointScalerSlot | None = None,
    report: SolveReport | None = None,
    params: Sequence[torch.Tensor] | None = None,
    trajectory_dtype: TrajectoryDtype = "state",
    stepping: Stepping = Stepping(),
) -> torch.Tensor:
    """Solve dy/dt = func(t, y) on the fixed grid `t`; returns the states at every point of `t`.

    Gradients reach `y0`, `t` and `params`, which defaults to the tensors requiring grad that the field reaches, found
    from its first evaluation (field_tensors.py; that evaluation is the first stage of the first step, so the field
    is evaluated as often as without it), with an `nn.Module`'s own trainable parameters. `trajectory_dtype` is
    "state" (y0's dtype) or "low" (the stored low-precision states, without a second copy). `stepping`: see
    `Stepping`.
    """
    tableau = METHODS.get(method) if isinstance(method, str) else method
    if t.dim() != 1 or t.numel() < 2:
        raise ValueError("t must be a 1-D grid of at least two points")
    if trajectory_dtype not in TRAJECTORY_DTYPES:
        raise ValueError(f"trajectory_dtype must be one of {', '.join(TRAJECTORY_DTYPES)}, not {trajectory_dtype!r}")
    if stepping.step_product not in STEP_PRODUCTS:
        raise ValueError(f"step_product must be one of {', '.join(STEP_PRODUCTS)}, not {stepping.step_product!r}")
    first_stage = None
    if params is None:
        own = [p for p in func.parameters() if p.requires_grad] if isinstance(func, torch.nn.Module) else []
        params, first_stage, stepping = _discovered(func, tableau, y0, t, own, stepping)
    else:
        # Once each (a tensor listed twice would get its gradient twice), and only those that take one.
        params = list({id(p): p for p in params if p.requires_grad}.values())
    return _NativeSolve.apply(func, tableau, scaler, report, trajectory_dtype, stepping, first_stage, y0, t, *params)


def _discovered(func, tableau, y0, t, own, stepping: Stepping):
    """(the tensors gradients reach, the first step's first stage, the stepping left to the solve): the field evaluated
    once where the solve evaluates it first, after the first step's callback, as the solve would call them."""
    if not torch.is_grad_enabled():
        return own, None, stepping
    t = t.detach()
    h = t[1] - t[0]
    h_value = float(h)
    callback = stepping.step_callback
    if callback is not None:
        callback(t[0], y0.detach(), h)
        stepping = replace(stepping, step_callback=_after_the_first(callback))
    time = t[0] + tableau.c[0] * h_value
    if stepping.perturb:
        time = _next_float(time, math.copysign(1.0, h_value))
    found = reached_tensors(func, time, y0, own)
    return found.params, found.first_stage, stepping


def _after_the_first(callback: StepCallback) -> StepCallback:
    """`callback` for every step but the first, whose call came before the solve."""
    first = [True]

    def later(t0, y, dt):
        if first[0]:
            first[0] = False
        else:
            callback(t0, y, dt)

    return later


def increment(func: OdeFunc, tableau: ExplicitRK, t: torch.Tensor, y: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """h * sum_i b_i k_i for one explicit Runge-Kutta step from (t, y), as the solver forms it: the
    weighted slopes in the ambient (autocast) dtype, times h in y's dtype; h a 0-dim tensor."""
    return h * weighted_slopes(func, tableau, t, y, h).to(y.dtype)


def weighted_slopes(
    func: OdeFunc,
    tableau: ExplicitRK,
    t: torch.Tensor,
    y: torch.Tensor,
    h: torch.Tensor,
    h_value: float | None = None,
    perturb: bool = False,
    first_stage: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum_i b_i k_i of one explicit Runge-Kutta step from (t, y): the part of the step that runs in the low dtype.
    `perturb`: the first stage sees the time just after t, a last stage at the step's end the time just before it.
    `first_stage`: the first stage's slope where it was evaluated already."""
    # Stage times from the plain float when there is one (exact: c is 0, 1/2 or 1 and h a float32 or
    # float64 number); without it, from the tensor, so that gradients with respect to t reach them.
    # Inside the stages h scales a low-precision slope as a 0-dim tensor, so the product is in the
    # slope's dtype, as in rampde's and torchdiffeq's stages.
    scaled: dict[float, torch.Tensor] = {1.0: h}
    stages: list[torch.Tensor] = []
    width = h if h_value is None else h_value
    rows = zip(tableau.a, tableau.c)
    if first_stage is not None:
        stages.append(first_stage)
        next(rows)
    for a_row, c in rows:
        stage_y = y
        for a_ij, k_j in zip(a_row, stages):
            if a_ij:
                if a_ij not in scaled:
                    scaled[a_ij] = h * a_ij
                stage_y = stage_y + scaled[a_ij] * k_j
        time = t + c * width
        if perturb and (not stages or (c == 1.0 and len(stages) == len(tableau.c) - 1)):
            toward = math.copysign(1.0, h_value if h_value is not None else float(h.detach()))
            time = _next_float(time, toward if not stages else -toward)
        stages.append(func(time, stage_y))
    weighted = sum(b * k for b, k in zip(tableau.b, stages) if b)
    assert isinstance(weighted, torch.Tensor)  # every tableau has a nonzero weight
    return weighted


def _next_float(time: torch.Tensor, toward: float) -> torch.Tensor:
    """The float next to `time` in the direction of `toward`; a gradient passes through as if unchanged."""
    nudged = torch.nextafter(time.detach(), time.detach() + toward)
    return time + (nudged - time).detach() if time.requires_grad else nudged


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


class _NativeSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, func, tableau, scaler, report, trajectory_dtype, stepping, first_stage, y0, t, *params):
        device_type = y0.device.type
        autocast_on, autocast_dtype = _autocast_state(device_type)
        low_dtype = autocast_dtype if autocast_on else y0.dtype
        # Step sizes, all in one op: as 0-dim tensors for products and as plain floats for stage times.
        differences = t[1:] - t[:-1]
        steps = list(zip(differences.unbind(), differences.tolist()))
        stored = torch.empty((len(steps) + 1, *y0.shape), dtype=low_dtype, device=y0.device)
        # Under emulated arithmetic the states are stored in float32 holding the format's values.
        emulation = active_emulation()
        store = emulation.store if emulation is not None else (lambda x: x)
        separate = trajectory_dtype == "state" and (low_dtype != y0.dtype or emulation is not None)
        trajectory = torch.empty(stored.shape, dtype=y0.dtype, device=y0.device) if separate else stored
        y = y0.detach()
        stored[0] = store(y)
        if separate:
            trajectory[0] = y
        perturb, low_product, callback = stepping.perturb, stepping.step_product == "low", stepping.step_callback
        # One op for every step's start rather than one indexing per step.
        for k, (start, (h, h_value)) in enumerate(zip(t.unbind(), steps)):
            if callback is not None:
                callback(start, y, h)
            slopes = weighted_slopes(func, tableau, start, y, h, h_value, perturb, first_stage)
            first_stage = None
            y = y + ((h * slopes).to(y.dtype) if low_product else h * slopes.to(y.dtype))
            stored[k + 1] = store(y)
            if separate:
                trajectory[k + 1] = y
        ctx.func, ctx.tableau, ctx.scaler, ctx.report, ctx.steps, ctx.perturb = (
            func,
            tableau,
            scaler,
            report,
            steps,
            perturb,
        )
        ctx.adjoint_callback = stepping.adjoint_callback
        ctx.autocast = (autocast_on, autocast_dtype)
        ctx.low_dtype, ctx.state_dtype, ctx.emulation = low_dtype, y0.dtype, emulation
        ctx.save_for_backward(t, stored, *params)
        return trajectory

    @staticmethod
    def backward(ctx, grad_trajectory):
        t, stored, *params = ctx.saved_tensors
        # When the stored states are also the returned trajectory they come back attached to this
        # very node; each step's rebuilt graph has to start from a plain leaf.
        stored = stored.detach()
        report, steps = ctx.report, ctx.steps
        autocast_on, autocast_dtype = ctx.autocast
        accumulate = torch.promote_types(ctx.state_dtype, torch.float32)
        device_type = stored.device.type
        n_steps = len(steps)
        scaler = ctx.scaler.current if isinstance(ctx.scaler, AdjointScalerSlot) else ctx.scaler
        step = _BackwardStep(
            ctx.func,
            ctx.tableau,
            scaler,
            params,
            ctx.state_dtype,
            ctx.low_dtype,
            accumulate,
            report is not None,
            ctx.emulation,
            ctx.perturb,
        )

        # A copy: the adjoint is updated in place, and grad_trajectory is not ours to change.
        adjoint = grad_trajectory[n_steps].to(accumulate, copy=True)
        param_grads = [torch.zeros(p.shape, dtype=accumulate, device=p.device) for p in params]
        # Gradients with respect to the grid: each step's ends enter its increment as two more inputs.
        grad_t = torch.zeros(t.shape, dtype=accumulate, device=t.device) if ctx.needs_input_grad[8] else None
        points = t.detach().unbind()  # the stage times need no graph: a gradient for t goes through `ends`
        adjoint_callback = ctx.adjoint_callback
        with torch.enable_grad(), torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_on):
            for k in reversed(range(n_steps)):
                if adjoint_callback is not None:
                    adjoint_callback(points[k + 1], adjoint.clone(), steps[k][0])
                ends = (
                    (points[k].detach().requires_grad_(), points[k + 1].detach().requires_grad_())
                    if grad_t is not None
                    else None
                )
                vjp_y, vjp_params, held, finite = step(points[k], steps[k], stored[k], adjoint, ends)
                if grad_t is not None:
                    *vjp_params, grad_start, grad_end = vjp_params
                    grad_t[k] += grad_start
                    grad_t[k + 1] += grad_end
                if report is not None:
                    # The adjoint entering this step's product, and that adjoint as the low dtype holds it
                    # (scaled, cast): the second is the one whose range can overflow or underflow.
                    report.record_backward(n_steps - 1 - k, adjoint, held, finite)
                stop_if_overflowed(finite, n_steps - 1 - k)
                adjoint.add_(vjp_y).add_(grad_trajectory[k].to(accumulate))
                if param_grads:
                    torch._foreach_add_(param_grads, vjp_params)
                # Summed: kept, they would stay alive through the next step's product, at its peak memory.
                del vjp_y, vjp_params, held
        grad_params = [g.to(p.dtype) for g, p in zip(param_grads, params)]
        grad_t = grad_t.to(t.dtype) if grad_t is not None else None
        return (None, None, None, None, None, None, None, adjoint.to(ctx.state_dtype), grad_t, *grad_params)


def _unshared(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """`parts`, each its own tensor: autograd hands one gradient to every input of a sum (the state and a tensor of
    its shape added to it, `net(y + c)`), and the step size then multiplies each part in place."""
    held: set[int] = set()
    for i, part in enumerate(parts):
        pointer = part.data_ptr()
        if pointer in held and part.numel():
            parts[i] = part.clone()
        held.add(pointer)
    return parts


class _BackwardStep:
    """One step back: rebuild the step's increment from its stored state and take its vector-Jacobian
    product with the adjoint; with a scaler, redo it at half the scale while it is non-finite."""

    def __init__(
        self,
        func,
        tableau,
        scaler,
        params,
        state_dtype,
        low_dtype,
        accumulate,
        recording,
        emulation=None,
        perturb=False,
    ):
        self.func, self.tableau, self.scaler, self.params, self.emulation = func, tableau, scaler, params, emulation
        self.perturb = perturb
        self.state_dtype, self.low_dtype, self.accumulate, self.recording = (
            state_dtype,
            low_dtype,
            accumulate,
            recording,
        )
        # Without a scaler and without a report nobody reads `finite`: no check at all.
        self.checking = scaler is not None or recording

    def __call__(self, t_k, step, y_stored, adjoint, ends=None):
        """(vjp w.r.t. the state, vjp w.r.t. each parameter (then each of `ends`, when given), the adjoint as
        held in the low dtype or None, finite); the vjps are of the step's whole increment h * sum_i b_i k_i."""
        scaler = self.scaler
        eps = self.emulation.settings.format.eps if self.emulation is not None else None
        scale = scaler.scale_for(adjoint, self.low_dtype, eps) if scaler is not None else None
        while True:
            parts, slopes = self._vjp(t_k, step, y_stored, adjoint, scale, ends)
            finite = unscale_and_check(parts, scale) if self.checking else True
            if finite or scaler is None:
                break
            # The graph was freed by the product; the retry rebuilds it (it recomputes the same values).
            scale = scaler.backoff()
        # The step size, applied after the low-precision product and in the accumulation dtype.
        h = step[0]
        torch._foreach_mul_(parts, h.to(self.accumulate))
        if ends is not None:
            # h = end - start also multiplies the slopes outside them: d(h a.S)/d(start, end) = (-1, +1) a.S.
            outer = (adjoint * slopes.detach().to(self.accumulate)).sum()
            parts[-2].sub_(outer)
            parts[-1].add_(outer)
        held = self._held(adjoint, scale, slopes.dtype) if self.recording else None
        return parts[0], parts[1:], held, finite

    def _vjp(self, t_k, step, y_stored, adjoint, scale, ends):
        emulation = self.emulation
        with emulation.reenter() if emulation is not None else nullcontext():
            y = y_stored.to(self.state_dtype).requires_grad_(True)
            if ends is None:
                h, h_value = step
                slopes = weighted_slopes(self.func, self.tableau, t_k, y, h, h_value, self.perturb)
            else:  # the step size from the ends, inside the graph
                slopes = weighted_slopes(self.func, self.tableau, ends[0], y, ends[1] - ends[0], None, self.perturb)
        entering = (adjoint if scale is None else adjoint * scale).to(slopes.dtype)
        entering = emulation.store(entering, "backward") if emulation is not None else entering
        inputs = (y, *self.params, *(ends or ()))
        # Outside autocast, as torch runs any backward: autocast applies to the rebuilt forward only.
        with torch.autocast(y.device.type, enabled=False):
            grads = torch.autograd.grad(slopes, inputs, entering, allow_unused=True)
        parts = [
            torch.zeros(x.shape, dtype=self.accumulate, device=x.device) if g is None else g.to(self.accumulate)
            for g, x in zip(grads, inputs)
        ]
        return _unshared(parts), slopes

    def _held(self, adjoint, scale, entering_dtype):
        # What enters the low-precision product: the scaled adjoint in the autocast dtype. When the
        # increment's dtype is wider (otflow's `cat` promotes to float32), the product itself gets the
        # wider copy, but the low dtype is where the adjoint has to fit.
        held = (adjoint if scale is None else adjoint * scale).to(self.low_dtype)
        return self.emulation.store(held, "backward") if self.emulation is not None else held
