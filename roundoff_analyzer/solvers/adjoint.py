"""`odeint_adjoint` with torchdiffeq's signature, for code that imports it (FFJORD, ANODE, most CNF code): the native
solver's own backward, the discrete adjoint, behind torchdiffeq's adjoint arguments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..axes.methods import ExplicitRK
from . import native
from .drop_in import odeint
from .kept_stages import Checkpoint
from .scaler import DynamicAdjointScaler
from .step_magnitudes import SolveReport
from .tuple_state import State

# Options that mean nothing on a fixed grid, accepted and unused in the adjoint's as in the forward's.
_UNUSED_ADJOINT_OPTIONS = ("norm",)


def odeint_adjoint(
    func: Callable[[torch.Tensor, Any], State],
    y0: State,
    t: torch.Tensor,
    *,
    rtol: float | torch.Tensor = 1e-7,
    atol: float | torch.Tensor = 1e-9,
    method: str | ExplicitRK | None = None,
    options: dict[str, Any] | None = None,
    event_fn: Callable[[torch.Tensor, State], torch.Tensor] | None = None,
    adjoint_rtol: float | torch.Tensor | None = None,
    adjoint_atol: float | torch.Tensor | None = None,
    adjoint_method: str | ExplicitRK | None = None,
    adjoint_options: dict[str, Any] | None = None,
    adjoint_params: Iterable[torch.Tensor] | None = None,
    scaler: DynamicAdjointScaler | None = None,
    report: SolveReport | None = None,
    trajectory_dtype: native.TrajectoryDtype = "state",
    step_product: native.StepProduct = "state",
    checkpoint: Checkpoint = "auto",
    memory_budget: int | None = None,
) -> State | tuple[torch.Tensor, State]:
    """Solve dy/dt = func(t, y) on a fixed grid, called as torchdiffeq's `odeint_adjoint`; the backward is the discrete
    adjoint of the forward's own steps (discretise, then optimise), run in the forward's precision.

    How it differs from torchdiffeq's `odeint_adjoint`, which solves the continuous adjoint ODE backward in time
    (optimise, then discretise), recomputing the state by solving it backward too:

    - The gradients are those of the solution this call returned, exact to roundoff: the backward walks the
      forward's own grid back, rebuilding each step from its stored state. torchdiffeq's are those of the exact ODE
      solution, approximated by a second solve: in float64 the two differ by the discretisation error of the method
      on the grid.
    - Memory: each step's stage graph where it fits (`checkpoint`), else the N+1 states in the low precision and
      one step's graph at a time (`checkpoint="states"`), where torchdiffeq keeps no states but solves the state
      backward (which a dissipative or stiff field does not allow: the backward solve grows the
      forward's errors).
    - Precision: under `torch.autocast` each step of the backward runs in the low dtype, as the forward did, with the
      adjoint held unscaled by the step size and the parameter gradients summed in float32, optionally under
      `scaler`; torchdiffeq's adjoint solve runs in float32 (its backward, like any backward, runs outside the
      forward's autocast), so the float16 training it stands for is not the one measured.
    - `func` may be any callable: the tensors requiring grad that it reaches are found from its first evaluation
      (torchdiffeq asks for `adjoint_params` where `func` is not an `nn.Module`). The backward evaluates `func` at the
      forward's stage times, not at times of an adjoint solve of its own (`perturb` changes both alike), and calls
      `func.callback_step_adjoint(t, adjoint, dt)` before each of its steps with the adjoint at t, the end of the
      forward's step (torchdiffeq passes its augmented state).

    torchdiffeq's adjoint arguments, on a fixed grid: `adjoint_params` are the tensors gradients reach besides `y0`
    and `t` (default: those `func` reaches); `adjoint_method` may be None or `method` itself, and `adjoint_options`
    None or the forward's options (`norm` accepted and unused), since the backward steps the forward's grid with the
    forward's rule: another method or grid is refused by name; `adjoint_rtol` and `adjoint_atol` are accepted and
    unused, as `rtol` and `atol` are. Every other argument is `roundoff_analyzer.solvers.odeint`'s.

    Example:
        ```python
        from roundoff_analyzer.solvers import odeint_adjoint  # in place of torchdiffeq's odeint_adjoint
        z = odeint_adjoint(odefunc, z0, t, method="rk4_38", adjoint_params=tuple(odefunc.parameters()))
        ```
    """
    _check_adjoint_method(method, adjoint_method)
    _check_adjoint_options(options, adjoint_options)
    del adjoint_rtol, adjoint_atol  # unused on a fixed grid, as rtol and atol are
    params = None if adjoint_params is None else [p for p in adjoint_params if p.requires_grad]
    return odeint(
        func,
        y0,
        t,
        rtol,
        atol,
        method,
        options,
        event_fn,
        scaler=scaler,
        report=report,
        params=params,
        trajectory_dtype=trajectory_dtype,
        step_product=step_product,
        checkpoint=checkpoint,
        memory_budget=memory_budget,
    )


def _check_adjoint_method(method, adjoint_method) -> None:
    if adjoint_method is not None and adjoint_method != method:
        raise ValueError(
            f"adjoint_method={_named(adjoint_method)} differs from method={_named(method)}: the backward here is the "
            "discrete adjoint of the forward's own steps, so it runs the forward's method; pass adjoint_method=None"
        )


def _check_adjoint_options(options, adjoint_options) -> None:
    if adjoint_options is None:
        return
    forward = {k: v for k, v in (options or {}).items() if k not in _UNUSED_ADJOINT_OPTIONS}
    backward = {k: v for k, v in adjoint_options.items() if k not in _UNUSED_ADJOINT_OPTIONS}
    for key in sorted(set(forward) | set(backward)):
        if key not in forward or key not in backward or not _same(forward[key], backward[key]):
            given = f"{backward[key]!r}" if key in backward else "not given"
            raise ValueError(
                f"adjoint_options[{key!r}] ({given}) differs from options[{key!r}] "
                f"({repr(forward[key]) if key in forward else 'not given'}): the backward here steps the forward's own "
                "grid; pass adjoint_options=None (or the same options)"
            )


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
    return a is b or a == b


def _named(method) -> str:
    return repr(method.name) if isinstance(method, ExplicitRK) else repr(method)
