"""The native solver behind torchdiffeq's `odeint` call for fixed grids: the same positional order (func, y0, t,
rtol, atol, method, options, event_fn), tuple states, torchdiffeq's fixed-grid options, one-point grids, its
step callback and terminal events. The tuple travels through the solver as one flat tensor per time point, so the
solver itself (forward, stored states, backward, scaling) sees exactly what it sees for a single tensor."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, overload

import torch

from ..axes.methods import METHODS, ExplicitRK
from . import native
from .events import solve_until_event
from .grid_output import INTERPOLATIONS, checked_grid, read_off, step_size_grid
from .kept_stages import Checkpoint
from .scaler import DynamicAdjointScaler
from .step_magnitudes import SolveReport
from .tuple_state import FlatState, State

# torchdiffeq's methods this solver's arithmetic cannot run, and why (its fixed-grid Runge-Kutta set runs here).
_MULTISTEP = ("explicit_adams", "implicit_adams", "fixed_adams")
_IMPLICIT = (
    "implicit_euler",
    "implicit_midpoint",
    "trapezoid",
    "radauIIA3",
    "gl4",
    "radauIIA5",
    "gl6",
    "sdirk2",
    "trbdf2",
)
_OPTIONS = ("step_size", "grid_constructor", "perturb", "interp")
_IGNORED_OPTIONS = ("norm",)  # accepted and unused on fixed grids, as torchdiffeq does
_ADAPTIVE_CALLBACKS = ("callback_accept_step", "callback_reject_step")


class TableauWarning(UserWarning):
    """Deprecated, no longer raised: `method="rk4"` warned with it while it ran the classical rule here; it now runs
    torchdiffeq's rk4, the 3/8 rule, as torchdiffeq names it (the classical rule is `method="rk4_classical"`)."""


# torchdiffeq's names that mean another rule in this project's method axis: a drop-in takes them as torchdiffeq does.
TORCHDIFFEQ_NAMES = {"rk4": "rk4_38"}


@overload
def odeint(
    func: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    y0: torch.Tensor,
    t: torch.Tensor,
    rtol: float | torch.Tensor = ...,
    atol: float | torch.Tensor = ...,
    method: str | ExplicitRK | None = ...,
    options: dict[str, Any] | None = ...,
    event_fn: None = ...,
    *,
    scaler: DynamicAdjointScaler | None = ...,
    report: SolveReport | None = ...,
    params: Sequence[torch.Tensor] | None = ...,
    trajectory_dtype: native.TrajectoryDtype = ...,
    step_product: native.StepProduct = ...,
    checkpoint: Checkpoint = ...,
    memory_budget: int | None = ...,
) -> torch.Tensor: ...


@overload
def odeint(
    func: Callable[[torch.Tensor, State], State],
    y0: State,
    t: torch.Tensor,
    rtol: float | torch.Tensor = ...,
    atol: float | torch.Tensor = ...,
    method: str | ExplicitRK | None = ...,
    options: dict[str, Any] | None = ...,
    event_fn: Callable[[torch.Tensor, State], torch.Tensor] | None = ...,
    *,
    scaler: DynamicAdjointScaler | None = ...,
    report: SolveReport | None = ...,
    params: Sequence[torch.Tensor] | None = ...,
    trajectory_dtype: native.TrajectoryDtype = ...,
    step_product: native.StepProduct = ...,
    checkpoint: Checkpoint = ...,
    memory_budget: int | None = ...,
) -> State | tuple[torch.Tensor, State]: ...


