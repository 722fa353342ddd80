"""The keep_float32 axis: chosen modules of the vector field run in float32, out of autocast, while the rest runs in the
low dtype. A value is `none`, or module names or glob patterns (matched against `named_modules()`'s qualified names)
joined with `+`: `potential.layers.0`, `*norm*`, `head+encoder.*`; a pattern that names no module may name a method,
`potential.gradient_and_trace`, for a model that computes outside its submodules' forward.

`keep_float32` is also the one change a user makes in their own model once a sweep showed that it helps:

    import roundoff_analyzer as ra
    self.head = ra.keep_float32(nn.Linear(64, 8))     # a module: its forward runs in float32 from now on

    @ra.keep_float32                                   # a function or a method
    def gradient_and_trace(self, s): ...

    ra.keep_float32(func, "potential.layers.0+head")   # by name, as the sweep's --keep-float32 value

Inside, low-precision floating inputs (float16, bfloat16, 8-bit) are cast to float32 and autocast is off, so that the
module's own arithmetic and the gradient flowing back through it are float32; float32 and float64 inputs pass
unchanged (a float64 run stays float64). Its output is float32: the ops after it cast it down again where autocast
says so.

Kept by name in a model (`keep_float32(func, names)`, and the sweep's axis), a kept module's weights are kept wherever
the model computes with them: an operation outside the module's forward that uses them (`torch.mm(layer.weight.t(), x)`,
`layer.forward(x)` called directly) runs in float32 too, for as long as the model's own forward runs.
"""

from __future__ import annotations

import fnmatch
import functools
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any, TypeVar, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .parameter_uses import ParameterUses, direct_owners

NONE = "none"
SEPARATOR = "+"
# Device types autocast may be on for; autocast is switched off inside a kept module for each one where it is on.
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")
_KEPT = "_roundoff_keep_float32"  # on a module: the names of its methods that run in float32
_COVERED = (
    "_roundoff_keep_float32_uses"  # on a model: its forward keeps the kept modules' weights wherever they are used
)
_region = threading.local()  # how deep the calling code is inside kept calls
F = TypeVar("F", bound=Callable[..., Any])


def patterns(value: str) -> list[str]:
    """The module names or glob patterns of a keep_float32 value (none for `none`)."""
    return [] if value == NONE else [part.strip() for part in value.split(SEPARATOR) if part.strip()]


