"""dy/dt = A y: a problem with a closed-form solution, for tests and for checking a solver's order."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from ..data import DataRequest
from .base import MODELS, ModelOptions, batch_sampler, load_batch, seeded_generator
from .problem import TrajectoryProblem


class LinearOptions(ModelOptions):
    d: int = Field(4, gt=0)
    batch: int = Field(8, gt=0)


class LinearDynamics(nn.Module):
    def __init__(self, matrix: torch.Tensor) -> None:
        super().__init__()
        self.linear = nn.Linear(matrix.shape[0], matrix.shape[0], bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(matrix)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.linear(y)


def _trajectory_loss(trajectory: torch.Tensor) -> torch.Tensor:
    # Every state enters the loss, so the adjoint receives a contribution at each grid point.
    return 0.5 * (trajectory**2).mean()


class Linear:
    name = "linear"
    description = "dy/dt = A y with a stable random A; closed-form solution expm(tA) y0"
    options_type = LinearOptions
    default_data = "synthetic"

    def problem_elements(self, options: LinearOptions) -> int:
        """Elements of A and of the batch, without building them."""
        return options.d * options.d + options.batch * options.d

    def build(self, options: LinearOptions, device: torch.device, data: DataRequest | None = None) -> TrajectoryProblem:
        generator = seeded_generator(options.seed)
        skew = torch.randn(options.d, options.d, generator=generator)
        matrix = (skew - skew.t()) - 0.5 * torch.eye(options.d)
        batch = load_batch(self, data, options.batch, options.d, generator, dimension_option="d")
        y0 = batch.points
        func = LinearDynamics(matrix).to(device)

        def exact_solution(t: torch.Tensor) -> torch.Tensor:
            weight = func.linear.weight.detach().to(t.dtype)
            return torch.stack([y0.to(t) @ torch.linalg.matrix_exp(weight * ti).t() for ti in t])

        return TrajectoryProblem(
            func=func,
            y0=y0.to(device),
            loss=_trajectory_loss,
            data_source=batch.label,
            exact_solution=exact_solution,
            batch_sampler=batch_sampler(
                self, data, options, options.batch, options.d, lambda points: points, device, "d"
            ),
        )


MODELS.register(Linear())
