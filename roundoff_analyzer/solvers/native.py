"""The native mixed-precision solver: discretise, then optimise, with a hand-written backward.

Forward: each step's slopes and their weighted sum are evaluated under the ambient autocast (so in
the low dtype); the step size multiplies that sum afterwards, in the input's dtype (float32), where
the state update `y <- y + h * sum_i b_i k_i` happens too, and each state is stored in the low dtype;
and, where the memory allows (`checkpoint`), each step's stage graph is kept too. Backward: walk the grid back,
take each step's vector-Jacobian product of its weighted slopes with the adjoint by autograd (through the kept
stage graph, or one rebuilt from the stored state: `checkpoint="states"`, the paper's low-memory design),
optionally under a dynamic adjoint scale, and only then multiply by h, in float32:
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
from torch.autograd.graph import get_gradient_edge
from torch.overrides import has_torch_function

from ..axes.methods import METHODS, ExplicitRK
from ..emulation import active_emulation
from .field_tensors import LaterReachChecked, Reached, reached_tensors, refuse_later_reach
from .kept_stages import Checkpoint, TapeMeter, checked_checkpoint, default_budget, fits
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
    step starts from, the end of the forward's step, and the adjoint there, a copy). `later_reach_checked`: where the
    tensors gradients reach were found from the first evaluation, every later one is refused where it uses a tensor
    requiring grad that the first did not (the drop-in's fields may be closures that switch modules at a later time; a
    sweep's contract check sees every evaluation of its step instead, measuring/outside_tensors.py)."""

    perturb: bool = False
    step_product: StepProduct = "state"
    step_callback: StepCallback | None = None
    adjoint_callback: StepCallback | None = None
    later_reach_checked: bool = False


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
    checkpoint: Checkpoint = "auto",
    memory_budget: int | None = None,
) -> torch.Tensor:
    """Solve dy/dt = func(t, y) on the fixed grid `t`; returns the states at every point of `t`.

    Gradients reach `y0`, `t` and `params`, which defaults to the tensors requiring grad that the field reaches, found
    from its first evaluation (field_tensors.py; that evaluation is the first stage of the first step, so the field
    is evaluated as often as without it), with an `nn.Module`'s own trainable parameters. `trajectory_dtype` is
    "state" (y0's dtype) or "low" (the stored low-precision states, without a second copy). `stepping`: see
    `Stepping`. `checkpoint`: "stages" keeps each step's stage graph for the backward, "states" only the stored states
    (each step rebuilt in the backward: the low-memory design), "auto" the stages where their tape fits
    `memory_budget` bytes (default: half the memory available at the solve's start), see kept_stages.py; with
    `report`, `report.checkpoint` says which ran.
    """
    tableau = METHODS.get(method) if isinstance(method, str) else method
    if t.dim() != 1 or t.numel() < 2:
        raise ValueError("t must be a 1-D grid of at least two points")
    if trajectory_dtype not in TRAJECTORY_DTYPES:
        raise ValueError(f"trajectory_dtype must be one of {', '.join(TRAJECTORY_DTYPES)}, not {trajectory_dtype!r}")
    if stepping.step_product not in STEP_PRODUCTS:
        raise ValueError(f"step_product must be one of {', '.join(STEP_PRODUCTS)}, not {stepping.step_product!r}")
    checked_checkpoint(checkpoint, memory_budget)
    emulated = active_emulation() is not None
    if checkpoint == "stages" and (emulated or t.requires_grad):
        raise ValueError(
            "checkpoint='stages' keeps the forward's stage graphs, which "
            + ("emulated arithmetic does not build" if emulated else "a gradient with respect to t does not use")
            + "; pass checkpoint='states' or 'auto'"
        )
    keeping = checkpoint != "states" and not emulated and not t.requires_grad and torch.is_grad_enabled()
    start = _Start(None, None, None)
    if params is None:
        own = [p for p in func.parameters() if p.requires_grad] if isinstance(func, torch.nn.Module) else []
        reached, stepping = _discovered(func, tableau, y0, t, own, stepping, keeping)
        params = reached.params
        first = reached.first_output if keeping else reached.first_stage
        start = _Start(reached.state, first, _reach_watch(func, own, reached, stepping))
    else:
        # Once each (a tensor listed twice would get its gradient twice), and only those that take one.
        params = list({id(p): p for p in params if p.requires_grad}.values())
    # A field that makes a leaf of its own each evaluation would look like a later reach to the walk of the kept graphs.
    made_leaves = start.watch is not None and start.watch.made_leaves
    keeping = keeping and (y0.requires_grad or bool(params)) and not (made_leaves and checkpoint == "auto")
    if keeping:
        budget = memory_budget if memory_budget is not None or checkpoint == "stages" else default_budget(y0.device)
        keep = _Keep(checkpoint == "stages", budget)
    else:
        keep = None
    return _NativeSolve.apply(func, tableau, scaler, report, trajectory_dtype, stepping, start, keep, y0, t, *params)


