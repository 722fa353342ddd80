import torch

from .base import DTYPES, DtypeSpec

DTYPES.register(DtypeSpec("bfloat16", torch.bfloat16))
