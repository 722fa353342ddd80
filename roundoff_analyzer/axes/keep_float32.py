"""The keep_float32 axis: chosen modules of the vector field run in float32, out of autocast, while the rest runs in the
low dtype. A value is `none`, or module names or glob patterns (matched against `named_modules()`'s qualified names)
joined with `+`: `potential.layers.0`, `*norm*`, `head+encoder.*`.

`keep_float32` is also the one change a user makes in their own model once a sweep showed that it helps:

    import roundoff_analyzer as ra
    self.head = ra.keep_float32(nn.Linear(64, 8))     # a module: its forward runs in float32 from now on

    @ra.keep_float32                                   # a function or a forward method
    def forward(self, x): ...

Inside, low-precision floating inputs (float16, bfloat16, 8-bit) are cast to float32 and autocast is off, so that the
module's own arithmetic and the gradient flowing back through it are float32; float32 and float64 inputs pass
unchanged (a float64 run stays float64). Its output is float32: the ops after it cast it down again where autocast
says so.
"""
from __future__ import annotations

import fnmatch
import functools
import types
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator, TypeVar

import torch
from torch import nn

NONE = "none"
SEPARATOR = "+"
# Device types autocast may be on for; autocast is switched off inside a kept module for each one where it is on.
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")
_KEPT = "_roundoff_keep_float32"  # set on a module whose forward keep_float32 wrapped
F = TypeVar("F", bound=Callable[..., Any])


def patterns(value: str) -> list[str]:
    """The module names or glob patterns of a keep_float32 value (none for `none`)."""
    return [] if value == NONE else [part.strip() for part in value.split(SEPARATOR) if part.strip()]


def check_value(value: str) -> str:
    """A keep_float32 value as given, or a ValueError saying what is allowed."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"needs '{NONE}' or module names or glob patterns joined with '{SEPARATOR}' (e.g. potential.layers.0)")
    if value != NONE and not patterns(value):
        raise ValueError(f"{value!r} names no module; give '{NONE}' or module names or glob patterns joined with '{SEPARATOR}'")
    if NONE in patterns(value) and value != NONE:
        raise ValueError(f"{value!r} joins '{NONE}' with module names; give '{NONE}' alone")
    return value


def keep_skip_reason(value: str, mode: str, arithmetic: str, dtype) -> str | None:
    """Why a configuration cannot keep modules in float32 (None where it can): kept modules leave autocast, so the
    run must be one under autocast in a low dtype of the device."""
    if value == NONE:
        return None
    if not mode.startswith("autocast"):
        return f"keep_float32 needs an autocast mode; in {mode} mode the weights themselves are low precision"
    if arithmetic != "hardware":
        return f"keep_float32 runs with hardware arithmetic; {arithmetic} arithmetic has no float32 region"
    if dtype.torch_dtype == torch.float32:
        return "keep_float32 keeps modules out of a low dtype; float32 runs none"
    return None


def matching(root: nn.Module, value: str) -> list[tuple[str, nn.Module]]:
    """The modules of `root` whose qualified name matches one of the value's patterns, in `named_modules()` order."""
    found = patterns(value)
    return [(name, module) for name, module in root.named_modules() if any(fnmatch.fnmatchcase(name, p) for p in found)]


def unmatched(root: nn.Module, value: str) -> list[str]:
    """The value's patterns that match no module of `root`."""
    names = [name for name, _ in root.named_modules()]
    return [p for p in patterns(value) if not any(fnmatch.fnmatchcase(name, p) for name in names)]


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.element_size() < 4 else value
    if isinstance(value, (tuple, list)):
        return type(value)(_up(item) for item in value)
    if isinstance(value, dict):
        return {key: _up(item) for key, item in value.items()}
    return value


def float32_call(fn: F) -> F:
    """`fn` run with its low-precision floating inputs cast to float32 and autocast off."""

    @functools.wraps(fn)
    def in_float32(*args, **kwargs):
        with ExitStack() as stack:
            for device in _AUTOCAST_DEVICES:
                try:
                    on = torch.is_autocast_enabled(device)
                except (RuntimeError, ValueError):  # a device type this build does not know
                    continue
                if on:
                    stack.enter_context(torch.autocast(device, enabled=False))
            return fn(*_up(args), **_up(kwargs))

    return in_float32  # type: ignore[return-value]


def _wrap(module: nn.Module) -> bool:
    """Make `module`'s forward run in float32; False where it already does. Bound with MethodType, so that a deep copy
    of the module (an EMA copy, a cast copy) is bound to the copy, not to the original."""
    if getattr(module, _KEPT, False):
        return False
    own = module.__dict__.get("forward")
    function = own.__func__ if isinstance(own, types.MethodType) and own.__self__ is module else type(module).forward
    module.forward = types.MethodType(float32_call(function), module)
    setattr(module, _KEPT, True)
    return True


def keep_float32(target):
    """Run a module (its forward, from now on; the module is returned) or a function in float32 under autocast."""
    if isinstance(target, nn.Module):
        _wrap(target)
        return target
    if callable(target):
        return float32_call(target)
    raise TypeError(f"keep_float32 wraps a torch.nn.Module or a function, not {type(target).__name__}")


@contextmanager
def kept_in_float32(root: nn.Module, value: str) -> Iterator[list[str]]:
    """The modules of `root` that `value` names run in float32 inside the block (their forward is restored after it);
    yields their names."""
    kept = matching(root, value)
    saved = [(module, module.__dict__.get("forward")) for _, module in kept if not getattr(module, _KEPT, False)]
    for module, _ in saved:
        _wrap(module)
    try:
        yield [name for name, _ in kept]
    finally:
        for module, forward in saved:
            del module.forward
            delattr(module, _KEPT)
            if forward is not None:
                module.forward = forward


def is_kept(module: nn.Module) -> bool:
    """Whether `module`'s forward runs in float32 (keep_float32 or kept_in_float32 wrapped it)."""
    return bool(getattr(module, _KEPT, False))
