"""The `odeint` a model's step is handed: each call solved by the configuration's library and method, in n_timesteps
equal steps across the call's span, in the run's precision.

It takes torchdiffeq's signature, `odeint(func, y0, t, rtol, atol, method, options)`, so that a training step written
for torchdiffeq runs unchanged; the method, tolerances and options it is given are the configuration's to choose and
are ignored. `y0` may be a tensor or a tuple of tensors (torchdiffeq's convention: the parts travel through the
library as one flat tensor per time point). `t` may increase or decrease; the grid is n_timesteps equal steps from
t[0] to t[-1], and each time of `t` between two grid points is read off the step that reaches it by linear
interpolation, as torchdiffeq's fixed-grid solvers read their grids with `step_size` (its default `interp`). Times on
the grid (a `t` of two points, or one that the grid refines) are the grid's states, exactly.

One call is the run's solve of record (the problem's `solve_of_record`, as the contract check found it): its states at
`t` are the solution the errors compare, and its report holds the per-step profile. Every call counts in the function
evaluations.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from ..axes.libraries import LIBRARIES
from ..axes.libraries.steps import CountedDynamics
from ..solvers import DynamicAdjointScaler, SolveReport
from ..solvers.grid_output import equal_grid, read_off
from ..solvers.scaler import AdjointScalerSlot
from ..solvers.tuple_state import FlatState, State
from .run_spec import RunSpec
from .tape_estimate import RecomputedField, TapeBudget, TapeWatch


@dataclass
class SolveRecord:
    """One call as the run saw it: its span, and its states at its output times (detached; a tuple state's parts
    concatenated per time point, `part_sizes` saying where each part lies)."""

    t0: float
    t1: float
    states: torch.Tensor
    part_sizes: list[int] | None
    interpolated: int = 0  # output times between two grid points, read off by linear interpolation
    state_shapes: tuple[tuple[int, ...], ...] = ()  # y0's shape, each part's for a tuple state (the batch's size)
    origin: object = None  # the name of torchdiffeq's a routed call came through (torchdiffeq_routing.RoutedName)


class ConfiguredOdeint:
    """`odeint` for a step, as one run (`spec`) solves: its library and method in its n_timesteps equal steps per call,
    the grid in its `time_dtype`. Where the run's loss placement leaves the step outside the run's context, the context
    is entered around each solve and the output then cast to the loss's dtype. `scaler`: the native solver's adjoint
    scaler (or the slot a shared forward fills); `report`: the first call's per-step record. The run's model stands in
    for the parameters of a vector field that is not itself an `nn.Module` (a function or a bound method closing over
    them). The run's observer watches each solve's vector field on its grid. A fixed-grid solve's tape may take the
    memory of a `TapeBudget` (tape_estimate.py); `recompute`: the field's activations computed again in the backward
    rather than kept (a float64 reference whose tape would not fit)."""

    def __init__(
        self,
        spec: RunSpec,
        scaler: DynamicAdjointScaler | AdjointScalerSlot | None = None,
        report: SolveReport | None = None,
    ) -> None:
        method, outside = spec.method, not spec.loss_in.step_in_context
        self.library, self.method, self.n_timesteps = spec.library, method, spec.n_timesteps
        # What answers a model's own odeint_adjoint call (torchdiffeq_routing.py): the library's adjoint form where it
        # has one, so that torchdiffeq's rows measure torchdiffeq's continuous adjoint there, not backpropagation.
        form = spec.library.adjoint_form
        self.adjoint_library = LIBRARIES.get(form) if form is not None else spec.library
        self._solving_with = spec.library
        self.time_dtype = spec.time_dtype
        self.scaler, self.report = scaler, SolveReport() if report is None else report
        self.context: Callable[[], AbstractContextManager] | None = spec.prepared.context if outside else None
        self.output_dtype = spec.loss_dtype if outside else None
        self.model: torch.nn.Module | None = spec.prepared.model
        self.observer = spec.observer  # told each solve's vector field and grid (per-module measurement)
        self.solves: list[SolveRecord] = []
        self.of_record = spec.copies.solve_of_record  # which call is the solve of record
        self.calls = 0  # function evaluations over every solve so far
        # Where given, a solve whose tape cannot fit stops within its first steps.
        self.budget = (
            None if method.adaptive else TapeBudget.for_run(spec.prepared.device, spec.n_timesteps, method.n_stages)
        )
        self.tape_bytes = 0  # the tape the solves so far keep for backward, as estimated from their first steps
        self.recompute = spec.recompute_field  # the field's activations computed again in the backward, not kept
        # What the step's calls named of their own (method, rtol, atol, the options' keys): ignored here, and the
        # answer's code says so (report/sections/step_code.py).
        self.named: dict[str, object] = {}
        self.solving = 0  # libraries solving now (a field may solve too): their calls of torchdiffeq are their own
        # While a module's call is recomputed (module_hooks.py): the module it recomputes, and in which precision.
        self._recomputing: tuple[torch.nn.Module | None, bool] | None = None

    def __call__(
        self,
        func: Callable[..., State],
        y0: State,
        t: torch.Tensor,
        rtol: float | None = None,
        atol: float | None = None,
        method: str | None = None,
        options: dict | None = None,
        event_fn: Callable | None = None,
        *,
        adjoint_rtol: float | None = None,
        adjoint_atol: float | None = None,
        adjoint_method: str | None = None,
        **ignored: object,
    ) -> State:
        twin = self._twin()
        if twin is not None:
            self.solving += 1  # the twin's library calling torchdiffeq through a routed name calls torchdiffeq's own
            try:
                return twin(func, y0, t, event_fn=event_fn)
            finally:
                self.solving -= 1
        if event_fn is not None:
            raise NotImplementedError(
                "an event_fn ends each solve at a time of its own; the sweep compares solves on one grid, so solve to "
                "a fixed end time"
            )
        given = {
            "method": method,
            "rtol": rtol,
            "atol": atol,
            "adjoint_method": adjoint_method,
            "adjoint_rtol": adjoint_rtol,
            "adjoint_atol": adjoint_atol,
        }
        self.named.update({name: _plain(value) for name, value in given.items() if value is not None})
        if options:
            self.named["options"] = sorted(set(map(str, options)).union(self.named.get("options") or ()))  # type: ignore[arg-type]
        times = checked_times(t)
        state = FlatState.of(y0)
        if times.numel() == 1:
            return state.split(state.flat[None].clone(), 1)
        grid = equal_grid(float(times[0]), float(times[-1]), self.n_timesteps, self.time_dtype, state.flat.device)
        return self._solve(func, state, grid, times.to(device=grid.device, dtype=self.time_dtype))

    def adjoint(self, *args: Any, **kwargs: Any) -> State:
        """A model's own `odeint_adjoint` call, solved as this call solves but by the library's adjoint form; its
        `adjoint_params` give way to the tensors the field reaches, which that form finds itself."""
        self._solving_with = self.adjoint_library
        try:
            return self(*args, **kwargs)
        finally:
            self._solving_with = self.library

    @contextmanager
    def recomputing(self, module: torch.nn.Module | None, float64: bool) -> Iterator[None]:
        """Within the block, each call solves for a recomputation of one call of `module` (its float64 twin's where
        `float64`), as the run solves: the run's library, method and steps (per-module measurement, module_hooks.py). So
        a module whose call solved (an ODEBlock, a whole model) is recomputed with the solve it was measured with, not
        with the method its own code names. Such a solve is recorded nowhere in the run."""
        before = self._recomputing
        self._recomputing = (module, float64)
        try:
            yield
        finally:
            self._recomputing = before

    def _twin(self) -> ConfiguredOdeint | None:
        """The odeint of the recomputation in progress (None: none is): this one's copy, recording on its own, watched
        by no observer and scaled by no scaler; in float64, the reference's grid (float64 times) outside the run's
        context."""
        if self._recomputing is None:
            return None
        module, float64 = self._recomputing
        twin = copy.copy(self)
        twin._recomputing, twin.observer, twin.scaler, twin.budget, twin.model = None, None, None, None, module
        twin.solves, twin.calls, twin.solving, twin.tape_bytes, twin.named = [], 0, 0, 0, {}
        twin.report = SolveReport()
        if float64:
            twin.time_dtype, twin.context, twin.output_dtype = torch.float64, None, None
        return twin

    @property
    def record(self) -> SolveRecord:
        """The solve of record (an IndexError naming it where the step made fewer solves than that)."""
        if self.of_record >= len(self.solves):
            raise IndexError(
                f"the step made {len(self.solves)} solves here, where the contract check found solve "
                f"{self.of_record + 1} the one of record: its solves must be the same in every run"
            )
        return self.solves[self.of_record]

    def on_grid(self, func: torch.nn.Module, y0: torch.Tensor, t0: float, t1: float) -> torch.Tensor:
        """The states at every point of the grid from t0 to t1 (a trajectory problem's loss reads them all)."""
        grid = equal_grid(t0, t1, self.n_timesteps, self.time_dtype, y0.device)
        solution = self._solve(func, FlatState.of(y0), grid, grid)
        assert isinstance(solution, torch.Tensor)  # a single tensor's state comes back as one
        return solution

    def _solve(self, func: Callable[..., State], state: FlatState, grid: torch.Tensor, times: torch.Tensor) -> State:
        first = len(self.solves) == self.of_record
        report = self.report if first else SolveReport()
        counted = CountedDynamics(state.dynamics(func))
        if not isinstance(func, torch.nn.Module) and self.model is not None:
            # Solvers with a backward of their own differentiate the parameters the field's module holds (the native
            # solver also what the field reaches, solvers/field_tensors.py); a plain function holds none, so the
            # model's stand in for them.
            counted.add_module("model", self.model)
        if self.observer is not None:
            self.observer.watch_field(counted, grid)
        field: torch.nn.Module = RecomputedField(counted) if self.recompute else counted
        watched = TapeWatch(field, self.budget, self.tape_bytes) if self.budget is not None else None
        self.solving += 1
        try:
            with (
                self.context() if self.context is not None else nullcontext(),
                watched.watching() if watched is not None else nullcontext(),
            ):
                on_grid = self._solving_with.solve(watched or field, state.flat, grid, self.method, self.scaler, report)
        finally:
            self.solving -= 1
            self.calls += counted.calls
            self.tape_bytes = watched.estimate if watched is not None else self.tape_bytes
        if first:
            report.record_forward(on_grid)
        interpolated = 0
        if times.numel() != grid.numel() or not torch.equal(times, grid):
            on_grid = read_off(on_grid, grid, times, "linear", lambda time, y: counted.func(time, y))
            interpolated = int((~torch.isin(times, grid)).sum())
        if self.output_dtype is not None:
            on_grid = on_grid.to(self.output_dtype)
        shapes = tuple(tuple(shape) for shape in state.shapes) if state.shapes else (tuple(state.flat.shape),)
        self.solves.append(
            SolveRecord(float(grid[0]), float(grid[-1]), on_grid.detach(), state.sizes, interpolated, shapes)
        )
        return state.split(on_grid, times.numel())


def checked_times(t: object) -> torch.Tensor:
    """`t` as the times of a solve: a 1-D floating-point tensor, strictly increasing or decreasing."""
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() < 1 or not t.is_floating_point():
        raise ValueError(f"t must be a 1-D floating-point tensor of times, not {_described(t)}")
    if t.numel() > 1:
        steps = t[1:] - t[:-1]
        if not (bool((steps > 0).all()) or bool((steps < 0).all())):
            raise ValueError("t must be strictly increasing or strictly decreasing")
    return t.detach()


def _plain(value: object) -> object:
    """A named argument as manifest.json can hold it: a string, or a number (a tensor's as a float)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return value if isinstance(value, (str, int, float)) else str(value)


def _described(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D {str(value.dtype).removeprefix('torch.')} tensor"
    return f"a {type(value).__name__}"
