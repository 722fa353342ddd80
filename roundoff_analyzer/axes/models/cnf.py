"""The 2-D hypernetwork CNF of the roundoff study in "Mixed Precision Training of Neural ODEs" (the paper behind
rampde), after torchdiffeq's `examples/cnf.py`, on FFJORD's toy data.

A hypernetwork maps t through two tanh layers of `hidden` units to the weights of `width` planar
units: w_i, u_i (gated by sigmoid(g_i)) and b_i. The point moves as dz/dt = mean_i u_i tanh(w_i.z + b_i)
and its log-density as dl/dt = -tr(df/dz) = -mean_i (u_i.w_i)(1 - tanh^2(w_i.z + b_i)): the trace in
closed form, so the right-hand side never calls autograd and the native solver's backward
differentiates it like any other function. Parameter names follow torchdiffeq's example
(`hyper_net.fc1.weight`, ...), so its `func_state_dict` checkpoints load with `--checkpoint`.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import nn

from ..data import DataRequest
from .base import MODELS, ModelOptions, batch_sampler, load_batch, seeded_generator
from .problem import TrajectoryProblem

DIMENSION = 2


class CNFOptions(ModelOptions):
    hidden: int = Field(32, gt=0, description="units in each of the hypernetwork's two hidden layers")
    width: int = Field(128, gt=0, description="planar units whose weights W, U, G, B the hypernetwork produces")
    batch: int = Field(512, gt=0, description="points in the fixed batch")


class HyperNetwork(nn.Module):
    def __init__(self, dimension: int, hidden: int, width: int, generator: torch.Generator) -> None:
        super().__init__()
        self.dimension, self.width = dimension, width
        self.fc1 = nn.Linear(1, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 3 * width * dimension + width)
        with torch.no_grad():
            for layer in (self.fc1, self.fc2, self.fc3):
                # nn.Linear's default range, drawn from the seeded generator.
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)

    def forward(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """W (width, d), B (width,), U (width, d), laid out in fc3's output as in torchdiffeq's example."""
        # The grid's dtype need not be the parameters' (pure mode casts the parameters only).
        params = torch.as_tensor(t).reshape(1, 1).to(self.fc1.weight.dtype)
        params = torch.tanh(self.fc1(params))
        params = torch.tanh(self.fc2(params))
        params = self.fc3(params).reshape(-1)
        block = self.width * self.dimension
        w = params[:block].reshape(self.width, self.dimension)
        u = params[block : 2 * block].reshape(self.width, self.dimension)
        gate = params[2 * block : 3 * block].reshape(self.width, self.dimension)
        b = params[3 * block :]
        return w, b, u * torch.sigmoid(gate)


class CNFDynamics(nn.Module):
    """d/dt (z, l) = (mean_i u_i h_i, -mean_i (u_i.w_i)(1 - h_i^2)) with h_i = tanh(w_i.z + b_i)."""

    def __init__(self, hyper_net: HyperNetwork) -> None:
        super().__init__()
        self.hyper_net = hyper_net

    def forward(self, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        z = state[:, : self.hyper_net.dimension]
        w, b, u = self.hyper_net(t)
        h = torch.tanh(torch.matmul(z, w.t()) + b)  # (batch, width)
        width = self.hyper_net.width
        dz = torch.matmul(h, u) / width
        trace = torch.matmul(1 - h**2, (u * w).sum(dim=1)) / width
        return torch.cat([dz, -trace.unsqueeze(1)], dim=1)


def negative_log_likelihood(trajectory: torch.Tensor) -> torch.Tensor:
    """-mean log p(x) with log p(x) = log N(z_1; 0, I) - l_1 (l integrates -tr(df/dz) from l_0 = 0)."""
    final = trajectory[-1]
    z, log_density_change = final[:, :DIMENSION], final[:, DIMENSION]
    log_normal = -0.5 * DIMENSION * math.log(2 * math.pi) - 0.5 * (z**2).sum(dim=1)
    return -(log_normal - log_density_change).mean()


class CNF:
    name = "cnf"
    description = "2-D hypernetwork CNF (closed-form trace) on toy data; loss = negative log-likelihood under N(0, I)"
    options_type = CNFOptions
    default_data = "2spirals"

    def problem_elements(self, options: CNFOptions) -> int:
        """Elements of the hypernetwork's weights and of the batch's states, without building them."""
        hidden, planar = options.hidden, 3 * options.width * DIMENSION + options.width
        return 2 * hidden + (hidden + 1) * hidden + (hidden + 1) * planar + options.batch * (DIMENSION + 1)

    def build(self, options: CNFOptions, device: torch.device, data: DataRequest | None = None) -> TrajectoryProblem:
        generator = seeded_generator(options.seed)
        func = CNFDynamics(HyperNetwork(DIMENSION, options.hidden, options.width, generator))
        batch = load_batch(self, data, options.batch, DIMENSION, generator)
        return TrajectoryProblem(
            func=func.to(device),
            y0=_state(batch.points).to(device),
            loss=negative_log_likelihood,
            data_source=batch.label,
            batch_sampler=batch_sampler(self, data, options, options.batch, DIMENSION, _state, device),
        )


def _state(points: torch.Tensor) -> torch.Tensor:
    # (z, log-density change starting at 0)
    return torch.cat([points, torch.zeros(points.shape[0], 1)], dim=1)


MODELS.register(CNF())
