"""A model whose own module calls torchdiffeq (`examples/odeblock_models.py`, public code, imported unchanged), swept
as it is: during each step its `odeint` answers with the library under test, so the step ignores the one it is handed.

    roundoff sweep --model examples/odeblock.py:odenet --library native,torchdiffeq --timesteps 8,32
"""

import torch
from odeblock_models import ODENet

import roundoff_analyzer as ra


def odenet(batch: int = 64, hidden: int = 16, seed: int = 0) -> ra.Problem:
    def sample_batch(k):  # two classes of 2-D points: the sign of x * y
        x = torch.randn(batch, 2, generator=torch.Generator().manual_seed(seed * 1_000_003 + k))
        return x, (x[:, 0] * x[:, 1] > 0).long()

    def step(model, batch, odeint):  # the model calls torchdiffeq's odeint itself: `odeint` goes unused
        x, labels = batch
        return torch.nn.functional.cross_entropy(model(x), labels)

    return ra.Problem(model=ODENet(2, hidden, 2), step=step, sample_batch=sample_batch)