@dataclass(frozen=True)
class _Start:
    """What the first evaluation left the solve: the state it was evaluated at (a leaf requiring grad where the stages
    may be kept), its output (with its graph then), and the later-reach watch the field needs, if any."""

    state: torch.Tensor | None
    first_output: torch.Tensor | None
    watch: Reached | None


@dataclass
class _Keep:
    """Whether the stage graphs are kept whatever their size (`checkpoint="stages"`), else the budget in bytes."""

    forced: bool
    budget: int | None


def _reach_watch(func, own, reached: Reached, stepping: Stepping) -> Reached | None:
    """What the later evaluations are checked against, or None where they need no check: not asked for, nothing was
    evaluated (no gradient asked for), or an `nn.Module` field whose first evaluation reached all its trainable
    parameters (a later branch inside it reaches its own parameters, which are always given their gradients)."""
    if not stepping.later_reach_checked or reached.first_output is None:
        return None
    if isinstance(func, torch.nn.Module) and reached.reached_own:
        return None
    return reached


def _discovered(func, tableau, y0, t, own, stepping: Stepping, keeping: bool = False):
    """(what the field's first evaluation found, the stepping left to the solve): the field evaluated once where the
    solve evaluates it first, after the first step's callback, as the solve would call them. Without grad mode nothing
    is evaluated (no gradient is asked for), and the callback is left to the solve."""
    if not torch.is_grad_enabled():
        return Reached(own, None), stepping
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
    return reached_tensors(func, time, y0, own, keep_graph=keeping), stepping


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


@dataclass(frozen=True)
class _Grid:
    """What every step of a solve needs of the grid, computed once for the forward and its backward (a few operations
    per solve rather than a few per step), each value the same bits as the stage's own expression would give.

    `widths`: h_k as 0-dim tensors (t's dtype) and `width_values` as floats; `times[k][i]`: stage i's time in step
    k, t_k + c_i h_k (perturbed as `Stepping.perturb` says); `scaled[k]`: h_k a_ij for each nonzero a_ij of the
    tableau (h_k itself for 1), the 0-dim factor of a stage's slope; `state_widths[k]`: h_k as a 1-element tensor in
    the state's dtype, whose product with a low-precision S is formed in the state's dtype without a separate cast of
    S."""

    widths: list[torch.Tensor]
    width_values: list[float]
    times: list[tuple[torch.Tensor, ...]]
    scaled: list[dict[float, torch.Tensor]]
    state_widths: list[torch.Tensor]


