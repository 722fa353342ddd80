"""What share of the vector field's work a keep_float32 value keeps: one evaluation of the field, as the configuration's
runs evaluate it (its precision, its kept modules), with its torch operations counted. An operation counts where it
computes a floating tensor (a view or a size computes nothing); it is kept where it runs inside a kept module or method
(or is a kept module's weights used outside it), and low where its output is in the run's low dtype. A cast is no
operation here: keeping a module casts its inputs up, as autocast casts where no one sees it.

So that a setup whose kept part is the whole field (every operation in float32, none in the low dtype) is said to be
what it is: float32 with extra casts, not a float16 setup."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ..axes.keep_float32 import in_kept_region
from ..axes.loss_placements import LOSS_PLACEMENTS
from ..axes.modes import PreparedRun, ProblemCopies
from ..axes.parameter_uses import tensors_in
from .columns import KEPT_SHARE_COLUMNS
from .contract import evaluate

# Operations that move values to another dtype or place, computing nothing: keeping a module in float32 casts its inputs
# up with them, as autocast casts out of sight.
_MOVES = frozenset({"to", "float", "half", "bfloat16", "double", "type", "type_as", "clone", "contiguous", "copy_"})


def _storages(value) -> set[int]:
    found = set()
    for tensor in tensors_in(value):
        try:
            found.add(tensor.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            continue
    return found


class _Counted(TorchFunctionMode):
    def __init__(self, low_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.low_dtype = low_dtype
        self.total = self.kept = self.low = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        computed = [t for t in tensors_in(out) if t.is_floating_point()]
        if (
            computed
            and getattr(func, "__name__", "") not in _MOVES
            and not _storages(computed) & _storages((args, kwargs))
        ):
            self.total += 1
            self.kept += in_kept_region()
            self.low += any(t.dtype == self.low_dtype for t in computed)
        return out


def kept_share(prepared: PreparedRun, copies: ProblemCopies, low_dtype: torch.dtype | None) -> dict[str, float | None]:
    """kept_op_share: the share of the field's operations in one evaluation (at the first time, on y0; a training step's
    operations, one Euler step per solve) that ran in its kept part; low_dtype_op_share: the share that computed in
    `low_dtype`. None where it computed nothing or failed."""
    counted = _Counted(low_dtype)
    try:
        if copies.trajectory is not None:
            with torch.no_grad(), prepared.context(), counted:
                prepared.model(torch.zeros((), device=prepared.device), prepared.batch)
        else:  # the whole step in the run's context
            with counted:
                evaluate(copies, prepared, LOSS_PLACEMENTS.get("autocast"), torch.float32)
    except Exception:  # noqa: BLE001 - the runs themselves say how the field fails; the share is then unknown
        return dict.fromkeys(KEPT_SHARE_COLUMNS)
    if not counted.total:
        return dict.fromkeys(KEPT_SHARE_COLUMNS)
    return {"kept_op_share": counted.kept / counted.total, "low_dtype_op_share": counted.low / counted.total}
