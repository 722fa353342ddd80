"""Binary floating-point formats by their bit layout: range, unit roundoff, and whether torch has them."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

_CUSTOM = re.compile(r"e(\d+)m(\d+)")


@dataclass(frozen=True)
class NumberFormat:
    """Sign, `exponent_bits`, `mantissa_bits` (stored fraction bits), with subnormals.

    IEEE-like formats keep the top exponent for infinity and NaN. `finite_only` formats (OCP's
    E4M3, torch's float8_e4m3fn) use it for numbers too, keeping one NaN and no infinity.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    torch_dtype: torch.dtype | None = None
    finite_only: bool = False

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def min_exponent(self) -> int:
        return 1 - self.bias

    @property
    def max_exponent(self) -> int:
        return self.bias + 1 if self.finite_only else self.bias

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def eps(self) -> float:
        return 2.0**-self.mantissa_bits

    @property
    def max(self) -> float:
        # finite_only: the all-ones pattern of the top binade is the NaN, so its largest fraction is one step lower.
        top_fraction = 2.0 - 2.0 ** (1 - self.mantissa_bits) if self.finite_only else 2.0 - 2.0**-self.mantissa_bits
        return top_fraction * 2.0**self.max_exponent

    @property
    def smallest_normal(self) -> float:
        return 2.0**self.min_exponent

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.min_exponent - self.mantissa_bits)


def custom_format(name: str) -> NumberFormat | None:
    """`eXmY` as an IEEE-like format, or None when `name` is not of that form or outside what float32 can carry."""
    match = _CUSTOM.fullmatch(name)
    if not match:
        return None
    exponent_bits, mantissa_bits = int(match.group(1)), int(match.group(2))
    # Emulation computes in float32: every value of the format must be a float32 value.
    if not (2 <= exponent_bits <= 8 and 1 <= mantissa_bits <= 23):
        return None
    return NumberFormat(name, exponent_bits, mantissa_bits)


CUSTOM_FORMS = "eXmY (X exponent bits 2-8, Y mantissa bits 1-23), e.g. e4m3, e5m7"