def _grid(t: torch.Tensor, tableau: ExplicitRK, perturb: bool, state_dtype: torch.dtype) -> _Grid:
    t = t.detach()
    differences = t[1:] - t[:-1]
    width_values = differences.tolist()
    if t.dtype in (torch.float32, torch.float64):
        # t_k + (c_i h_k as a Python float): the float converted to t's dtype, then added, as a tensor-scalar sum is.
        offsets = torch.tensor([[c * h for c in tableau.c] for h in width_values], dtype=torch.float64)
        times = t[:-1, None] + offsets.to(device=t.device, dtype=t.dtype)
    else:  # a low-precision t: the stage's own expression, whose kernel rounds a scalar operand differently by device
        times = torch.stack([torch.stack([start + c * h for c in tableau.c]) for start, h in zip(t[:-1], width_values)])
    if perturb:
        # The first stage just after the step's start, a last stage at the step's end (c = 1) just before it.
        toward = torch.where(differences > 0, 1.0, -1.0).to(t.dtype)
        first = torch.nextafter(times[:, 0], times[:, 0] + toward)
        times = torch.cat([first[:, None], times[:, 1:]], dim=1)
        if len(tableau.c) > 1 and tableau.c[-1] == 1.0:
            last = torch.nextafter(times[:, -1], times[:, -1] - toward)
            times = torch.cat([times[:, :-1], last[:, None]], dim=1)
    factors = sorted({a for row in tableau.a for a in row if a and a != 1.0})
    columns = {a: (differences * a).unbind() for a in factors}
    widths = differences.unbind()
    scaled = [{1.0: h, **{a: columns[a][k] for a in factors}} for k, h in enumerate(widths)]
    state_widths = differences.to(state_dtype).split(1)
    return _Grid(
        list(widths), width_values, [tuple(row.unbind()) for row in times.unbind()], scaled, list(state_widths)
    )


def _wider(dtype: torch.dtype, than: torch.dtype) -> bool:
    """Whether `dtype` is a wider real float than `than` (so that it holds every value of it exactly); told from the
    dtypes' sizes, not by torch's `promote_types`, which is an operation dispatched at every step."""
    return dtype.is_floating_point and than.is_floating_point and than.itemsize < dtype.itemsize


def _aligned_rows(rows: torch.Tensor) -> bool:
    """Whether each row of `rows` starts where a fresh tensor would (64 bytes on the CPU, the CUDA allocator's 512),
    so that a kernel that chooses its path by the alignment of its input sees a row as it would see a fresh copy."""
    alignment = 64 if rows.device.type == "cpu" else 512
    return rows[0].numel() * rows.element_size() % alignment == 0 and rows.data_ptr() % alignment == 0


def _stage_slopes(func, tableau: ExplicitRK, y, times, scaled, first_stage=None) -> list[torch.Tensor]:
    """The slopes k_i of one step from y, each stage's state y + sum_j (h a_ij) k_j with the 0-dim factor h a_ij times a
    low-precision slope in the slope's dtype, as `weighted_slopes` forms them."""
    stages = [] if first_stage is None else [first_stage]
    for i in range(len(stages), len(tableau.c)):
        stage_y = y
        for a_ij, k_j in zip(tableau.a[i], stages):
            if a_ij:
                stage_y = stage_y + scaled[a_ij] * k_j
        stages.append(func(times[i], stage_y))
    return stages


def _weighted_sum(tableau: ExplicitRK, stages: list[torch.Tensor]) -> torch.Tensor:
    """sum_i b_i k_i as `weighted_slopes` rounds it (each product, then each partial sum, in the slopes' dtype)."""
    weights = [b for b in tableau.b if b]
    slopes = [k for b, k in zip(tableau.b, stages) if b]
    if weights == [1.0]:
        return slopes[0]
    # Plain products: autograd's `_foreach_mul` would save every slope for a backward, where a product by a number
    # saves nothing.
    total = weights[0] * slopes[0]
    for b, k in zip(weights[1:], slopes[1:]):
        total = total + b * k
    return total


@dataclass(frozen=True)
class _KeptStep:
    """One step's graph kept for the backward: the state leaf it starts from, the graph edges of the outputs whose
    vector-Jacobian product is taken (None for an output that reaches no input), and their dtype. Edges, not the
    outputs themselves: the slopes' values are not needed, and a graph does not hold them (torchdiffeq's does not)."""

    leaf: torch.Tensor
    edges: list
    dtype: torch.dtype
    # Whether every output has the state's shape, the adjoint's (a field's output broadcast against the state does
    # not: autograd.grad then refuses the product).
    shaped: bool = True


