"""Emulated low-precision arithmetic: float32 storage and compute, rounded to a format where a real
low-precision dtype would have produced a low-precision value.

The rule follows what autocast (or pure mode) does with a real dtype:

- an op on autocast's low-precision list (linear, matmul, conv, bmm, addmm, ...) rounds its floating
  inputs and its output to the format;
- any other op whose inputs promote to the low dtype (every floating input that takes part in type
  promotion is low; 0-dim tensors only count when all inputs are 0-dim) rounds its output, except
  autocast's float32 ops, whose output is float32;
- ops that only move values (views, cat, indexing, negation) pass lowness on without rounding;
  casts (`.to`, `.float()`) give float32 values, as an upcast of a real low dtype would.

Gradients follow the same rounding: every rounding is differentiable and rounds the gradient flowing
back through it, so the gradient of a low-precision value is low-precision as autograd makes it for
a real dtype. A float32 leaf (a weight) is rounded once per context, as autocast caches its weight
casts; each further use adds one link whose backward rounds the running sum of the gradient, so the
weight's gradient is summed use by use in the format, as autograd sums it on autocast's one
low-precision copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch.overrides import TorchFunctionMode

from .formats import NumberFormat
from .ops import CASTS, FLOAT32_OPS, IGNORED, LOW_PRECISION_OPS, VALUE_PRESERVING, op_name
from .rounding import round_by_cast, round_nearest, round_stochastic

ValueRound = Callable[[torch.Tensor], torch.Tensor]
_LOW = "_roundoff_low"  # set on tensors that hold values of the emulated format
_IGNORE, _LOW_OP, _FLOAT32_OP, _MOVE, _CAST, _IN_PLACE, _COMPUTE = range(7)
_active = threading.local()


def is_low(x) -> bool:
    return isinstance(x, torch.Tensor) and getattr(x, _LOW, False)


def _tag(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        setattr(x, _LOW, True)
    elif isinstance(x, (tuple, list)):
        for item in x:
            _tag(item)
    return x


class _Rounded(torch.autograd.Function):
    """Round forward; round the gradient backward."""

    @staticmethod
    def forward(ctx, x, forward_round, backward_round):
        ctx.backward_round = backward_round
        return forward_round(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.backward_round(grad), None, None


class Saturations:
    """Values that a format without infinity (E4M3) clipped to its max, per pass: an overflow that leaves
    nothing non-finite behind. Counted on the device, read once after the run."""

    def __init__(self) -> None:
        self._counts: dict[str, torch.Tensor] = {}

    def add(self, phase: str, x: torch.Tensor, limit: float) -> None:
        count = (x.detach().abs() > limit).sum()
        self._counts[phase] = self._counts[phase] + count if phase in self._counts else count

    def first(self) -> tuple[str, int] | None:
        """(phase, count) of the first pass that saturated anything, or None."""
        for phase in ("forward", "backward"):
            count = int(self._counts[phase]) if phase in self._counts else 0
            if count:
                return phase, count
        return None


def power_of_two_scale(x: torch.Tensor, fmt: NumberFormat) -> torch.Tensor:
    """2^k with the largest |x| times 2^k at most the format's max (1 for an all-zero or
    non-finite x), as fp8 recipes scale."""
    amax = x.detach().abs().amax().to(torch.float32)
    exponent = torch.floor(torch.log2(fmt.max / amax)).clamp(-126, 126)
    return torch.where(torch.isfinite(exponent) & (amax > 0), torch.exp2(exponent), torch.ones_like(amax))


@dataclass(frozen=True)
class EmulationSettings:
    format: NumberFormat
    rounding: str = "nearest"  # or "stochastic"
    tensor_scaling: bool = (
        False  # per-tensor power-of-two scaling of low-precision op inputs and outputs, and of stored tensors
    )
    pure: bool = False  # pure mode: casts to float32 mean "to the working dtype"
    seed: int = 0
    cache_weights: bool = True  # as autocast's weight cache (off for autocast-nocache)


class EmulatedPrecision(TorchFunctionMode):
    def __init__(
        self,
        settings: EmulationSettings,
        generator: torch.Generator | None = None,
        saturations: Saturations | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.saturations = saturations if saturations is not None else Saturations()
        fmt = settings.format
        self.generator: torch.Generator | None
        if settings.rounding == "stochastic":
            self.generator = generator or torch.Generator().manual_seed(settings.seed)
            self.value_round: ValueRound = partial(round_stochastic, fmt=fmt, generator=self.generator)
        else:
            self.generator = None
            self.value_round = partial(round_by_cast if fmt.torch_dtype is not None else round_nearest, fmt=fmt)
        # torch's own cast is differentiable and rounds the gradient on its way back: the fast path, where
        # there are no saturations to count.
        self._native_cast = settings.rounding == "nearest" and fmt.torch_dtype is not None and not fmt.finite_only
        self._kinds: dict = {}
        self._weights: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.device_type = "cpu"

    # -- what the solvers call -------------------------------------------------------------------

    def store(self, x: torch.Tensor, phase: str = "forward") -> torch.Tensor:
        """`x`'s values in the format (no gradient): a state or adjoint stored as the real dtype would store it.

        Under per-tensor scaling a stored tensor keeps a scale of its own, as an fp8 tensor is stored with
        its scale, so it is rounded as a low-precision op's input is.
        """
        return self._rounding(phase, for_op=True)(x.detach())

    def _rounding(self, phase: str, for_op: bool = False) -> ValueRound:
        """The rounding of one pass; a format without infinity counts what it clips, on the values it
        really holds: with per-tensor scaling, the scaled ones."""
        fmt = self.settings.format
        value_round = self.value_round
        if fmt.finite_only:

            def value_round(x: torch.Tensor, unscaled_round: ValueRound = value_round) -> torch.Tensor:
                self.saturations.add(phase, x, fmt.max)
                return unscaled_round(x)

        if for_op and self.settings.tensor_scaling:
            return partial(self._scaled, value_round=value_round)
        return value_round

    def mark(self, x: torch.Tensor) -> torch.Tensor:
        """Declare `x` to hold values of the format (pure mode's parameters and inputs)."""
        return _tag(x)

    def reenter(self) -> EmulatedPrecision:
        """The same emulation, for a later region (a backward step): a fresh weight cache, the same random stream."""
        again = EmulatedPrecision(self.settings, self.generator, self.saturations)
        again.device_type = self.device_type
        return again

    # -- rounding ---------------------------------------------------------------------------------

    def _scaled(self, x: torch.Tensor, value_round: ValueRound) -> torch.Tensor:
        scale = power_of_two_scale(x, self.settings.format)
        return value_round(x * scale) / scale

    def round(self, x: torch.Tensor, for_op: bool = False) -> torch.Tensor:
        if x.dtype != torch.float32:
            return x
        if not (x.requires_grad and torch.is_grad_enabled()):
            return _tag(self._rounding("forward", for_op)(x))
        if self._native_cast and not (for_op and self.settings.tensor_scaling):
            return _tag(x.to(self.settings.format.torch_dtype).to(torch.float32))
        return _tag(_Rounded.apply(x, self._rounding("forward", for_op), self._rounding("backward", for_op)))

    def _op_input(self, x):
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32):
            return x
        if x.is_leaf and x.requires_grad and torch.is_grad_enabled() and self.settings.cache_weights:
            cached = self._weights.get(id(x))
            # First use: the cast autocast caches; later uses: one more link of the gradient's running sum.
            latest = self.round(x if cached is None else cached[1], for_op=True)
            self._weights[id(x)] = (x, latest)
            return latest
        return x if is_low(x) else self.round(x, for_op=True)

    def _round_all(self, out, for_op: bool = False):
        if isinstance(out, torch.Tensor):
            return self.round(out, for_op) if out.is_floating_point() else out
        if isinstance(out, (tuple, list)) and any(isinstance(o, torch.Tensor) for o in out):
            return type(out)(self._round_all(o, for_op) for o in out) if type(out) in (tuple, list) else out
        return out

    # -- the mode ---------------------------------------------------------------------------------

    def _kind(self, func) -> int:
        name = op_name(func)
        if name in IGNORED or not name:
            return _IGNORE
        if name in LOW_PRECISION_OPS.get(self.device_type, LOW_PRECISION_OPS["cpu"]):
            return _LOW_OP
        if name in FLOAT32_OPS.get(self.device_type, FLOAT32_OPS["cpu"]):
            return _FLOAT32_OP
        if name in VALUE_PRESERVING:
            return _MOVE
        if name in CASTS:
            return _CAST
        if name.endswith("_") and not name.endswith("__"):
            return _IN_PLACE
        return _COMPUTE

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = self._kind(func)
        if kind in (_IGNORE, _IN_PLACE):
            return func(*args, **kwargs)
        if kind == _LOW_OP:
            args = tuple(self._op_input(a) for a in args)
            kwargs = {k: self._op_input(v) for k, v in kwargs.items()}
            return self._round_all(func(*args, **kwargs), for_op=True)
        if kind == _CAST:
            out = func(*args, **kwargs)
            if not (isinstance(out, torch.Tensor) and out.dtype == torch.float32):
                return out
            if self.settings.pure:
                return out if is_low(out) else self.round(out)
            # A cast to float32 of a float32 tensor returns the tensor itself: an unmarked view stands for the upcast.
            return out.view_as(out) if is_low(out) else out
        low = _promotes_to_low(args)
        out = func(*args, **kwargs)
        if not low or kind == _FLOAT32_OP:
            return out
        if kind == _MOVE:
            return _tag(out)
        return self._round_all(out)

    def __enter__(self):
        stack = getattr(_active, "stack", None)
        if stack is None:
            stack = _active.stack = []
        stack.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _active.stack.pop()
        return super().__exit__(*exc)


def _promotes_to_low(args) -> bool:
    """Whether torch's type promotion of these inputs would give the low dtype: every
    participating floating input is low."""
    dims_low = dims_other = scalars_low = scalars_other = False
    for arg in args:
        items = arg if isinstance(arg, (list, tuple)) else (arg,)
        for x in items:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                low = getattr(x, _LOW, False)
                if x.dim():
                    dims_low, dims_other = dims_low or low, dims_other or not low
                else:
                    scalars_low, scalars_other = scalars_low or low, scalars_other or not low
    if dims_low or dims_other:
        return dims_low and not dims_other
    return scalars_low and not scalars_other


def active_emulation() -> EmulatedPrecision | None:
    """The emulation the calling code runs under, or None (used by the native solver to store its states)."""
    stack = getattr(_active, "stack", None)
    return stack[-1] if stack else None


def emulate(
    settings: EmulationSettings, device_type: str = "cpu", saturations: Saturations | None = None
) -> EmulatedPrecision:
    mode = EmulatedPrecision(settings, saturations=saturations)
    mode.device_type = device_type
    return mode