def check_value(value: str) -> str:
    """A keep_float32 value as given, or a ValueError saying what is allowed."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"needs '{NONE}' or module names or glob patterns joined with '{SEPARATOR}' (e.g. potential.layers.0)"
        )
    if value != NONE and not patterns(value):
        raise ValueError(
            f"{value!r} names no module; give '{NONE}' or module names or glob patterns joined with '{SEPARATOR}'"
        )
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


def matching(root: nn.Module, value: str) -> list[tuple[str, nn.Module, str]]:
    """What the value's patterns name in `root`, as (name, module, method): a module (its `forward`) whose qualified
    name matches; or, for a pattern that matches no module, `module.method` (`method` alone: the root's), a method of
    the modules the part before the last dot matches (a model that computes outside its submodules' forward, such as
    a closed-form gradient, keeps that method)."""
    named = list(root.named_modules())
    found: dict[tuple[int, str], tuple[str, nn.Module, str]] = {}
    for pattern in patterns(value):
        hits = [(name, module, "forward") for name, module in named if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            owner, _, method = pattern.rpartition(".")
            hits = [
                (f"{name}.{method}" if name else method, module, method)
                for name, module in named
                if fnmatch.fnmatchcase(name, owner) and _is_method(module, method)
            ]
        for hit in hits:
            found.setdefault((id(hit[1]), hit[2]), hit)
    return list(found.values())


def _is_method(module: nn.Module, name: str) -> bool:
    return not name.startswith("_") and callable(getattr(type(module), name, None)) and name not in nn.Module.__dict__


def unmatched(root: nn.Module, value: str) -> list[str]:
    """The value's patterns that name neither a module nor a method of `root`."""
    return [p for p in patterns(value) if not matching(root, p)]


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
            stack.enter_context(_kept_region())
            return fn(*_up(args), **_up(kwargs))

    # The wrapper takes what `fn` takes (its tensors cast on the way in), which a plain wrapper's type cannot say.
    return cast(F, in_float32)


def _wrap(module: nn.Module, method: str = "forward") -> bool:
    """Make `module`'s `method` run in float32; False where it already does. Bound with MethodType, so that a deep copy
    of the module (an EMA copy, a cast copy) is bound to the copy, not to the original."""
    kept = module.__dict__.get(_KEPT, frozenset())
    if method in kept:
        return False
    own = module.__dict__.get(method)
    function = (
        own.__func__ if isinstance(own, types.MethodType) and own.__self__ is module else getattr(type(module), method)
    )
    setattr(module, method, types.MethodType(float32_call(function), module))
    module.__dict__[_KEPT] = kept | {method}
    return True


@contextmanager
def _kept_region() -> Iterator[None]:
    _region.depth = getattr(_region, "depth", 0) + 1
    try:
        yield
    finally:
        _region.depth -= 1


def in_kept_region() -> bool:
    """Whether the calling code runs inside a kept module or method (or a kept use of its weights)."""
    return getattr(_region, "depth", 0) > 0


class _KeptWeights(TorchFunctionMode):
    """Operations that use a kept module's weights (or views of them) outside its forward run in float32."""

    def __init__(self, uses: ParameterUses) -> None:
        super().__init__()
        self.uses = uses

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.uses.owners(args, kwargs):
            return func(*args, **kwargs)
        out = func(*args, **kwargs) if in_kept_region() else float32_call(func)(*args, **kwargs)
        self.uses.note_views(out, args, kwargs)
        return out


def kept_weights(root: nn.Module) -> ParameterUses:
    """The parameters of the modules under `root` whose forward is kept, by the kept module's name."""
    kept = {name: module for name, module in root.named_modules() if "forward" in module.__dict__.get(_KEPT, ())}
    return ParameterUses(
        {f"{name}.{inner}" if inner else name: m for name, k in kept.items() for inner, m in direct_owners(k).items()}
    )


def _covering_call(fn: F) -> F:
    """`fn` (a model's forward) run with its kept modules' weights kept wherever it uses them."""

    @functools.wraps(fn)
    def covering(self, *args, **kwargs):
        uses = kept_weights(self)
        if not uses:
            return fn(self, *args, **kwargs)
        with _KeptWeights(uses):
            return fn(self, *args, **kwargs)

    return cast(F, covering)


def _cover(root: nn.Module) -> tuple[nn.Module, Any] | None:
    """Make `root`'s forward keep its kept modules' weights wherever it uses them; what to restore, None where it
    already does."""
    if root.__dict__.get(_COVERED):
        return None
    own = root.__dict__.get("forward")
    function = own.__func__ if isinstance(own, types.MethodType) and own.__self__ is root else type(root).forward
    root.__dict__["forward"] = types.MethodType(_covering_call(function), root)
    root.__dict__[_COVERED] = True
    return root, own


def _uncover(saved: tuple[nn.Module, Any] | None) -> None:
    if saved is None:
        return
    root, own = saved
    del root.__dict__["forward"], root.__dict__[_COVERED]
    if own is not None:
        root.__dict__["forward"] = own


def keep_float32(target: Any, names: str | None = None) -> Any:
    """Run a module or a function in float32 under autocast, from now on: the one change a sweep's `--keep-float32`
    measured.

    Inside, low-precision floating inputs are cast to float32 and autocast is off; float32 and float64 inputs pass
    unchanged, and the output is float32. Kept by name, a module's weights are kept wherever `target`'s forward uses
    them: an operation on them outside the module's forward (`torch.mm(layer.weight.t(), v)`, `layer.forward(x)`)
    runs in float32 too.

    Args:
        target: A `torch.nn.Module` (its forward is wrapped), or a function or method (wrapped and returned).
        names: Module names or glob patterns inside the module `target`, joined with `+`, as a `--keep-float32`
            value (`"potential.layers.0+head"`, `"*norm*"`); what they name runs in float32.

    Returns:
        `target` itself for a module; the wrapped function for a function.

    Raises:
        ValueError: A name in `names` matches no module or method of `target`.
        TypeError: `target` is neither a module nor a function, or `names` is given with a function.

    Example:
        ```python
        ra.keep_float32(func, "potential.layers.0")    # by name, once the model is built
        self.head = ra.keep_float32(nn.Linear(64, 8))  # a module as it is built
        ```
    """
    if names is not None:
        if not isinstance(target, nn.Module):
            raise TypeError(
                f"keep_float32 with names looks them up in a torch.nn.Module, not in {type(target).__name__}"
            )
        missing = unmatched(target, check_value(names))
        if missing:
            raise ValueError(f"keep_float32: {missing[0]!r} names no module or method of {type(target).__name__}")
        for _, module, method in matching(target, names):
            _wrap(module, method)
        _cover(target)
        return target
    if isinstance(target, nn.Module):
        _wrap(target)
        return target
    if callable(target):
        return float32_call(target)
    raise TypeError(f"keep_float32 wraps a torch.nn.Module or a function, not {type(target).__name__}")


@contextmanager
def kept_in_float32(root: nn.Module, value: str, cover_forward: bool = True) -> Iterator[list[str]]:
    """What `value` names in `root` runs in float32 inside the block (the methods are restored after it); yields the
    names kept. The kept modules' weights run in float32 wherever `root`'s forward uses them (`cover_forward`), or
    wherever anything in the block does (a training step's model, whose forward is not what runs)."""
    kept = matching(root, value)
    saved = [
        (module, method, module.__dict__.get(method), module.__dict__.get(_KEPT))
        for _, module, method in kept
        if method not in module.__dict__.get(_KEPT, frozenset())
    ]
    for module, method, _, _ in saved:
        _wrap(module, method)
    covered = _cover(root) if kept and cover_forward else None
    uses = kept_weights(root) if kept and not cover_forward else None
    try:
        with _KeptWeights(uses) if uses else nullcontext():
            yield [name for name, _, _ in kept]
    finally:
        _uncover(covered)
        for module, method, own, marks in reversed(saved):
            del module.__dict__[method]
            if own is not None:
                module.__dict__[method] = own
            if marks is None:
                module.__dict__.pop(_KEPT, None)
            else:
                module.__dict__[_KEPT] = marks


def is_kept(module: nn.Module) -> bool:
    """Whether `module`'s forward, or one of its methods, runs in float32 (keep_float32 or kept_in_float32 wrapped
    it)."""
    return bool(module.__dict__.get(_KEPT))
