"""Rounding float32 values to a narrower format, computed in float32 (the result is a float32 tensor).

`round_nearest` is exact round-to-nearest-even with subnormals, tested bit for bit against torch's
own casts; on overflow it gives infinity, or, for formats without infinity, saturates at the largest
value as torch's float32 -> float8_e4m3fn cast does (infinity included; NaN stays NaN).
"""

from __future__ import annotations

import torch

from .formats import NumberFormat


def quantum(x: torch.Tensor, fmt: NumberFormat) -> torch.Tensor:
    """The spacing of `fmt`'s values around each entry of `x`: 2^(max(floor(log2|x|), emin) - mantissa_bits)."""
    _, exponent = torch.frexp(x)  # |x| = m 2^exponent with m in [0.5, 1): floor(log2|x|) = exponent - 1
    exponent = (exponent - 1).clamp_(min=fmt.min_exponent) - fmt.mantissa_bits
    # 2^exponent built from its bits: exact down to float32's subnormals (bfloat16's quantum reaches 2^-133).
    normal = exponent >= -126
    bits = torch.where(normal, (exponent + 127) << 23, 1 << (exponent + 149).clamp_(min=0))
    return bits.to(torch.int32).view(torch.float32)


def _overflow(x: torch.Tensor, rounded: torch.Tensor, fmt: NumberFormat) -> torch.Tensor:
    beyond = rounded.abs() > fmt.max
    limit = fmt.max if fmt.finite_only else float("inf")
    return torch.where(beyond, torch.copysign(torch.full_like(x, limit), x), rounded)


def round_nearest(x: torch.Tensor, fmt: NumberFormat) -> torch.Tensor:
    step = quantum(x, fmt)
    return _overflow(x, torch.round(x / step) * step, fmt)  # torch.round rounds halves to even


def round_stochastic(x: torch.Tensor, fmt: NumberFormat, generator: torch.Generator | None = None) -> torch.Tensor:
    """Up with probability equal to the distance from the value below, in units of the quantum; exact values stay.

    x / quantum, its floor and the fraction above the floor are exact in float32 (a power-of-two
    scaling and Sterbenz subtraction), and the fraction is compared with a float64 uniform, so no
    intermediate rounding biases the choice, however many mantissa bits the format keeps. (Adding a
    float32 uniform to x / quantum, as `floor(x / q + U)`, rounds the sum when the format keeps more
    than a few bits fewer than float32.) A fraction below 2^-53 rounds up with probability 2^-53
    rather than its own: such a value lies in the format's subnormal range and within 2^-53 quanta of
    a representable value.
    """
    step = quantum(x, fmt)
    scaled = x / step
    below = torch.floor(scaled)
    fraction = (scaled - below).to(torch.float64)
    # The arithmetic's own draw: no mode sees it (a sweep gives the model's draws alike to every run and leaves these
    # alone, measuring/draws.py).
    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        uniform = torch.rand(x.shape, generator=generator, dtype=torch.float64, device=x.device)
    return _overflow(x, (below + (uniform < fraction).to(x.dtype)) * step, fmt)


def round_by_cast(x: torch.Tensor, fmt: NumberFormat) -> torch.Tensor:
    """torch's own cast there and back: the reference the other functions are tested against."""
    return x.to(fmt.torch_dtype).to(x.dtype)
