import torch

from .base import OPTIMIZERS, OptimizerSpec

# torch's default decoupled weight decay (0.01).
OPTIMIZERS.register(
    OptimizerSpec("adamw", "torch.optim.AdamW(params, lr)", lambda params, lr: torch.optim.AdamW(params, lr=lr))
)
