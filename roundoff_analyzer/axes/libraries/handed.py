"""torchdiffeq's `odeint(func, y0, t, method=..., options=...)` solving through a library's adapter, as a sweep's runs
solved with it: for the answer's code of a library whose own function has another signature (torchode's, torchdyn's)
or options the runs passed (rampde's `loss_scaler=False`), and for a plug-in's `import_line`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...solvers.grid_output import checked_grid, read_off, step_size_grid
from ...solvers.step_magnitudes import SolveReport
from ...solvers.tuple_state import FlatState, State
from ..methods import METHODS, AdaptiveRK
from .base import LibraryAdapter
from .steps import CountedDynamics

_OPTIONS = ("grid_constructor", "step_size")


def odeint_of(library: LibraryAdapter) -> Callable[..., State]:
    """An `odeint` with torchdiffeq's signature that solves as a sweep's runs with `library` did: its `solve` on the
    grid (`t` itself, or `options` `grid_constructor` / `step_size` as torchdiffeq's fixed-grid solvers take them),
    the states at `t` read off that grid linearly, a tuple state solved as one flat tensor.

    The returned function takes `method` by the sweep's names; an adaptive one solves with the `rtol` and `atol`
    given (else the sweep's defaults) and the sweep's default step budget, its outputs at the grid's points, as a
    sweep's adaptive runs did; a fixed-grid one ignores them, as torchdiffeq's fixed-grid solvers do. It takes
    `model=`: the module whose parameters a `func` that is not itself a module reaches, for a library that
    differentiates `func`'s parameters only (rampde), as the sweep passes the model's.

    Example (a plug-in's module):
        ```python
        library = MySolver()
        odeint = odeint_of(library)  # import_line = "from mysolver import odeint"
        ```
    """

    def odeint(
        func: Callable[..., State],
        y0: State,
        t: torch.Tensor,
        rtol: float | None = None,
        atol: float | None = None,
        method: str | None = None,
        options: dict[str, Any] | None = None,
        *,
        model: torch.nn.Module | None = None,
    ) -> State:
        if isinstance(rtol, str) or isinstance(atol, str):
            raise TypeError(f"pass the method by name, method={rtol if isinstance(rtol, str) else atol!r}")
        if method not in METHODS.names():
            raise ValueError(f"method must be one of {', '.join(METHODS.names())}, not {method!r}")
        chosen = METHODS.get(method)
        if isinstance(chosen, AdaptiveRK):
            given = {"rtol": rtol, "atol": atol}
            chosen = chosen.with_settings(**{name: float(value) for name, value in given.items() if value is not None})
        unknown = [name for name in options or {} if name not in _OPTIONS]
        if unknown:
            raise TypeError(f"option(s) {', '.join(map(repr, unknown))} are not taken; allowed: {', '.join(_OPTIONS)}")
        if library.unsupported_method_reason(chosen) is not None:
            raise ValueError(library.unsupported_method_reason(chosen))
        if getattr(library, "odeint_takes_model", False) and not isinstance(func, torch.nn.Module) and model is None:
            raise ValueError(
                f"{library.name} differentiates the parameters of func's module only, and this func is a "
                f"{type(func).__name__}: pass model= (the module whose parameters it reaches)"
            )
        grid = _grid(func, y0, t, options or {})
        state = FlatState.of(y0)
        field = CountedDynamics(state.dynamics(func))
        if not isinstance(func, torch.nn.Module) and model is not None:
            field.add_module("model", model)  # as the sweep adds the model's module to a plain function's field
        on_grid = library.solve(field, state.flat, grid, chosen, None, SolveReport())
        if t.numel() != grid.numel() or not torch.equal(t, grid):
            on_grid = read_off(on_grid, grid, t.to(grid.dtype), "linear", lambda time, y: field.func(time, y))
        return state.split(on_grid, t.numel())

    odeint.__doc__ = f"torchdiffeq's odeint signature, solved with {library.name} as a sweep's runs solved with it."
    return odeint


def _grid(func, y0: State, t: torch.Tensor, options: dict[str, Any]) -> torch.Tensor:
    constructor, step_size = options.get("grid_constructor"), options.get("step_size")
    if constructor is not None and step_size is not None:
        raise ValueError("options step_size and grid_constructor exclude each other")
    if constructor is not None:
        return checked_grid(constructor(func, y0, t), t)
    return step_size_grid(t, step_size) if step_size is not None else t
