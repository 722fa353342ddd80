"""An ODE-Net written as public code writes it (the shape of ANODE's and torchdiffeq's examples): the module imports
torchdiffeq's `odeint` itself, and an `ODEBlock` calls it with its own tolerances in `forward`. Nothing here knows
roundoff-analyzer; `examples/odeblock.py` sweeps it unchanged.
"""

import torch
from torch import nn
from torchdiffeq import odeint


class ODEFunc(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.nfe = 0

    def forward(self, t, x):
        self.nfe += 1
        return self.net(x)


class ODEBlock(nn.Module):
    def __init__(self, odefunc, tol=1e-3):
        super().__init__()
        self.odefunc = odefunc
        self.integration_time = torch.tensor([0, 1]).float()
        self.tol = tol

    def forward(self, x):
        self.integration_time = self.integration_time.type_as(x)
        out = odeint(self.odefunc, x, self.integration_time, rtol=self.tol, atol=self.tol)
        return out[1]


class ODENet(nn.Module):
    def __init__(self, dim, hidden, classes):
        super().__init__()
        self.odeblock = ODEBlock(ODEFunc(dim, hidden))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.odeblock(x))