def _kept_step(func, tableau: ExplicitRK, leaf, times, scaled, first_stage=None) -> tuple[torch.Tensor, _KeptStep]:
    """(S = sum_i b_i k_i without a graph, the step kept): one step's slopes from `leaf`, their graphs kept; the
    outputs are each slope of nonzero weight (the product of S with the adjoint a is that of each k_i with b_i a), or S
    itself where their dtypes differ (S's dtype is then their promotion)."""
    stages = _stage_slopes(func, tableau, leaf, times, scaled, first_stage)
    outputs = [k_i for b, k_i in zip(tableau.b, stages) if b]
    if any(k_i.dtype != outputs[0].dtype for k_i in outputs):
        outputs = [_weighted_sum(tableau, stages)]
        slopes = outputs[0].detach()
    else:
        slopes = _weighted_sum(tableau, [k_i.detach() for k_i in stages])
    edges = [get_gradient_edge(out) if out.requires_grad else None for out in outputs]
    return slopes, _KeptStep(leaf, edges, outputs[0].dtype, all(out.shape == leaf.shape for out in outputs))


def _check_reach(kept: list[_KeptStep], watch: Reached, tableau: ExplicitRK, grid: _Grid) -> None:
    """The kept graphs walked once for a tensor the first evaluation did not reach (field_tensors.py)."""
    outputs = []
    for k, step in enumerate(kept):
        # Each output's time: its stage's (S where the slopes' dtypes differ: the step's last stage's).
        times = [time for b, time in zip(tableau.b, grid.times[k]) if b]
        if len(times) != len(step.edges):
            times = [grid.times[k][-1]]
        outputs += [(edge.node, edge.output_nr, time) for edge, time in zip(step.edges, times) if edge is not None]
    refuse_later_reach(outputs, [step.leaf for step in kept], watch)