def odeint(
    func: Callable[[torch.Tensor, Any], State],
    y0: State,
    t: torch.Tensor,
    rtol: float | torch.Tensor = 1e-7,
    atol: float | torch.Tensor = 1e-9,
    method: str | ExplicitRK | None = None,
    options: dict[str, Any] | None = None,
    event_fn: Callable[[torch.Tensor, State], torch.Tensor] | None = None,
    *,
    scaler: DynamicAdjointScaler | None = None,
    report: SolveReport | None = None,
    params: Sequence[torch.Tensor] | None = None,
    trajectory_dtype: native.TrajectoryDtype = "state",
    step_product: native.StepProduct = "state",
    checkpoint: Checkpoint = "auto",
    memory_budget: int | None = None,
) -> State | tuple[torch.Tensor, State]:
    """Solve dy/dt = func(t, y) on a fixed grid, called as torchdiffeq's `odeint`; the backward runs the discrete
    adjoint in the forward's precision.

    `method` (no default: torchdiffeq's default, dopri5, is adaptive, and this solver steps on fixed grids only):
    torchdiffeq's names as torchdiffeq defines them: "euler", "midpoint", "heun2", "heun3", "rk4" (Kutta's 3/8 rule,
    also named "rk4_38"); and "rk4_classical" (the classical rule, rampde's and that of its paper, "Mixed Precision
    Training of Neural ODEs", which torchdiffeq does not have); or an `ExplicitRK` tableau. Adaptive methods and
    torchdiffeq's Adams and implicit methods raise an error naming them.

    As in torchdiffeq: `rtol` and `atol` are accepted and unused (`atol` is the tolerance of an event's time);
    `options` may hold `step_size` or `grid_constructor(func, y0, t)` (the grid stepped on; the states at `t` are
    then read off it by `interp`, "linear" or "cubic"), and `perturb` (the first stage of each step sees the time
    just after the step's start, a last stage at the step's end the time just before it); `t` may decrease, or hold
    one point (y0 comes back); `func.callback_step(t0, y0, dt)` is called before each step (y0 without a graph),
    `func.callback_step_adjoint(t, adjoint, dt)` before each step of the backward;
    with `event_fn(t, y)` (and `step_size`) the solve ends where it changes sign and `(event_t, states at t[0] and
    at event_t)` comes back, gradients reaching y0 and the parameters, not event_t.

    Gradients reach `y0` (each part), `t` when it requires them, and the tensors requiring grad that `func` reaches,
    whatever it is (an `nn.Module`, a closure or lambda over modules and tensors, a `functools.partial`, a bound
    method, a function using global modules): they are found from its first evaluation, the first stage of the first
    step, and where they cannot be told, the call is refused before solving, naming `params`.

    This solver's own arguments: `params` names the tensors gradients reach besides y0 instead; `scaler` scales the
    adjoint; `report` records
    each step's magnitudes; `trajectory_dtype`: "state" (y0's dtype) or "low" (the stored low-precision states
    themselves); `step_product`: "state" (h * S in y0's dtype, this solver's) or "low" (h * S in the low dtype, as
    rampde forms it, for a comparison with rampde); `checkpoint`: "stages" (each step's stage graph kept from the
    forward, no recomputation), "states" (only the stored low-precision states: each step rebuilt in the backward,
    the paper's low-memory design) or "auto" (the stages where their tape fits `memory_budget` bytes, default half
    the memory available at the start; `report.checkpoint` says which ran).

    Args:
        func: The right-hand side f(t, y), usually an `nn.Module`.
        y0: The initial state: a tensor, or a tuple of tensors.
        t: The output times, increasing or decreasing (one point returns y0).
        rtol: Accepted and unused, as torchdiffeq's fixed-grid solvers do.
        atol: Accepted; the tolerance of an event's time.
        method: A fixed-grid method's name or an `ExplicitRK` tableau.
        options: `step_size`, `grid_constructor`, `interp`, `perturb`, as torchdiffeq's.
        event_fn: Ends the solve where it changes sign.
        scaler: Scales the adjoint in the backward (see `DynamicAdjointScaler`).
        report: Records each step's magnitudes.
        params: The tensors gradients reach besides y0 and t (default: those the field reaches).
        trajectory_dtype: "state" or "low".
        step_product: "state" or "low".
        checkpoint: "auto", "stages" or "states".
        memory_budget: The bytes "auto" lets the kept stage graphs take (default: half the memory available).

    Returns:
        The states at every point of `t`, as `y0` is: a tensor of shape (len(t), *y0.shape), or a tuple of
            such tensors; with `event_fn`, `(event_t, states at t[0] and at event_t)`.

    Raises:
        ValueError: An adaptive, multistep or unknown `method`, or conflicting options; `FieldTensorsUnknown`, the
            tensors the field reaches could not be told (pass `params`).
        TypeError: A method passed positionally as `rtol`, or an option this solver does not have.
        ScalerExhausted: From the backward: the scaler halved its scale `max_retries` times in one step and the
            product was still not finite.

    Example:
        ```python
        from roundoff_analyzer.solvers import DynamicAdjointScaler, odeint
        with torch.autocast("cuda", dtype=torch.float16):
            states = odeint(func, y0, t, method="rk4_classical", scaler=DynamicAdjointScaler())
        loss(states).backward()
        ```
    """
    if isinstance(rtol, str) or isinstance(atol, str):
        raise TypeError(
            "the fourth and fifth positional arguments are rtol and atol, as in torchdiffeq's odeint; pass the method "
            f"by name: method={rtol if isinstance(rtol, str) else atol!r}"
        )
    tableau = _tableau(method)
    chosen = dict(options or {})
    unknown = [name for name in chosen if name not in _OPTIONS + _IGNORED_OPTIONS]
    if unknown:
        raise TypeError(
            f"option(s) {', '.join(map(repr, unknown))} are not fixed-grid options; allowed: {', '.join(_OPTIONS)}"
        )
    step_size, constructor = chosen.get("step_size"), chosen.get("grid_constructor")
    interp, perturb = chosen.get("interp", "linear"), bool(chosen.get("perturb", False))
    if step_size is not None and constructor is not None:
        raise ValueError("options step_size and grid_constructor exclude each other")
    if interp not in INTERPOLATIONS:
        raise ValueError(f"option interp must be one of {', '.join(INTERPOLATIONS)}, not {interp!r}")
    _check_time(t, event_fn is not None)

    state = FlatState.of(y0)
    flat_func = state.dynamics(func)
    stepping = native.Stepping(
        perturb,
        step_product,
        _step_callback(func, state, tableau, t),
        _adjoint_callback(func, state),
        later_reach_checked=True,
    )

    def solve(y, grid):
        return native.odeint(
            flat_func,
            y,
            grid,
            tableau,
            scaler=scaler,
            report=report,
            params=params,
            trajectory_dtype=trajectory_dtype,
            stepping=stepping,
            checkpoint=checkpoint,
            memory_budget=memory_budget,
        )

    def slope(time, y):
        return flat_func(time, y)

    if event_fn is not None:
        if step_size is None:
            raise ValueError("event_fn on a fixed grid needs options=dict(step_size=...), as in torchdiffeq")
        event = state.event(event_fn)
        event_t, states = solve_until_event(solve, slope, event, state.flat, t, step_size, interp, float(atol))
        return event_t.to(t.dtype), state.split(states, 2)
    if t.numel() == 1:
        return state.split(state.flat[None].clone(), 1)
    if step_size is not None:
        grid = step_size_grid(t, step_size)
    elif constructor is not None:
        grid = checked_grid(constructor(func, y0, t), t)
    else:
        return state.split(solve(state.flat, t), t.numel())
    return state.split(read_off(solve(state.flat, grid), grid, t, interp, slope), t.numel())


