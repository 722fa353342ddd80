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
in one line."""

from __future__ import annotations

import linecache
import sys
from pathlib import Path
from types import FrameType

import torch
from torch.overrides import TorchFunctionMode

from ..axes.parameter_uses import tensors_in

# Significant bits a value may have and still be taken for an exact constant (float16's 11).
SHORT_BITS = 11
_OURS = str(Path(__file__).resolve().parents[1])
_TORCH = str(Path(torch.__file__).resolve().parent)


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


def _user_frame() -> FrameType | None:
    """The innermost frame of the calling code outside torch; None where that is this package (its own solver)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if path != __file__ and not path.startswith(_TORCH):
            return None if path.startswith(_OURS) else frame
        frame = frame.f_back
    return None


class NarrowConstants(TorchFunctionMode):
    """Watches a float64 evaluation; `found` holds a line per place in the user's code, in the order met."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[tuple[str, int], str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        floats = [t for t in tensors_in((args, kwargs)) if t.is_floating_point()]
        if any(t.dtype == torch.float64 for t in floats):
            what = self._narrowed(func, floats, out)
            if what is not None:
                self._record(what)
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

    def _record(self, what: str) -> None:
        frame = _user_frame()
        if frame is None:
            return
        key = (frame.f_code.co_filename, frame.f_lineno)
        if key not in self.found:
            code = linecache.getline(*key).strip()
            where = f"{Path(key[0]).name}:{key[1]}" + (f" `{code}`" if code else "")
            self.found[key] = f"{where}: {what}"

    def lines(self) -> tuple[str, ...]:
        return tuple(self.found.values())
