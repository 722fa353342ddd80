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
- The authors' rounding: Φ's gradient and trace, the right-hand side and the loss are the operations of their code
  (src/Phi.py, src/OTFlowProblem.py) in its order, layout and precision, so that under autocast a low-precision run
  rounds where theirs does (tests/test_models.py checks float16 and bfloat16 gradients bit for bit against an
  independent computation in that order). docs/axes.md sets the default settings beside the authors'.
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
    # log(exp(x) + exp(-x)) written so that it cannot overflow for large |x|, as the authors write it: log(1 + ·),
    # not log1p, which rounds differently in float16, and |x| taken twice, each its own term of the backward pass.
    return torch.abs(x) + torch.log(1 + torch.exp(-2.0 * torch.abs(x)))


def tanh_derivative(x: torch.Tensor) -> torch.Tensor:
    return 1 - torch.pow(torch.tanh(x), 2)


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
        """grad_s Phi (batch, d+1) and the trace of the Hessian in x alone (batch,): eqs. 11 and 13, in the
        authors' operations and order, so that autocast rounds where their code rounds. Their layout is one
        column per example (z_i, the Jacobians and the trace's terms are features x batch), the opening's
        products with z_1 and K_0's columns are elementwise (float32 under autocast, with the float32 w), and
        each ResNet layer K_i u_{i-1} + b_i is evaluated again wherever it is needed: each evaluation is its own
        float16 product and its own term of the weight's gradient."""
        d, h = self.d, self.step
        antiderivative_tanh, tanh_derivative = _helpers(self.jit)
        layers = [cast(nn.Linear, layer) for layer in self.layers]  # a ModuleList's items are typed as Module
        n_examples, hidden = s.shape[0], self.opening.out_features
        symmetric_a = torch.matmul(self.A.t(), self.A)

        opening = self.opening(s)
        u = [antiderivative_tanh(opening)]
        for layer in layers[:-1]:  # u_M, the last layer's output, enters Phi but neither its gradient nor its trace
            u.append(u[-1] + h * antiderivative_tanh(layer(u[-1])))
        # The last layer evaluated all the same, where the authors' forward evaluates it: under autocast its weight's
        # float16 copy is made (and cached) here, and that place orders autograd's sum of the weights' gradients
        # over the evaluations of a solve; made later, a float16 solve's gradient of w changes in its last bits.
        layers[-1](u[-1])
        tanh_opening = torch.tanh(opening)

        # z[i] = dPhi/du_i as a column per example, walked back from the output weights w (z[M] = w).
        def z_after(i: int) -> torch.Tensor:
            return self.w.unsqueeze(0).t() if i == len(layers) else z[i + 1]

        z: list[torch.Tensor] = [s] * (len(layers) + 1)  # placeholders, each overwritten below
        for i in range(len(layers), 0, -1):
            layer = layers[i - 1]
            after = z_after(i)
            z[i] = after + h * torch.mm(layer.weight.t(), torch.tanh(layer(u[i - 1])).t() * after)
        z[0] = torch.mm(self.opening.weight.t(), tanh_opening.t() * z[1])
        gradient = z[0] + torch.mm(symmetric_a, s.t()) + self.c.weight.t()

        opening_x = self.opening.weight[:, :d]
        trace = torch.sum(
            (tanh_derivative(opening.t()) * z[1]).reshape(hidden, -1, n_examples)
            * torch.pow(opening_x.unsqueeze(2), 2),
            dim=(0, 1),
        )
        jacobian = opening_x.unsqueeze(2) * tanh_opening.t().unsqueeze(1)  # du_0/dx: (m, d, batch)
        for i, layer in enumerate(layers, start=1):
            k_jacobian = torch.mm(layer.weight, jacobian.reshape(hidden, -1)).reshape(hidden, -1, n_examples)
            after = z_after(i)
            pre = layer(u[i - 1]).t()
            term = (tanh_derivative(pre) * after).reshape(hidden, -1, n_examples) * torch.pow(k_jacobian, 2)
            trace = trace + h * torch.sum(term, dim=(0, 1))
            if i < len(layers):  # the last layer's Jacobian would feed no later trace term: not formed
                jacobian = jacobian + h * torch.tanh(pre).reshape(hidden, -1, n_examples) * k_jacobian
        return gradient.t(), trace + torch.trace(symmetric_a[:d, :d])

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        """Phi itself; used by tests to check the closed forms against autograd."""
        antiderivative_tanh, _ = _helpers(self.jit)
        u = antiderivative_tanh(self.opening(s))
        for layer in self.layers:
            u = u + self.step * antiderivative_tanh(layer(u))
        symmetric_a = torch.matmul(self.A.t(), self.A)
        quadratic = 0.5 * torch.sum(torch.matmul(s, symmetric_a) * s, dim=1)
        return torch.matmul(u, self.w) + quadratic + self.c(s).squeeze(1)


class OTFlowDynamics(nn.Module):
    """d/dt (x, l, L, R) = (v, -tr(Hess_x Phi)/a0, |v|^2/2, |d_t Phi - |grad_x Phi|^2/(2 a0)|), v = -grad_x Phi/a0,
    each term formed as the authors form it (-(1/a0) times, |-d_t Phi + a0 |v|^2/2|)."""

    def __init__(self, potential: OTFlowPotential, alpha0: float) -> None:
        super().__init__()
        self.potential = potential
        self.alpha0 = alpha0

    def forward(self, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        d, a0 = self.potential.d, self.alpha0
        x = state[:, :d]
        # The time column holds t rounded to x's dtype, as padding x with the number t does.
        s = torch.cat([x, t.to(x.dtype).expand(x.shape[0], 1)], dim=1)
        gradient, trace = self.potential.gradient_and_trace(s)
        velocity = -(1.0 / a0) * gradient[:, :d]
        log_det = -(1.0 / a0) * trace.unsqueeze(1)
        transport = 0.5 * torch.sum(torch.pow(velocity, 2), 1, keepdim=True)
        # |-d_t Phi + a0 |v|^2 / 2| = |d_t Phi - |grad_x Phi|^2 / (2 a0)|
        hjb = torch.abs(-gradient[:, -1].unsqueeze(1) + a0 * transport)
        return torch.cat((velocity, log_det, transport, hjb), 1)


def otflow_loss(d: int, alpha: tuple[float, float, float]):
    """a0 E[L] + a1 E[C] + a2 E[R] of the final state (eq. 8), C the negative log-likelihood under N(0, I) (eq. 3),
    each term formed and summed as the authors' code forms it."""
    a0, a1, a2 = alpha

    def loss(trajectory: torch.Tensor) -> torch.Tensor:
        final = trajectory[-1]
        log_density = torch.sum(-0.5 * math.log(2 * math.pi) - torch.pow(final[:, :d], 2) / 2, 1, keepdim=True)
        negative_log_likelihood = -(log_density + final[:, d].unsqueeze(1))
        transport, likelihood, hjb = (
            torch.mean(final[:, d + 1]),
            torch.mean(negative_log_likelihood),
            torch.mean(final[:, d + 2]),
        )
        return transport * a0 + likelihood * a1 + hjb * a2

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
