import torch

from .base import DTYPES, DtypeSpec, format_of

# OCP E5M2 (torch's float8_e5m2): IEEE-like, max 57344, u = 2^-3.
DTYPES.register(DtypeSpec("float8_e5m2", torch.float8_e5m2, format_of("float8_e5m2", torch.float8_e5m2), "emulated"))
