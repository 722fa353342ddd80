import torch

from .base import DTYPES, DtypeSpec

DTYPES.register(DtypeSpec("float32", torch.float32))
