import torch

from .base import DTYPES, DtypeSpec

DTYPES.register(DtypeSpec("float16", torch.float16))
