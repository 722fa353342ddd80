"""Where the float32 tensor a float64 step fails on was made. The reference casts the model's parameters and batch to
float64; a tensor the user's code makes itself stays torch's default dtype (`torch.tensor([0.1, 0.2])`, `torch.zeros(n)`
without `dtype=`, `x.float()`), and where it meets a float64 one in an operation that does not promote (`linear`,
`matmul`) the step raises "mat1 and mat2 must have the same dtype, but got Float and Double", which names no line.

While the float64 evaluation runs, each tensor narrower than float64 that an operation returns is given the place it
was made: the user's line and the operation, or, computed from a narrower tensor already placed (a view, `x32 * 2`),
that tensor's place. When an operation raises with float64 and narrower inputs together, `failed` says where it was
called, where its narrower input was made and the usual cause; an input no operation of the step made was made before
the step (a tensor attribute of a module, which casting the model to float64 does not cast)."""

from __future__ import annotations

import linecache
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from ..axes.parameter_uses import tensors_in

_OURS = str(Path(__file__).resolve().parents[1])
_TORCH = str(Path(torch.__file__).resolve().parent)
_STDLIB = sysconfig.get_path("stdlib")
_INSTALLED = tuple({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
# Frames of handlers that pass a call on (the other modes watching the same evaluation): never the user's.
_PASSING_ON = frozenset({"__torch_function__", "__torch_dispatch__"})

# Operations that make a tensor from data: of Python floats, torch's default dtype.
_FROM_DATA = frozenset({"tensor", "as_tensor", "asarray", "from_numpy", "Tensor", "FloatTensor", "__new__"})
_REMEDY = "give it the dtype of the tensors it meets (`dtype=x.dtype`, `.to(x)`)"
_BEFORE = (
    "in the factory or a module's __init__: a tensor that is neither a parameter nor a buffer stays {dtype} when the "
    "model is cast"
)


@dataclass(frozen=True)
class Made:
    """Where a narrower tensor was made: the user's line, the operation that made it there, and from what: `cast`
    (from float64 inputs), `data`, `factory` (from no floating input), `before` (from a narrower tensor no operation of
    the step made)."""

    place: str
    operation: str
    source: str

    def said(self, dtype: str) -> str:
        if self.source == "before":
            return (
                f"computed at {self.place} from a {dtype} tensor made before the step ({_BEFORE.format(dtype=dtype)}); "
                f"{_REMEDY}, or register it as a buffer"
            )
        if self.source == "cast":
            cause = f"`.{self.operation}(...)` cast float64 values to {dtype}"
        elif self.source == "data":
            cause = f"`torch.{self.operation}(...)` of Python floats or float32 data makes torch's default dtype,"
            cause += f" {dtype}"
        else:
            cause = f"`{self.operation}` without `dtype=` makes torch's default dtype, {dtype}"
        return f"made at {self.place}: {cause}; {_REMEDY}"


def _users_frame() -> FrameType | None:
    """The innermost frame outside torch, Python's own library and the modes passing the call on; None where that is
    this package's (its own solver)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        outside = not path.startswith(_TORCH) and not (path.startswith(_STDLIB) and not path.startswith(_INSTALLED))
        if path != __file__ and outside and code.co_name not in _PASSING_ON:
            return None if path.startswith(_OURS) else frame
        frame = frame.f_back
    return None


def _place(frame: FrameType) -> str:
    path, line = frame.f_code.co_filename, frame.f_lineno
    code = linecache.getline(path, line).strip()
    return f"{Path(path).name}:{line}" + (f" `{code}`" if code else "")


def _narrower(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() and tensor.dtype != torch.float64


class NarrowOrigins(TorchFunctionMode):
    """Watches a float64 evaluation; after an operation raised on float64 and narrower inputs, `failed` is one clause
    saying where (None otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self._made: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.failed: str | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except Exception:
            if self.failed is None:
                self.failed = self._failure(func, list(tensors_in((args, kwargs))))
            raise
        made = [t for t in tensors_in(out) if _narrower(t) and t not in self._made]
        if made:
            origin = self._origin(func, [t for t in tensors_in((args, kwargs)) if t.is_floating_point()])
            if origin is not None:
                for tensor in made:
                    self._made[tensor] = origin
        return out

    def _origin(self, func, floats: list[torch.Tensor]) -> Made | None:
        """Where narrower outputs of `func` on `floats` were made: an input's place where a narrower input has one."""
        narrow = [t for t in floats if _narrower(t)]
        inherited = next((self._made[t] for t in narrow if t in self._made), None)
        if inherited is not None:
            return inherited
        frame = _users_frame()
        if frame is None:
            return None
        name = getattr(func, "__name__", str(func))
        source = "before" if narrow else "cast" if floats else "data" if name in _FROM_DATA else "factory"
        return Made(_place(frame), name, source)

    def _failure(self, func, inputs: list[torch.Tensor]) -> str | None:
        floats = [t for t in inputs if t.is_floating_point()]
        narrow = next((t for t in floats if _narrower(t)), None)
        if narrow is None or not any(t.dtype == torch.float64 for t in floats):
            return None
        dtype = str(narrow.dtype).removeprefix("torch.")
        shape = "×".join(str(n) for n in narrow.shape) or "0-d"
        frame = _users_frame()
        at = f" at {_place(frame)}" if frame is not None else ""
        name = getattr(func, "__name__", str(func))
        met = f"`{name}`{at} met a {dtype} tensor ({shape})"
        origin = self._made.get(narrow)
        if origin is None:
            return f"{met} made before the step ({_BEFORE.format(dtype=dtype)}); {_REMEDY}, or register it as a buffer"
        return f"{met} {origin.said(dtype)}"
