"""OT-Flow as its authors define it: D. Onken, S. Wu Fung, X. Li, L. Ruthotto, "OT-Flow: Fast and Accurate Continuous
Normalizing Flows via Optimal Transport", AAAI 2021 (arXiv:2006.00104; the equation numbers below are the arXiv
version's).

- The potential Φ(s; θ) = wᵀN(s; θ_N) + ½ sᵀ(AᵀA)s + bᵀs + c of s = (x, t), with A of r = min(10, d + 1) rows and N
  a ResNet of `n_layers` layers (the opening one included, step h = 1 / (n_layers − 1)) whose activation is
  σ(x) = log(exp(x) + exp(−x)), the antiderivative of tanh. ∇Φ and the trace of the Hessian in x are written in
  closed form, so the right-hand side never calls autograd and a low-precision run sees the arithmetic a trained
  OT-Flow model does.
- The state (x, ℓ, L, R): the characteristics and their log-determinant (eq. 2) with the transport cost L (eq. 5) and
  the HJB penalty R (eq. 7) accumulated along them. With v = −∇ₓΦ / α₀,
      ∂t x = v,   ∂t ℓ = −tr(∇²ₓΦ) / α₀,   ∂t L = ½‖v‖²,   ∂t R = |∂tΦ − ‖∇ₓΦ‖² / (2α₀)|.
  α₀ = 1 is the paper's equations; another α₀ weighs the transport cost by α₀, whose optimal velocity is then
  −∇Φ / α₀ and whose HJB equation is ∂tΦ − ‖∇Φ‖² / (2α₀) = 0.
- The loss (eq. 8) weighs the three terms in the authors' order, α = (α₀, α₁, α₂) on (L, C, R):
      α₀ E[L(x, T)] + α₁ E[C(x, T)] + α₂ E[R(x, T)],   C = ½‖x(T)‖² − ℓ(T) + (d/2) log 2π,
  C the negative log-likelihood under the target N(0, I) (eq. 3). The default α = (1, 2000, 800) is the authors'
  BSDS300 setting: 2000 on the likelihood, 800 on the HJB penalty.
- The authors' initialisation: nn.Linear's default range for the opening layer and the first ResNet layer, every later
  ResNet layer a copy of the first, A Xavier-uniform, w = 1, b = 0, c = 0.
"""

from __future__ import annotations

import functools
import math
from typing import Any, cast

import torch
from pydantic import Field, field_validator
from torch import nn

from ..data import DataRequest
from .base import MODELS, ModelOptions, batch_sampler, load_batch, seeded_generator
from .problem import TrajectoryProblem

# A has at most this many rows (the authors' r = 10), and no more than s = (x, t) has entries.
MAX_RANK = 10


def rank_of(d: int) -> int:
    return min(MAX_RANK, d + 1)


class OTFlowOptions(ModelOptions):
    d: int = Field(8, gt=0, description="dimension of x (63 for BSDS300)")
    hidden: int = Field(32, gt=0, description="width m of the ResNet")
    n_layers: int = Field(2, ge=2, description="ResNet layers, the opening layer included (OT-Flow's nTh)")
    alpha: tuple[float, float, float] = Field(
        (1.0, 2000.0, 800.0),
        description=(
            "loss weights (a0, a1, a2) on the transport cost, the negative log-likelihood and the HJB penalty, in "
            "OT-Flow's order (the authors' BSDS300 setting is the default)"
        ),
    )
    batch: int = Field(64, gt=0, description="samples in the fixed batch")
    jit: bool = Field(
        False, description="compile the activation helpers with torch.jit.script, as the OT-Flow code does"
    )

    @field_validator("alpha", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(","))
        return value


def antiderivative_tanh(x: torch.Tensor) -> torch.Tensor:
    # log(exp(x) + exp(-x)) written so that it cannot overflow for large |x|.
    magnitude = x.abs()
    return magnitude + torch.log1p(torch.exp(-2.0 * magnitude))


