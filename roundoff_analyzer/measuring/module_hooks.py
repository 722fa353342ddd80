"""Which module: each module of the vector field watched over one run, per time step, forward and backward.

For every leaf module (and the vector field as a whole, named VECTOR_FIELD), over the run's calls:
- the largest magnitude of its output (forward) and of the gradient reaching its output (backward), the smallest
  nonzero one, and the share of nonzero values below the dtype's smallest normal;
- its local roundoff: the module re-run in float64 (a float64 copy of its weights) on the very input the run gave it,
  against the run's output; backward, the vector-Jacobian product with the very gradient that reached its output,
  recomputed in the run's precision and in float64. So the error the module adds, not the error it inherits;
- the first time step where its output (or the gradient reaching it) held a non-finite value.

A call's time step is the step of the time grid whose interval holds the call's t (the vector field's first argument);
backward steps are counted as the backward walk counts them, 0 being the last time step (as the results' overflow_step).
The observer watches one run, made for it and not timed: the float64 re-runs cost a multiple of the run itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from ..axes.keep_float32 import is_kept
from ..emulation.mode import active_emulation
from . import metrics

VECTOR_FIELD = "(vector field)"  # the row of the vector field as a whole: what its leaf modules' rows add up to


@dataclass
class ModuleStats:
    max_abs: float = 0.0
    min_abs: float = math.inf  # smallest nonzero magnitude
    below_normal: int = 0
    nonzero: int = 0
    local_rel_err: float | None = None  # the largest over the calls
    first_nonfinite_step: int | None = None
    first_nonfinite_call: int | None = None  # the run's count of watched calls then: orders modules within one step
    n_calls: int = 0
    produced_nonfinite: bool = False  # a non-finite value began here, from finite ones (see `produced`)

    def add(self, value: torch.Tensor, step: int, smallest_normal: float, call: int) -> bool:
        """Fold one output (or gradient) in; False where it held a non-finite value."""
        self.n_calls += 1
        magnitude = value.detach().abs()
        finite = bool(torch.isfinite(magnitude).all())
        if not finite:
            if self.first_nonfinite_step is None:
                self.first_nonfinite_step, self.first_nonfinite_call = step, call
            self.max_abs = math.inf
            return False
        if magnitude.numel():
            self.max_abs = max(self.max_abs, float(magnitude.max()))
            nonzero = magnitude[magnitude > 0]
            if nonzero.numel():
                self.min_abs = min(self.min_abs, float(nonzero.min()))
                self.nonzero += nonzero.numel()
                self.below_normal += int((nonzero < smallest_normal).sum())
        return True

    def produced(self, step: int, call: int) -> None:
        """Its own computation turned finite values non-finite (forward: its output from finite inputs; backward: the
        gradient it passed on, to its inputs and parameters, from a finite gradient at its output)."""
        if not self.produced_nonfinite:
            self.produced_nonfinite = True
            if self.first_nonfinite_call is None or self.first_nonfinite_call > call:  # set with the step
                self.first_nonfinite_step, self.first_nonfinite_call = step, call

    def add_error(self, error: float) -> None:
        if math.isfinite(error):
            self.local_rel_err = error if self.local_rel_err is None else max(self.local_rel_err, error)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [item for item in value if isinstance(item, torch.Tensor)]
    return []


def _to64(value):
    if isinstance(value, torch.Tensor):
        return value.detach().double() if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_to64(item) for item in value)
    return value


def _first_float(value) -> torch.Tensor | None:
    return next((t for t in _tensors(value) if t.is_floating_point()), None)


class ModuleObserver:
    """Hooks on the leaf modules of `func` (and `func` itself) for one run. `context` re-creates the run's precision
    (its autocast or emulation), for the backward's recomputation; `time_grid` maps a call's t to its time step."""

    def __init__(
        self,
        func: nn.Module,
        time_grid: torch.Tensor,
        dtype_max: float,
        smallest_normal: float,
        context: Callable[[], AbstractContextManager],
    ) -> None:
        self.func = func
        self.time_grid = time_grid.detach().double().cpu()
        self.n_steps = max(time_grid.numel() - 1, 1)
        self.dtype_max, self.smallest_normal = dtype_max, smallest_normal
        self.context = context
        # The modules whose output is a tensor of their own computing, by qualified name; containers only route.
        self.modules = {
            name or VECTOR_FIELD: m
            for name, m in func.named_modules()
            if not name or not any(True for _ in m.children())
        }
        # float64 copies, made before any hook is attached; a kept-in-float32 forward is copied
        # too, and leaves float64 as it is.
        self.float64 = {name: _float64_copy(m) for name, m in self.modules.items()}
        self.stats = {(name, phase): ModuleStats() for name in self.modules for phase in ("forward", "backward")}
        self.phase = "forward"
        self.step = 0
        self._busy = False  # set while a module is re-run: the re-run's own calls are not the run's
        self._last_backward_step = -1
        self._earlier_passes: list[dict[tuple[str, str], ModuleStats]] = []  # backward passes before the current one
        self.calls = 0  # watched calls so far, forward then backward (a hook's output counts once it is done)
        self._handles: list = []

    @contextmanager
    def attached(self) -> Iterator[ModuleObserver]:
        self._handles.append(self.func.register_forward_pre_hook(self._on_call))
        for name, module in self.modules.items():
            self._handles.append(module.register_forward_hook(self._forward_hook(name)))
        try:
            yield self
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

    def begin_backward(self) -> None:
        self.phase = "backward"

    def keep_backward_pass(self, passes_after: int) -> None:
        """Keep the statistics of the backward pass that counted, `passes_after` passes before the last."""
        if 0 < passes_after <= len(self._earlier_passes):  # (passes of one step each are not told apart)
            self.stats.update(self._earlier_passes[-passes_after])
        self._earlier_passes.clear()

    def _on_call(self, module, args) -> None:
        if self._busy or not args:
            return
        t = args[0]
        value = (
            float(t.detach().reshape(-1)[0])
            if isinstance(t, torch.Tensor) and t.numel()
            else t
            if isinstance(t, (int, float))
            else None
        )
        if value is not None:
            index = (
                int(torch.searchsorted(self.time_grid, torch.tensor([value], dtype=torch.float64), right=True)[0]) - 1
            )
            self.step = min(max(index, 0), self.n_steps - 1)

    def _forward_hook(self, name: str):
        def hook(module, args, output):
            if self._busy:
                return
            out = _first_float(output)
            if out is None:
                return
            step = self.step
            # A library that solves the forward without autograd evaluates the field again in the backward, with it:
            # those calls are not the forward's, but the gradient reaching their outputs is the backward's.
            self.calls += self.phase == "forward"
            forward = self.stats[(name, "forward")]
            if self.phase == "forward" and not forward.add(out, step, self.smallest_normal, self.calls):
                if metrics.all_finite([a for a in _tensors(args) if a.is_floating_point()]):
                    forward.produced(step, self.calls)
            elif self.phase == "forward":
                self._busy = True
                try:
                    with torch.no_grad(), _plain_precision():
                        reference = _first_float(self.float64[name](*_to64(args)))
                    if reference is not None and reference.shape == out.shape:
                        forward.add_error(metrics.rel_err(out, reference))
                finally:
                    self._busy = False
            if out.requires_grad:
                saved = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
                # Called where the precision was off (inside a kept method), it is recomputed without it too.
                low = active_emulation() is not None or any(torch.is_autocast_enabled(d) for d in _autocast_devices())
                out.register_hook(self._gradient_hook(name, step, saved, low))

        return hook

    def _gradient_hook(self, name: str, step: int, args: tuple, low: bool):
        backward_step = self.n_steps - 1 - step

        def hook(grad: torch.Tensor) -> None:
            if self._busy:
                return
            if backward_step < self._last_backward_step:
                # A new backward pass (a loss scaler's search): each pass's statistics are kept apart, and the run
                # says which one counted (keep_backward_pass), as for its profile.
                self._earlier_passes.append({key: stats for key, stats in self.stats.items() if key[1] == "backward"})
                self.stats.update({key: ModuleStats() for key in self._earlier_passes[-1]})
            self._last_backward_step = backward_step
            stats = self.stats[(name, "backward")]
            self.calls += 1
            if stats.add(grad, backward_step, self.smallest_normal, self.calls):
                self._busy = True
                try:
                    error, produced = self._backward_error(name, args, grad, low)
                finally:
                    self._busy = False
                if error is not None:
                    stats.add_error(error)
                if produced:
                    stats.produced(backward_step, self.calls)

        return hook

    def _backward_error(
        self, name: str, args: tuple, grad: torch.Tensor, low_precision: bool
    ) -> tuple[float | None, bool]:
        """The vector-Jacobian product with `grad` at the call's input, with respect to the inputs and the module's
        parameters, recomputed in the run's precision against float64; and whether the recomputed one was non-finite."""
        inputs = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
        module, module64 = self.modules[name], self.float64[name]
        params = [n for n, p in module.named_parameters() if p.requires_grad]
        if not inputs and not params:
            return None, False
        low = [a.clone().requires_grad_(True) if i in inputs else a for i, a in enumerate(args)]
        high = [_to64(a).requires_grad_(True) if i in inputs else a for i, a in enumerate(args)]
        own_low, own_high = dict(module.named_parameters()), dict(module64.named_parameters())
        with torch.enable_grad():
            with self.context() if low_precision else _plain_precision():
                out_low = _first_float(module(*low))
            with _plain_precision():
                out_high = _first_float(module64(*high))
            if out_low is None or out_high is None or not out_low.requires_grad:
                return None, False
            wrt_low = [low[i] for i in inputs] + [own_low[n] for n in params]
            wrt_high = [high[i] for i in inputs] + [own_high[n] for n in params]
            grads_low = torch.autograd.grad(out_low, wrt_low, grad.to(out_low.dtype), allow_unused=True)
            grads_high = torch.autograd.grad(out_high, wrt_high, grad.double(), allow_unused=True)
        pairs = [(g, h) for g, h in zip(grads_low, grads_high) if g is not None and h is not None]
        if not pairs:
            return None, False
        if not metrics.all_finite([g for g, _ in pairs]):
            return None, True
        return metrics.rel_err(metrics.flatten([g for g, _ in pairs]), metrics.flatten([h for _, h in pairs])), False

    def rows(self) -> list[dict]:
        """One row per module and phase, in the order the modules are declared (the vector field's first)."""
        rows = []
        for (name, phase), stats in self.stats.items():
            if not stats.n_calls:
                continue
            max_abs = stats.max_abs
            rows.append(
                {
                    "module": name,
                    "phase": phase,
                    "n_calls": stats.n_calls,
                    "kept_float32": is_kept(self.modules[name]),
                    "max_abs": max_abs,
                    "max_abs_over_dtype_max": max_abs / self.dtype_max,
                    "min_abs": stats.min_abs if math.isfinite(stats.min_abs) else None,
                    "below_normal_share": stats.below_normal / stats.nonzero if stats.nonzero else None,
                    "local_rel_err": stats.local_rel_err,
                    "first_nonfinite_step": stats.first_nonfinite_step,
                    "first_nonfinite_call": stats.first_nonfinite_call,
                    "produced_nonfinite": stats.produced_nonfinite,
                }
            )
        return rows


def _float64_copy(module: nn.Module) -> nn.Module:
    import copy

    duplicate = copy.deepcopy(module).double()
    for sub in duplicate.modules():
        sub._forward_hooks.clear()  # none of ours is attached yet; a user's hook would count the re-runs as calls
        sub._forward_pre_hooks.clear()
    return duplicate


@contextmanager
def _plain_precision() -> Iterator[None]:
    """No autocast and no emulation (a TorchFunctionMode): a float64 re-run is plain float64 arithmetic."""
    with ExitStack() as stack:
        for device in _autocast_devices():
            stack.enter_context(torch.autocast(device, enabled=False))
        if active_emulation() is not None:
            stack.enter_context(torch._C.DisableTorchFunction())
        yield


def _autocast_devices() -> tuple[str, ...]:
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
