"""Values of a narrower dtype in the float64 reference: the reference casts the model's parameters and batch to
float64, but a tensor the user's code makes or keeps itself (`torch.tensor([[0.1, 0.0], [0.0, 0.1]])` for a prior's
covariance, `torch.from_numpy(...).float()`, a tensor attribute that is not a buffer) stays float32, and torch's
type promotion computes with its float32 rounding, or in float32 altogether (`MultivariateNormal.log_prob` of a
float64 point under a float32 covariance returns float32). The reference is then less precise than float64 there,
and nothing fails to say so. While the float64 evaluation runs, every torch operation called from the user's code
(not from torch's, not from this package's) is watched for one that meets a float64 tensor and a narrower floating
tensor holding a value that is neither an integer nor short (more than 11 significant bits, float16's: a decimal's
rounding, not a constant like 0.5 that every format holds), that casts a float64 tensor to a narrower dtype and
changes a value, or that computes a narrower result from float64 inputs. Each place in the user's code is said once,
in one line.

The place is the innermost frame outside torch and Python's own library; a frame of this package there is its own
solver's code, not the user's, except a `__torch_function__` (another mode watching the same evaluation: the draw
replay, the search for tensors outside the model), which only passes the user's call on. Where none of the step's
operations reached the watch as the user's (a mode that handles them without passing them on, code torch's modes do
not see), an empty list would say nothing was found where nothing was looked at: `unwatched` says so instead."""

from __future__ import annotations

import linecache
import sys
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType

import torch
from torch.overrides import TorchFunctionMode

from ..axes.parameter_uses import tensors_in

# Significant bits a value may have and still be taken for an exact constant (float16's 11).
SHORT_BITS = 11
_OURS = str(Path(__file__).resolve().parents[1])
_TORCH = str(Path(torch.__file__).resolve().parent)
# Python's own library (copy.deepcopy of a model, contextlib) passes calls on too; installed packages are the user's.
_STDLIB = sysconfig.get_path("stdlib")
_INSTALLED = tuple({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})


def _inexact(tensor: torch.Tensor) -> bool:
    """Whether `tensor` holds a value that is neither an integer nor short."""
    values = tensor.detach().double()
    mantissa, _ = torch.frexp(values)
    scaled = mantissa * 2.0**SHORT_BITS
    long = (scaled != scaled.round()) & (values != values.round()) & torch.isfinite(values)
    return bool(long.any())


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _shape(tensor: torch.Tensor) -> str:
    return "×".join(str(n) for n in tensor.shape) or "0-d"


# A frame of a handler that passes a call on: another mode's, watching the same evaluation.
_PASSING_ON = frozenset({"__torch_function__", "__torch_dispatch__"})


def _user_frame() -> FrameType | None:
    """The innermost frame of the calling code outside torch and outside the modes passing the call on; None where
    that is this package (its own solver)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if path != __file__ and not _passes_on(path) and code.co_name not in _PASSING_ON:
            return None if path.startswith(_OURS) else frame
        frame = frame.f_back
    return None


def _passes_on(path: str) -> bool:
    """Whether code at `path` is torch's or Python's own library's, which the user's code calls to reach torch."""
    return path.startswith(_TORCH) or (path.startswith(_STDLIB) and not path.startswith(_INSTALLED))


def users_code(function: Callable) -> bool:
    """Whether `function` (a step, a loss) is the user's code: neither torch's nor this package's."""
    code = getattr(function, "__code__", None)
    path = code.co_filename if code is not None else ""
    return bool(path) and not path.startswith(_OURS) and not path.startswith(_TORCH)


class NarrowConstants(TorchFunctionMode):
    """Watches a float64 evaluation; `found` holds a line per place in the user's code, in the order met."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[tuple[str, int], str] = {}
        self.users_calls = 0  # operations the user's code called that reached the watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        floats = [t for t in tensors_in((args, kwargs)) if t.is_floating_point()]
        what = self._narrowed(func, floats, out) if any(t.dtype == torch.float64 for t in floats) else None
        if what is None and self.users_calls:
            return out  # the frames are walked only where they are needed: a place to name, or the first call seen
        frame = _user_frame()
        if frame is not None:
            self.users_calls += 1
            if what is not None:
                self._record(frame, what)
        return out

    def _narrowed(self, func, floats: list[torch.Tensor], out) -> str | None:
        name = getattr(func, "__name__", str(func))
        narrow = next((t for t in floats if t.dtype != torch.float64 and _inexact(t)), None)
        if narrow is not None:
            return f"`{name}` met a {_dtype(narrow)} tensor ({_shape(narrow)}) in float64 arithmetic"
        outs = [t for t in tensors_in(out) if t.is_floating_point() and t.dtype != torch.float64]
        if not outs:
            return None
        if len(floats) == 1 and len(outs) == 1 and outs[0].shape == floats[0].shape:  # a cast: a loss if it rounds
            if not bool((outs[0].detach().double() != floats[0].detach()).any()):
                return None
            return f"`{name}` cast a float64 tensor ({_shape(floats[0])}) to {_dtype(outs[0])}"
        return f"`{name}` computed in {_dtype(outs[0])} from float64 inputs"

    def _record(self, frame: FrameType, what: str) -> None:
        key = (frame.f_code.co_filename, frame.f_lineno)
        if key not in self.found:
            code = linecache.getline(*key).strip()
            where = f"{Path(key[0]).name}:{key[1]}" + (f" `{code}`" if code else "")
            self.found[key] = f"{where}: {what}"

    def lines(self) -> tuple[str, ...]:
        return tuple(self.found.values())

    def unwatched(self, functions: Iterable[Callable]) -> str | None:
        """Why the watch cannot say the user's code met no narrower value: none of its operations reached it, though
        `functions` (the step, its loss) are the user's. None where it saw them, or where there is no code of the
        user's to see (a built-in model)."""
        if self.users_calls or not any(users_code(f) for f in functions):
            return None
        return (
            "none of the step's torch operations reached the watch for narrower values in the float64 reference (code "
            "torch's modes do not see: scripted, compiled or run under torch._C.DisableTorchFunction), so float32 "
            "constants it computes with there cannot be found"
        )
