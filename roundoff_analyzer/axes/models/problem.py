"""What a model gives the sweep: a training step (`Problem`), or the special case of one ODE solve on [0, 1] whose loss
reads the whole trajectory (`TrajectoryProblem`, the form of the built-in models and of `(func, y0, loss)`
factories).

A step is `step(model, batch, odeint) -> loss`: the user's own forward and loss, calling the `odeint` it is handed any
number of times, with torchdiffeq's signature, on any time tensor, with tuple states, and with encoders and decoders
around it. The sweep hands it an `odeint` that solves with the configuration's library, method and dtype in
n_timesteps equal steps across each call's span, so the same step runs in float64 for the reference and in every
configuration. Both forms answer `model`, `step`, `sample_batch` and `has_more_batches`, so the sweep runs either
the same way; the trajectory form lets the fine reference share one solve across n_timesteps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from ...core.errors import InputError

# step(model, batch, odeint) -> a scalar loss.
Step = Callable[[nn.Module, Any, Callable[..., Any]], torch.Tensor]
Loss = Callable[[torch.Tensor], torch.Tensor]


class NoMoreBatches(LookupError):
    """`sample_batch(k)` has no batch k: the data ran out (the gradient noise uses the batches before it)."""


@dataclass
class Problem:
    """A model's training step, as the user wrote it: every parameter of `model` is measured.

    Attributes:
        model: The `nn.Module` whose parameters are measured (and trained by `roundoff train`): encoder, vector
            field and decoder alike.
        step: `step(model, batch, odeint) -> loss`, the forward and the loss of one training step. It calls the
            `odeint` it is handed (torchdiffeq's signature: `odeint(func, y0, t, ...)`; `y0` a tensor or a tuple of
            tensors, `t` any increasing or decreasing times) as often as it needs; the handed `odeint` solves with
            the configuration's library, method and dtype in n_timesteps equal steps across `t[0] … t[-1]` and
            ignores the `method`, `rtol`, `atol` and `options` it is given.
        sample_batch: `sample_batch(k)`: batch `k` of the data in whatever form it has (a tensor, a tuple such as
            `(inputs, targets)`, a dict of tensors). `k = 0` is the sweep's fixed batch; `k >= 1` are the batches
            of the gradient noise and of training. Raise `IndexError` where there is no batch `k`.
        data_source: Where the batches come from, for the manifest and the report.
        notes: Anything the model wants recorded in the manifest.
        batch_size: The points in one batch, said beside every ratio to the gradient noise (default: the leading
            dimension of what sample_batch returns, measuring/batch_size.py).
        solve_of_record: Which of the step's solves, in the order it makes them (negative: from the last, -1 the
            last), is the one of record: its states are the solution the rows' `sol_rel_err` and `final_rel_err`
            compare, its span is their `t0` and `t1`, its steps the profile, and its distance from the fine reference
            the solution's discretisation error. Default: the solve of the longest span (the first of those), so that
            an encoder's short segments are not judged in place of the solve the loss reads.

    Example:
        ```python
        def my_model(seed: int = 0):
            model = LatentODE()
            def step(model, batch, odeint):
                times, observations = batch
                z = odeint(model.func, model.encoder(observations), times)
                return ((model.decoder(z) - observations) ** 2).mean()
            return ra.Problem(model=model, step=step, sample_batch=lambda k: data[k])
        ```
    """

    model: nn.Module
    step: Step
    sample_batch: Callable[[int], Any]
    data_source: str = "built by the model's factory"
    notes: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    solve_of_record: int | None = None
    # Where the loss is formed unless asked otherwise (the loss_in axis): the whole step under autocast, as a training
    # script runs it.
    default_loss_in: ClassVar[str] = "autocast"
    # The form's name, as manifest.json records it (`problem.form`) and the report reads it.
    form: ClassVar[str] = "step"

    @property
    def has_more_batches(self) -> bool:
        return True  # the sampler says where its data ends (NoMoreBatches, IndexError)

    def batches(self, count: int | None = None) -> Iterator[Any]:
        """Batches 1, 2, … of the model's data (`count` of them, or until the data ends): a training's batches; batch
        0 is the sweep's fixed batch."""
        return _batches(self.sample_batch, count)

    def with_model(self, model: nn.Module) -> Problem:
        return replace(self, model=model)

    def with_loss_scale(self, factor: float) -> Problem:
        step = self.step

        def scaled(model: nn.Module, batch: Any, odeint: Callable[..., Any]) -> torch.Tensor:
            return factor * step(model, batch, odeint)

        return replace(self, step=scaled)


class GridSolve(Protocol):
    """What the trajectory form asks of the `odeint` it is handed: every state of the configuration's grid."""

    def on_grid(self, func: nn.Module, y0: torch.Tensor, t0: float, t1: float) -> torch.Tensor: ...


@dataclass
class TrajectoryProblem:
    """One fixed ODE problem: `func(t, y)` the right-hand side (float32 parameters), `y0` the float32 initial state and
    `loss(trajectory)` a scalar computed in the trajectory's dtype from all N+1 states of the grid on [0, 1].

    The step it stands for: `loss(states at every point of the n_timesteps grid on [0, 1])`; batch 0 is y0.
    """

    func: nn.Module
    y0: torch.Tensor
    loss: Loss
    data_source: str
    exact_solution: Callable[[torch.Tensor], torch.Tensor] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # Batch k >= 1 of the model's data as an initial state like y0 (batch 0 is y0 itself); None where the model
    # cannot draw another batch.
    batch_sampler: Callable[[int], torch.Tensor] | None = None
    # Unless asked otherwise the loss is formed after the solve, in float32, as every run did before the loss_in axis.
    default_loss_in: ClassVar[str] = "float32"
    form: ClassVar[str] = "trajectory"

    @property
    def model(self) -> nn.Module:
        return self.func

    @property
    def has_more_batches(self) -> bool:
        return self.batch_sampler is not None

    def step(self, model: nn.Module, batch: torch.Tensor, odeint: GridSolve) -> torch.Tensor:
        return self.loss(odeint.on_grid(model, batch, 0.0, 1.0))

    def batches(self, count: int | None = None) -> Iterator[torch.Tensor]:
        """Initial states of batches 1, 2, … of the model's data (`count` of them, or until the data ends): a
        training's batches; batch 0 is y0, the sweep's fixed batch."""
        return _batches(self.sample_batch, count)

    def sample_batch(self, k: int) -> torch.Tensor:
        if k == 0:
            return self.y0
        if self.batch_sampler is None:
            raise NoMoreBatches("the model offers no batch sampler, so no second batch can be drawn")
        return self.batch_sampler(k)

    def with_model(self, model: nn.Module) -> TrajectoryProblem:
        return replace(self, func=model)

    def with_loss_scale(self, factor: float) -> TrajectoryProblem:
        loss = self.loss

        def scaled(trajectory: torch.Tensor) -> torch.Tensor:
            return factor * loss(trajectory)

        return replace(self, loss=scaled)


def _batches(sample_batch: Callable[[int], Any], count: int | None) -> Iterator[Any]:
    for k in itertools.count(1) if count is None else range(1, count + 1):
        try:
            batch = sample_batch(k)
        except (NoMoreBatches, IndexError, InputError):  # the data ran out (a file: no rows for batch k)
            return
        yield batch


# What a model builds: either form.
ModelProblem = Problem | TrajectoryProblem


def recorded_as_step(recorded: dict | None) -> bool:
    """Whether a manifest's record of the problem (`problem`) says the model was a training step."""
    return (recorded or {}).get("form") == Problem.form