def _detached(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.detach()


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


class _NativeSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, func, tableau, scaler, report, trajectory_dtype, stepping, start, keep, y0, t, *params):
        device_type = y0.device.type
        autocast_on, autocast_dtype = _autocast_state(device_type)
        low_dtype = autocast_dtype if autocast_on else y0.dtype
        perturb, low_product, callback = stepping.perturb, stepping.step_product == "low", stepping.step_callback
        grid = _grid(t, tableau, perturb, y0.dtype)
        steps = list(zip(grid.widths, grid.width_values))
        shape = (len(steps) + 1, *y0.shape)
        # Under emulated arithmetic the states are stored in float32 holding the format's values, and every operation
        # is the emulation's to round: the steps keep the plain expressions it knows.
        emulation = active_emulation()
        store = emulation.store if emulation is not None else (lambda x: x)
        separate = trajectory_dtype == "state" and (low_dtype != y0.dtype or emulation is not None)
        # Where the stages are kept beside a trajectory of their own, the low-precision states are not needed (unless
        # the stages are dropped, when the states so far are stored from the trajectory): none is allocated, since an
        # empty view of a full buffer would keep its storage alive through the backward (the N+1 low-precision states
        # the stored stages do without).
        storing = keep is None or not separate
        stored = torch.empty(shape if storing else (0, *y0.shape), dtype=low_dtype, device=y0.device)
        trajectory = torch.empty(shape, dtype=y0.dtype, device=y0.device) if separate else stored
        y = y0.detach()
        if storing:
            stored[0] = store(y)
        if separate:
            trajectory[0] = y
        # Each state is written straight into the trajectory it is returned in, and stepped on from there, where that
        # row is laid out as a fresh tensor would be (contiguous, as aligned), so that the field computes the same bits.
        rows = trajectory if emulation is None and trajectory.dtype == y0.dtype else None
        if rows is not None and not (y.is_contiguous() and _aligned_rows(rows)):
            rows = None
        # Where the stages are kept, each step's state leaf is its row (no second copy of the states): the rows are
        # written through an alias with its own version counter, so that writing one does not stale what a kept graph
        # saved of another (a change to the returned trajectory still does, and its backward then refuses).
        written = rows.data if rows is not None and keep is not None else rows
        watch = start.watch
        # Kept: (each step's state leaf, the outputs whose vector-Jacobian product the backward takes); None once the
        # solve recomputes instead.
        kept: list | None = [] if keep is not None else None
        meter = TapeMeter() if keep is not None and not keep.forced and len(steps) > 1 else None
        measured: list[int] = []
        if kept is None and watch is not None and not watch.made_leaves:
            func = LaterReachChecked(func, watch)
        first_stage = start.first_output if kept is not None else _detached(start.first_output)
        # One op for every step's start rather than one indexing per step.
        for k, (point, (h, h_value)) in enumerate(zip(t.unbind(), steps)):
            if callback is not None:
                callback(point, y, h)
            if kept is not None:
                leaf = start.state if k == 0 and start.state is not None else y.detach().requires_grad_()
                with torch.enable_grad(), meter.counting() if meter is not None else nullcontext():
                    slopes, kept_step = _kept_step(func, tableau, leaf, grid.times[k], grid.scaled[k], first_stage)
                kept.append(kept_step)
                if meter is not None:
                    measured.append(meter.held())
                    if k == 1:
                        meter = None
                        if not fits(measured[1], measured[0], len(steps), keep.budget):
                            # Over the budget: what was kept is checked and dropped, the rest recomputed.
                            if watch is not None:
                                _check_reach(kept, watch, tableau, grid)
                                func = LaterReachChecked(func, watch)
                            kept = None
                            if not storing:
                                stored = torch.empty(trajectory.shape, dtype=low_dtype, device=y0.device)
                                stored[: k + 1] = trajectory[: k + 1]
                                storing = True
            elif emulation is not None:
                slopes = weighted_slopes(func, tableau, point, y, h, h_value, perturb, first_stage)
            else:
                slopes = _weighted_sum(
                    tableau, _stage_slopes(func, tableau, y, grid.times[k], grid.scaled[k], first_stage)
                )
            first_stage = None
            if low_product:
                increment = (h * slopes).to(y.dtype)
            elif emulation is None and y.dim() and _wider(y.dtype, slopes.dtype):
                # h * S in the state's dtype, S cast up inside the product (exactly: a wider float holds it).
                increment = torch.mul(slopes, grid.state_widths[k])
            else:
                increment = h * slopes.to(y.dtype)
            if rows is None or written is None:
                y = y + increment
            else:
                y = torch.add(y, increment, out=written[k + 1])
                y = rows[k + 1] if written is not rows else y
            if rows is not stored and storing:
                stored[k + 1] = store(y)
            if separate and rows is not trajectory:
                trajectory[k + 1] = y
        ctx.func, ctx.tableau, ctx.scaler, ctx.report, ctx.grid, ctx.perturb = (
            func.func if isinstance(func, LaterReachChecked) else func,
            tableau,
            scaler,
            report,
            grid,
            perturb,
        )
        if kept is not None and watch is not None:
            _check_reach(kept, watch, tableau, grid)
        ctx.kept = kept
        if report is not None:
            report.checkpoint = "stages" if kept is not None else "states"
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
        states = stored.detach().unbind() if len(stored) else [None] * len(t)  # none where the stages were kept
        report, grid = ctx.report, ctx.grid
        autocast_on, autocast_dtype = ctx.autocast
        accumulate = torch.promote_types(ctx.state_dtype, torch.float32)
        device_type = stored.device.type
        n_steps = len(grid.widths)
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
            grid,
        )

        # A copy: the adjoint is updated in place, and grad_trajectory is not ours to change.
        adjoint = grad_trajectory[n_steps].to(accumulate, copy=True)
        # The parameter gradients' sums are made from the first step's parts (`_first_sums`), not allocated beside them:
        # one set of parameter-sized tensors fewer while the tape is still nearly whole, at the backward's peak.
        summed: list[torch.Tensor] = []  # each step's parts are added to these in one operation
        # The loss's gradient at each point of the grid, added where it is not all zeros (a loss of the final state
        # gives zeros everywhere else): which rows those are, read once rather than added at every step (`any` of the
        # values themselves: no trajectory-sized mask beside the tape).
        loss_rows = grad_trajectory.reshape(n_steps + 1, -1).any(dim=1).tolist()
        # Gradients with respect to the grid: each step's ends enter its increment as two more inputs.
        grad_t = torch.zeros(t.shape, dtype=accumulate, device=t.device) if ctx.needs_input_grad[9] else None
        points = t.detach().unbind()  # the stage times need no graph: a gradient for t goes through `ends`
        adjoint_callback = ctx.adjoint_callback
        kept = ctx.kept
        retained = kept is not None and _graph_retained()
        # Each step size as the accumulation dtype holds it, a number for the sums' `alpha`.
        widths = torch.stack(grid.widths).to(accumulate).tolist()
        with torch.enable_grad(), torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_on):
            for k in reversed(range(n_steps)):
                if adjoint_callback is not None:
                    adjoint_callback(points[k + 1], adjoint.clone(), grid.widths[k])
                ends = (
                    (points[k].detach().requires_grad_(), points[k + 1].detach().requires_grad_())
                    if grad_t is not None
                    else None
                )
                # A kept step's graph is freed once taken, unless the backward keeps the graph (`retain_graph`: a
                # second backward then takes the same graphs, as it would through torchdiffeq's steps).
                step_graph = kept[k] if kept is not None else None
                if kept is not None and not retained:
                    kept[k] = None
                parts, held, finite = step(k, points[k], states[k], adjoint, ends, step_graph, retained)
                del step_graph
                if grad_t is not None:
                    grad_t[k] += parts[-2]
                    grad_t[k + 1] += parts[-1]
                if report is not None:
                    # The adjoint entering this step's product, and that adjoint as the low dtype holds it
                    # (scaled, cast): the second is the one whose range can overflow or underflow.
                    report.record_backward(n_steps - 1 - k, adjoint, held, finite)
                stop_if_overflowed(finite, n_steps - 1 - k)
                # The step size multiplies each part inside the float32 sum (one operation, no copy of the parts).
                if summed:
                    torch._foreach_add_(summed, parts[: len(summed)], alpha=widths[k])
                else:
                    # The sums first: a part may be the adjoint itself (a field returning a parameter as it is).
                    sums = _first_sums(parts[1 : len(params) + 1], [*parts, adjoint, held], widths[k], accumulate)
                    adjoint.add_(parts[0], alpha=widths[k])
                    summed = [adjoint, *sums]
                    del sums
                if loss_rows[k]:
                    adjoint.add_(grad_trajectory[k].to(accumulate))
                # Summed: kept, they would stay alive through the next step's product, at its peak memory.
                del parts, held
        grad_params = [g.to(p.dtype) for g, p in zip(summed[1:], params)]
        grad_t = grad_t.to(t.dtype) if grad_t is not None else None
        return (None, None, None, None, None, None, None, None, adjoint.to(ctx.state_dtype), grad_t, *grad_params)


