import torch

from .base import OPTIMIZERS, OptimizerSpec

MOMENTUM = 0.9

OPTIMIZERS.register(
    OptimizerSpec(
        "sgd",
        f"torch.optim.SGD(params, lr, momentum={MOMENTUM})",
        lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=MOMENTUM),
    )
)
