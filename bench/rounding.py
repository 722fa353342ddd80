"""Rounding float32 to a narrower format: torch's cast, this project's round_nearest, and pychop when installed.

Prints, measured in this one run on 10^6 random float32 values spread over 2^-40 .. 2^40, each
function's time per call and its share of results equal bit for bit to torch's cast, for float16,
bfloat16, float8_e4m3 and float8_e5m2.

    python bench/rounding.py        (pip install pychop to include it)
"""

from __future__ import annotations

import time

import torch

from roundoff_analyzer.axes.dtypes import DTYPES
from roundoff_analyzer.emulation import round_by_cast, round_nearest


def _timed(function, x, calls: int = 5):
    function(x)
    start = time.perf_counter()
    for _ in range(calls):
        out = function(x)
    return (time.perf_counter() - start) / calls, torch.as_tensor(out).to(torch.float32)


def _same(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())).float().mean())


def main() -> None:
    try:
        import pychop

        pychop.backend("torch")
    except ImportError:
        pychop = None
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(10**6, generator=generator) * 2.0 ** torch.randint(-40, 40, (10**6,), generator=generator).float()
    for name in ("float16", "bfloat16", "float8_e4m3", "float8_e5m2"):
        fmt = DTYPES.get(name).format
        cast_s, reference = _timed(lambda v, fmt=fmt: round_by_cast(v, fmt), x)
        ours_s, ours = _timed(lambda v, fmt=fmt: round_nearest(v, fmt), x)
        line = (
            f"{name:12s} torch cast {cast_s * 1e3:7.1f} ms   round_nearest {ours_s * 1e3:7.1f} ms, bitwise equal "
            f"{_same(ours, reference):.4%}"
        )
        if pychop is not None:
            chop = pychop.Chop(exp_bits=fmt.exponent_bits, sig_bits=fmt.mantissa_bits, rmode=1, subnormal=True)
            chop_s, chopped = _timed(chop, x)
            line += f"   pychop {chop_s * 1e3:7.1f} ms, bitwise equal {_same(chopped, reference):.4%}"
        print(line)


if __name__ == "__main__":
    main()