# The engine call behind `torch.autograd.grad`, without grad's Python check of each output's shape against its
# cotangent (about 20 µs an output, at every step): the engine checks each cotangent against its output's metadata.
# A private function whose positional arguments may change: taken only on the torch releases the oracle tests ran
# on, autograd.grad elsewhere (slower, never a gradient from arguments read otherwise).
_ENGINE_VERIFIED_ON = ("2.13.",)
_ENGINE_RUN_BACKWARD = (
    getattr(torch.autograd.graph, "_engine_run_backward", None)
    if torch.__version__.startswith(_ENGINE_VERIFIED_ON)
    else None
)


def _vector_jacobian_product(outputs, inputs, cotangents, retain: bool, direct: bool) -> tuple[torch.Tensor, ...]:
    """`torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True, materialize_grads=True, retain_graph=
    retain)`, through the engine's own entry point where `direct`."""
    if not direct or _ENGINE_RUN_BACKWARD is None:
        return torch.autograd.grad(
            outputs, inputs, cotangents, allow_unused=True, materialize_grads=True, retain_graph=retain
        )
    grads = _ENGINE_RUN_BACKWARD(tuple(outputs), tuple(cotangents), retain, False, tuple(inputs), True, False)
    return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs))


def _graph_retained() -> bool:
    """Whether the backward running now keeps the graph (`retain_graph=True`); where torch cannot tell, kept."""
    keeps = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if keeps is None else bool(keeps())