def _tableau(method) -> ExplicitRK:
    if isinstance(method, ExplicitRK):
        return method
    fixed = [m.name for m in METHODS if not m.adaptive]
    if method is None:
        raise ValueError(
            "method=None is dopri5 in torchdiffeq, an adaptive method; this solver steps on a fixed grid: name one of "
            + ", ".join(fixed)
        )
    if method in _IMPLICIT:
        raise ValueError(
            f"method {method!r} is implicit (it solves an equation each step); "
            f"this solver runs explicit Runge-Kutta rules: {', '.join(fixed)}"
        )
    if method in _MULTISTEP:
        raise ValueError(
            f"method {method!r} is a multistep (Adams) method; "
            f"this solver runs one-step Runge-Kutta rules: {', '.join(fixed)}"
        )
    if (
        method in METHODS
        and METHODS.get(method).adaptive
        or method in ("dopri8", "bosh3", "fehlberg2", "adaptive_heun", "scipy_solver")
    ):
        raise ValueError(
            f"method {method!r} is adaptive; this solver steps on a fixed grid: name one of {', '.join(fixed)}"
        )
    if method not in fixed:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(fixed)}")
    tableau = METHODS.get(TORCHDIFFEQ_NAMES.get(method, method))
    assert isinstance(tableau, ExplicitRK)  # a fixed-grid method, checked above
    return tableau


def _check_time(t, with_event: bool) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() < 1 or not t.is_floating_point():
        raise ValueError("t must be a 1-D floating-point tensor of times")
    if with_event and t.numel() != 2:
        raise ValueError(
            f"with event_fn, t must hold two points (the start and a time that sets the direction), not {t.numel()}"
        )
    if t.numel() > 1:
        increasing = t[1:] > t[:-1]
        if not (bool(increasing.all()) or bool((t[1:] < t[:-1]).all())):
            raise ValueError("t must be strictly increasing or strictly decreasing")


def _step_callback(func, state: FlatState, tableau: ExplicitRK, t: torch.Tensor):
    adaptive_only = [name for name in _ADAPTIVE_CALLBACKS if callable(getattr(func, name, None))]
    if adaptive_only:
        warnings.warn(f"Solver '{tableau.name}' does not support callbacks {set(adaptive_only)}", stacklevel=4)
    callback = getattr(func, "callback_step", None)
    if not callable(callback):
        return None
    # torchdiffeq passes a decreasing grid's steps as positive dt (it solves in negated time).
    sign = -1.0 if t.numel() > 1 and bool(t[1] < t[0]) else 1.0
    return lambda t0, y, dt: callback(t0, state.unflat(y), sign * dt)


def _adjoint_callback(func, state: FlatState):
    callback = getattr(func, "callback_step_adjoint", None)
    if not callable(callback):
        return None
    # The backward runs against the forward's direction: its steps, as torchdiffeq's adjoint solve passes them, are the
    # forward's lengths.
    return lambda t0, adjoint, dt: callback(t0, state.unflat(adjoint), dt.abs())
