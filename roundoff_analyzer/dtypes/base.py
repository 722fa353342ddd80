"""The dtype axis: a low-precision format with its unit roundoff, range and device support."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ..errors import one_line
from ..registry import Registry


@dataclass(frozen=True)
class DtypeSpec:
    name: str
    torch_dtype: torch.dtype

    @property
    def unit_roundoff(self) -> float:
        # finfo.eps is the gap above 1; rounding to nearest errs by half of it.
        return torch.finfo(self.torch_dtype).eps / 2

    @property
    def max(self) -> float:
        return torch.finfo(self.torch_dtype).max

    @property
    def smallest_normal(self) -> float:
        return torch.finfo(self.torch_dtype).smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        info = torch.finfo(self.torch_dtype)
        return info.smallest_normal * info.eps

    def unsupported_reason(self, device: torch.device) -> str | None:
        """None when `device` can run this dtype under autocast and as storage, else why not."""
        return _trial(self.torch_dtype, device.type)


@lru_cache(maxsize=None)
def _trial(dtype: torch.dtype, device_type: str) -> str | None:
    # Asking the device to do the work is the only check that matches what a run will meet.
    try:
        weight = torch.ones(4, 4, device=device_type)
        with torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
            product = torch.nn.functional.linear(torch.ones(2, 4, device=device_type), weight)
        stored = torch.ones(2, 2, device=device_type, dtype=dtype) @ torch.ones(2, 2, device=device_type, dtype=dtype)
        if not (torch.isfinite(product).all() and torch.isfinite(stored).all()):
            return f"{dtype} gives non-finite results for a 4x4 product on {device_type}"
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run it here"
        return f"{device_type} cannot run {dtype}: {one_line(exc)}"
    return None


DTYPES: Registry[DtypeSpec] = Registry("dtype")

# The reference precision; not a sweep value.
FLOAT64 = DtypeSpec("float64", torch.float64)
