import torch

from .base import OPTIMIZERS, OptimizerSpec

OPTIMIZERS.register(
    OptimizerSpec("adam", "torch.optim.Adam(params, lr)", lambda params, lr: torch.optim.Adam(params, lr=lr))
)
