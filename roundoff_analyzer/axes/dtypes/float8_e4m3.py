import torch

from .base import DTYPES, DtypeSpec, format_of

# OCP E4M3 (torch's float8_e4m3fn): no infinity, max 448, u = 2^-4. No CPU runs its arithmetic.
DTYPES.register(
    DtypeSpec("float8_e4m3", torch.float8_e4m3fn, format_of("float8_e4m3", torch.float8_e4m3fn), "emulated")
)