def _first_sums(
    grads: list[torch.Tensor], alive: list[torch.Tensor | None], width: float, dtype: torch.dtype
) -> list[torch.Tensor]:
    """0 + width * g for each of the first step's parameter gradients, the same bits as the sum of a zero tensor and
    the step's part (the same kernel: a zero broadcast from a 0-dim tensor, so that -0.0 parts give +0.0 as they do
    there), formed in the part itself where it is the only one of `alive` (the step's parts, the adjoint, the adjoint a
    report records) to use its memory: no parameter-sized tensor allocated. Autograd may hand one tensor to several
    inputs, or an output's cotangent itself to a parameter the field returns as it is."""
    if not grads:
        return []
    zero = torch.zeros((), dtype=dtype, device=grads[0].device)
    sums = []
    for g in grads:
        owned = (
            g.dtype == dtype
            and g.is_contiguous()
            and g.storage_offset() == 0
            and g.untyped_storage().nbytes() == g.numel() * g.element_size()
            and sum(_same_storage(g, x) for x in alive if x is not None) == 1
        )
        sums.append(torch.add(zero, g.to(dtype), alpha=width, out=g if owned else None))
    return sums


def _same_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def _unshared(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """`parts`, each its own tensor: autograd hands one gradient to every input of a sum (the state and a tensor of
    its shape added to it, `net(y + c)`), and the adjoint scale then divides each part in place."""
    held: set[int] = set()
    for i, part in enumerate(parts):
        pointer = part.data_ptr()
        if pointer in held and part.numel():
            parts[i] = part.clone()
        held.add(pointer)
    return parts


class _BackwardStep:
    """One step back: rebuild the step's slopes from its stored state and take the vector-Jacobian
    product of their weighted sum with the adjoint; with a scaler, redo it at half the scale while it is non-finite."""

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
        grid=None,
    ):
        self.func, self.tableau, self.scaler, self.params, self.emulation = func, tableau, scaler, params, emulation
        self.perturb, self.grid = perturb, grid
        self.state_dtype, self.low_dtype, self.accumulate, self.recording = (
            state_dtype,
            low_dtype,
            accumulate,
            recording,
        )
        # Without a scaler and without a report nobody reads `finite`: no check at all.
        self.checking = scaler is not None or recording
        # Gradients arrive in their input's dtype; where every input is in the accumulation dtype they stay as they are.
        self.accumulating = state_dtype == accumulate and all(p.dtype == accumulate for p in params)
        self.weights = [b for b in tableau.b if b]
        # A parameter of a tensor subclass may override autograd.grad (`__torch_function__`): then it is called.
        self.direct = _ENGINE_RUN_BACKWARD is not None and not has_torch_function(tuple(params))

    def __call__(self, k, t_k, y_stored, adjoint, ends=None, kept=None, retained=False):
        """(the vjps w.r.t. the state, each parameter and then each of `ends` when given, the adjoint as held in the
        low dtype or None, finite); the vjps are of sum_i b_i k_i (h multiplies them as they are summed), those w.r.t.
        `ends` of the step's whole increment h * sum_i b_i k_i. `kept`: the step's
        (state leaf, outputs) from the forward, whose graph the product takes instead of rebuilding it."""
        scaler = self.scaler
        eps = self.emulation.settings.format.eps if self.emulation is not None else None
        scale = scaler.scale_for(adjoint, self.low_dtype, eps) if scaler is not None else None
        while True:
            parts, slopes, entering = self._vjp(k, t_k, y_stored, adjoint, scale, ends, kept, retained)
            if scale is not None:
                parts = _unshared(parts)  # divided in place below
            finite = unscale_and_check(parts, scale) if self.checking else True
            if finite or scaler is None:
                break
            # The graph was freed by the product; the retry rebuilds it (it recomputes the same values).
            scale = scaler.backoff()
        # The step size, applied after the low-precision product and in the accumulation dtype: new tensors, so that a
        # gradient autograd handed to two inputs is not multiplied twice.
        if ends is not None:
            h = self.grid.widths[k].to(self.accumulate)
            # h = end - start also multiplies the slopes outside them: d(h a.S)/d(start, end) = (-1, +1) a.S.
            outer = (adjoint * slopes.detach().to(self.accumulate)).sum()
            parts[-2] = parts[-2] * h - outer
            parts[-1] = parts[-1] * h + outer
        held = None
        if self.recording:
            # The adjoint as the low dtype holds it is what entered the product where the product ran in the low dtype.
            same = self.emulation is None and entering.dtype == self.low_dtype
            held = entering if same else self._held(adjoint, scale)
        return parts, held, finite

    def _vjp(self, k, t_k, y_stored, adjoint, scale, ends, kept, retained):
        """(the gradient parts, in the accumulation dtype; the weighted slopes S where the product needed them; the
        adjoint that entered the product)."""
        emulation = self.emulation
        slopes = None
        if kept is not None:
            y, outputs, dtype, shaped = kept.leaf, kept.edges, kept.dtype, kept.shaped
        else:
            y, rebuilt, slopes = self._rebuilt(k, t_k, y_stored, ends)
            outputs, dtype = [out if out.requires_grad else None for out in rebuilt], rebuilt[0].dtype
            shaped = all(out.shape == y.shape for out in rebuilt)
        entering = (adjoint if scale is None else adjoint * scale).to(dtype)
        if emulation is not None:
            entering = emulation.store(entering, "backward")
        if len(outputs) == 1:
            cotangents = [entering]
        else:
            # The product of S = sum_i b_i k_i with the adjoint a is that of each k_i with b_i a: S itself is not
            # formed, and autograd adds each b_i a first into k_i's gradient, as it did through S.
            # One product per distinct weight (rk4's four take two): fewer ops, and fewer adjoint-sized tensors alive.
            distinct = list(dict.fromkeys(self.weights))
            products = {b: entering * b for b in distinct}
            cotangents = [products[b] for b in self.weights]
        inputs = (y, *self.params, *(ends or ()))
        # Outside autocast, as torch runs any backward: autocast applies to the rebuilt forward only.
        # A stage that reaches no input (a field of t alone, f(t, y) = g(t)) has no graph and passes on nothing.
        reaching = [(out, cot) for out, cot in zip(outputs, cotangents) if out is not None]
        with torch.autocast(y.device.type, enabled=False):
            if reaching:
                grads = _vector_jacobian_product(
                    [out for out, _ in reaching],
                    inputs,
                    [cot for _, cot in reaching],
                    # A kept graph is taken again where the scaler has the step redone, or the graph is retained.
                    kept is not None and (self.scaler is not None or retained),
                    self.direct and shaped,
                )
            else:
                grads = tuple(torch.zeros_like(x) for x in inputs)
        if self.accumulating and ends is None:
            return list(grads), slopes, entering
        return [g.to(self.accumulate) for g in grads], slopes, entering

    def _rebuilt(self, k, t_k, y_stored, ends):
        """(the state leaf, the outputs whose product is taken, S where the product needs it): the step rebuilt from
        its stored state."""
        emulation = self.emulation
        with emulation.reenter() if emulation is not None else nullcontext():
            y = y_stored.to(self.state_dtype).requires_grad_(True)
            slopes = None
            if emulation is not None or ends is not None:
                h, h_value = self.grid.widths[k], self.grid.width_values[k]
                if ends is None:
                    slopes = weighted_slopes(self.func, self.tableau, t_k, y, h, h_value, self.perturb)
                else:  # the step size from the ends, inside the graph
                    slopes = weighted_slopes(self.func, self.tableau, ends[0], y, ends[1] - ends[0], None, self.perturb)
                outputs = [slopes]
            else:
                stages = _stage_slopes(self.func, self.tableau, y, self.grid.times[k], self.grid.scaled[k])
                outputs = [k_i for b, k_i in zip(self.tableau.b, stages) if b]
                if any(k_i.dtype != outputs[0].dtype for k_i in outputs):  # S's dtype is their promotion
                    slopes = sum(b * k_i for b, k_i in zip(self.tableau.b, stages) if b)
                    assert isinstance(slopes, torch.Tensor)
                    outputs = [slopes]
        return y, outputs, slopes

    def _held(self, adjoint, scale):
        # What enters the low-precision product: the scaled adjoint in the autocast dtype. When the
        # increment's dtype is wider (otflow's `cat` promotes to float32), the product itself gets the
        # wider copy, but the low dtype is where the adjoint has to fit.
        held = (adjoint if scale is None else adjoint * scale).to(self.low_dtype)
        return self.emulation.store(held, "backward") if self.emulation is not None else held