def tanh_derivative(x: torch.Tensor) -> torch.Tensor:
    return 1.0 - torch.tanh(x) ** 2


# The OT-Flow code scripts these two helpers; `-o jit=true` does the same, so that a user can see
# whether the TorchScript interpreter changes the outcome on their device. Scripted on first use
# (not at import), and looked up at call time so that the module stays deep-copyable.
@functools.cache
def _helpers(jit: bool):
    if not jit:
        return antiderivative_tanh, tanh_derivative
    return torch.jit.script(antiderivative_tanh), torch.jit.script(tanh_derivative)


class OTFlowPotential(nn.Module):
    def __init__(self, d: int, hidden: int, n_layers: int, generator: torch.Generator, jit: bool = False) -> None:
        super().__init__()
        self.d = d
        self.jit = jit
        self.step = 1.0 / (n_layers - 1)
        rank = rank_of(d)
        self.opening = nn.Linear(d + 1, hidden)
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(n_layers - 1))
        self.w = nn.Parameter(torch.ones(hidden))
        self.A = nn.Parameter(torch.empty(rank, d + 1))
        self.c = nn.Linear(d + 1, 1)  # b's + c
        with torch.no_grad():
            first = cast(nn.Linear, self.layers[0])
            for layer in (self.opening, first):  # nn.Linear's default range, drawn from the seeded generator
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)
            for later in self.layers[1:]:  # the authors' later ResNet layers start as copies of the first
                later.load_state_dict(first.state_dict())
            xavier = math.sqrt(6.0 / (rank + d + 1))  # Xavier-uniform: fan in d + 1, fan out rank
            self.A.uniform_(-xavier, xavier, generator=generator)
            self.c.weight.zero_()
            self.c.bias.zero_()

    def gradient_and_trace(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """grad_s Phi (batch, d+1) and the trace of the Hessian in x alone (batch,)."""
        d, h = self.d, self.step
        antiderivative_tanh, tanh_derivative = _helpers(self.jit)
        layers = [cast(nn.Linear, layer) for layer in self.layers]  # a ModuleList's items are typed as Module
        opening = self.opening(s)
        activations = [antiderivative_tanh(opening)]
        pre_activations = []
        for layer in layers:
            pre = layer(activations[-1])
            pre_activations.append(pre)
            activations.append(activations[-1] + h * antiderivative_tanh(pre))

        # z[i] = dPhi/du_i, walked back from the output weights.
        z = [self.w.expand_as(opening)] * len(activations)
        for i in range(len(layers), 0, -1):
            layer = layers[i - 1]
            z[i - 1] = z[i] + h * torch.matmul(torch.tanh(pre_activations[i - 1]) * z[i], layer.weight)
        tanh_opening = torch.tanh(opening)
        symmetric_a = self.A.t() @ self.A
        gradient = torch.matmul(tanh_opening * z[0], self.opening.weight) + torch.matmul(s, symmetric_a) + self.c.weight

        opening_x = self.opening.weight[:, :d]
        trace = torch.matmul(tanh_derivative(opening) * z[0], (opening_x**2).sum(dim=1))
        jacobian = tanh_opening.unsqueeze(2) * opening_x.unsqueeze(0)  # du_0/dx: (batch, m, d)
        for i, layer in enumerate(layers, start=1):
            pre = pre_activations[i - 1]
            k_jacobian = torch.matmul(layer.weight, jacobian)
            trace = trace + h * ((tanh_derivative(pre) * z[i]).unsqueeze(2) * k_jacobian**2).sum(dim=(1, 2))
            jacobian = jacobian + h * torch.tanh(pre).unsqueeze(2) * k_jacobian
        return gradient, trace + torch.trace(symmetric_a[:d, :d])

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        """Phi itself; used by tests to check the closed forms against autograd."""
        antiderivative_tanh, _ = _helpers(self.jit)
        opening = self.opening(s)
        u = antiderivative_tanh(opening)
        for layer in self.layers:
            u = u + self.step * antiderivative_tanh(layer(u))
        quadratic = 0.5 * ((s @ self.A.t()) ** 2).sum(dim=1)
        return u @ self.w + quadratic + self.c(s).squeeze(1)


class OTFlowDynamics(nn.Module):
    """d/dt (x, l, L, R) = (v, -tr(Hess_x Phi)/a0, |v|^2/2, |d_t Phi - |grad_x Phi|^2/(2 a0)|), v = -grad_x Phi/a0."""

    def __init__(self, potential: OTFlowPotential, alpha0: float) -> None:
        super().__init__()
        self.potential = potential
        self.alpha0 = alpha0

    def forward(self, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        d = self.potential.d
        x = state[:, :d]
        s = torch.cat([x, t.to(x.dtype).expand(x.shape[0], 1)], dim=1)
        gradient, trace = self.potential.gradient_and_trace(s)
        gradient_x, gradient_t = gradient[:, :d], gradient[:, d]
        velocity = -gradient_x / self.alpha0
        transport = 0.5 * (velocity**2).sum(dim=1)
        # ||grad_x Phi||^2 / (2 a0) = a0 |v|^2 / 2
        hjb = (gradient_t - self.alpha0 * transport).abs()
        return torch.cat(
            [velocity, (-trace / self.alpha0).unsqueeze(1), transport.unsqueeze(1), hjb.unsqueeze(1)],
            dim=1,
        )


def otflow_loss(d: int, alpha: tuple[float, float, float]):
    """a0 E[L] + a1 E[C] + a2 E[R] of the final state (eq. 8), C the negative log-likelihood under N(0, I) (eq. 3)."""
    a0, a1, a2 = alpha

    def loss(trajectory: torch.Tensor) -> torch.Tensor:
        final = trajectory[-1]
        x, log_det, transport, hjb = final[:, :d], final[:, d], final[:, d + 1], final[:, d + 2]
        negative_log_likelihood = 0.5 * (x**2).sum(dim=1) - log_det + 0.5 * d * math.log(2 * math.pi)
        return a0 * transport.mean() + a1 * negative_log_likelihood.mean() + a2 * hjb.mean()

    return loss


class OTFlow:
    name = "otflow"
    description = (
        "OT-Flow as Onken, Wu Fung, Li and Ruthotto (AAAI 2021) define it: their potential, closed-form gradient and "
        "Hessian trace, ODE (eqs. 2, 5, 7), loss (eq. 8, weights alpha on transport, likelihood, HJB), N(0, I) target "
        "and initialisation"
    )
    options_type = OTFlowOptions
    default_data = "synthetic"

    def problem_elements(self, options: OTFlowOptions) -> int:
        """Elements of the weights (OTFlowPotential's layers) and of the batch's states, without building them."""
        d1, hidden, rank = options.d + 1, options.hidden, rank_of(options.d)
        weights = d1 * hidden + hidden + (options.n_layers - 1) * (hidden + 1) * hidden + hidden + rank * d1 + d1 + 1
        return weights + options.batch * (options.d + 3)

    def build(self, options: OTFlowOptions, device: torch.device, data: DataRequest | None = None) -> TrajectoryProblem:
        generator = seeded_generator(options.seed)
        potential = OTFlowPotential(options.d, options.hidden, options.n_layers, generator, jit=options.jit)
        batch = load_batch(self, data, options.batch, options.d, generator, dimension_option="d")
        y0 = _state(batch.points)
        func = OTFlowDynamics(potential, options.alpha[0])
        return TrajectoryProblem(
            func=func.to(device),
            y0=y0.to(device),
            loss=otflow_loss(options.d, options.alpha),
            data_source=batch.label,
            batch_sampler=batch_sampler(
                self, data, options, options.batch, options.d, _state, device, dimension_option="d"
            ),
        )


def _state(points: torch.Tensor) -> torch.Tensor:
    # (x, log-determinant, transport cost, HJB penalty), the last three starting at 0.
    return torch.cat([points, torch.zeros(points.shape[0], 3)], dim=1)


MODELS.register(OTFlow())
