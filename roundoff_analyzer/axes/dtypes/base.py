"""The dtype axis: a low-precision format with its unit roundoff, range and device support."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cache

import torch

from ...core.errors import one_line
from ...core.registry import Registry
from ...emulation import NumberFormat


def format_of(name: str, dtype: torch.dtype) -> NumberFormat:
    """The bit layout of one of torch's floating dtypes, read off its finfo."""
    info = torch.finfo(dtype)
    mantissa_bits = round(-math.log2(info.eps))
    exponent_bits = info.bits - 1 - mantissa_bits
    bias = 2 ** (exponent_bits - 1) - 1
    # A format that spends its top exponent on numbers reaches past the IEEE-like largest value.
    finite_only = info.max > (2 - info.eps) * 2.0**bias
    return NumberFormat(name, exponent_bits, mantissa_bits, dtype, finite_only)


@dataclass(frozen=True)
class DtypeSpec:
    name: str
    torch_dtype: torch.dtype | None
    # Where torch has no dtype for the format, only emulated arithmetic can run it.
    number_format: NumberFormat | None = None
    # The arithmetic a sweep uses for this dtype when --arithmetic is not given.
    default_arithmetic: str = "hardware"

    @property
    def format(self) -> NumberFormat:
        if self.number_format is not None:
            return self.number_format
        assert self.torch_dtype is not None, f"dtype {self.name} has neither a number format nor a torch dtype"
        return format_of(self.name, self.torch_dtype)

    @property
    def unit_roundoff(self) -> float:
        # The gap above 1 is eps; rounding to nearest errs by half of it.
        return self.format.unit_roundoff

    @property
    def max(self) -> float:
        return self.format.max

    @property
    def smallest_normal(self) -> float:
        return self.format.smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        return self.format.smallest_subnormal

    @property
    def bits(self) -> int:
        return 1 + self.format.exponent_bits + self.format.mantissa_bits

    def describe(self) -> str:
        return (
            f"unit roundoff u = {self.unit_roundoff:.3g}, max {self.max:.3g}, smallest normal "
            f"{self.smallest_normal:.3g}, "
            f"smallest subnormal {self.smallest_subnormal:.3g}; default arithmetic {self.default_arithmetic}"
        )

    def unsupported_reason(self, device: torch.device) -> str | None:
        """None when `device` can run this dtype under autocast and as storage, else why not."""
        if self.torch_dtype is None:
            return f"torch has no {self.name} dtype; only emulated arithmetic runs it"
        return _trial(self.torch_dtype, device.type)


@cache
def _trial(dtype: torch.dtype, device_type: str) -> str | None:
    # Asking the device to do the work is the only check that matches what a run will meet.
    try:
        weight = torch.ones(4, 4, device=device_type)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # autocast warns, then quietly runs float32, for dtypes it does not support
            with torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
                product = torch.nn.functional.linear(torch.ones(2, 4, device=device_type), weight)
        if product.dtype != dtype:
            return f"autocast on {device_type} does not run {dtype} (a product under it came out {product.dtype})"
        stored = torch.ones(2, 2, device=device_type, dtype=dtype) @ torch.ones(2, 2, device=device_type, dtype=dtype)
        if not (torch.isfinite(product).all() and torch.isfinite(stored.float()).all()):
            return f"{dtype} gives non-finite results for a 4x4 product on {device_type}"
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run it here"
        return f"{device_type} cannot run {dtype}: {one_line(exc)}"
    return None


DTYPES: Registry[DtypeSpec] = Registry("dtype")

# The reference precision; not a sweep value.
FLOAT64 = DtypeSpec("float64", torch.float64)
