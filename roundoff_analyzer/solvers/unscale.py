"""One fused pass over a step's gradient parts: divide by the adjoint scale and say whether all stayed finite."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import torch


def unscale_and_check(parts: Sequence[torch.Tensor], scale: float | None) -> bool:
    """Divide every part by `scale` in place (None: leave them) and return whether every entry is finite.

    One call of the kernel GradScaler uses (torch's `_amp_foreach_non_finite_check_and_unscale_`), in
    place of a division and an `isfinite` reduction per tensor. The scale is a power of two, so
    multiplying by its inverse rounds exactly as dividing by it would.
    """
    if not parts:
        return True
    found = torch.zeros(1, dtype=torch.float32, device=parts[0].device)
    inverse = 1.0 if scale is None else 1.0 / scale
    if scale is not None and not _exact_in_float32(inverse):  # no scale: an inverse of 1, exact
        # Outside float32's range the kernel's float32 inverse would round; divide the plain way.
        for part in parts:
            part.div_(scale)
        inverse = 1.0
    torch._amp_foreach_non_finite_check_and_unscale_(list(parts), found, torch.full((1,), inverse, device=found.device))
    if inverse > 1.0:
        # The kernel checks before it unscales; a scale below 1 can take a finite entry past the largest
        # float. Check the unscaled values as well, so that `finite` means what the parts now hold.
        torch._amp_foreach_non_finite_check_and_unscale_(list(parts), found, torch.ones(1, device=found.device))
    return not bool(found.item())


def _exact_in_float32(value: float) -> bool:
    try:
        return value != 0.0 and struct.unpack("f", struct.pack("f", value))[0] == value
    except OverflowError:  # beyond float32's largest finite number
        return False
