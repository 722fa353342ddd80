"""One training step's loss and float32 parameter gradient in a setup, computed by the sweep's own run
(`one_run.run_once`: the library's solve, the mode and arithmetic, the scaling's backward).

The float32 weights are the master copy: autocast modes differentiate them directly; `pure` mode casts a
copy to the low dtype, whose gradients are brought back to float32 for the optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..axes.arithmetics import ARITHMETICS, ArithmeticRequest
from ..axes.dtypes import DTYPES
from ..axes.libraries import LIBRARIES
from ..axes.loss_placements import LOSS_PLACEMENTS
from ..axes.methods import METHODS
from ..axes.models import ModelProblem
from ..axes.modes import MODES, ProblemCopies
from ..axes.scalings import SCALINGS, ScalerSettings
from ..measuring.one_run import run_once
from ..measuring.run_spec import RunSpec
from .setups import TrainSetup

# GradScaler's defaults: after this many finite steps in a row the loss scale grows by this factor.
GROWTH_INTERVAL = 2000
GROWTH_FACTOR = 2.0


@dataclass
class LossScale:
    """The `grad` scaling's loss scale, carried from step to step as GradScaler carries it: a step starts at the
    scale the last one ended with (backed off where it had to retry) and grows after GROWTH_INTERVAL good steps."""

    scale: float
    good_steps: int = 0

    def settings(self, base: ScalerSettings) -> ScalerSettings:
        return base.model_copy(update={"init_scale": self.scale})

    def update(self, final_scale: float | None, retries: int | None, finite: bool) -> None:
        if final_scale is not None:
            self.scale = final_scale
        if not finite or retries:
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= GROWTH_INTERVAL:
            self.scale, self.good_steps = self.scale * GROWTH_FACTOR, 0


@dataclass
class StepResult:
    loss: float | None  # None when the forward left the range
    gradients: list[torch.Tensor] | None  # float32, one per trainable parameter; None: the step is skipped
    scale: float | None  # the loss or adjoint scale that counted
    failure: str | None  # why the step is skipped


class SetupStep:
    """The loss and gradient of one setup on one batch, with the master weights of `problem.model`."""

    def __init__(self, setup: TrainSetup, problem: ModelProblem, settings: ScalerSettings) -> None:
        self.setup, self.problem, self.settings = setup, problem, settings
        self.library, self.method = LIBRARIES.get(setup.library), METHODS.get(setup.method)
        self.dtype, self.mode, self.scaling = (
            DTYPES.get(setup.dtype),
            MODES.get(setup.mode),
            SCALINGS.get(setup.scaling),
        )
        self.arithmetic = ARITHMETICS.get(setup.arithmetic)
        self.loss_in = LOSS_PLACEMENTS.get(problem.default_loss_in)
        self.loss_scale = LossScale(settings.init_scale)

    def __call__(self, batch: Any) -> StepResult:
        copies = ProblemCopies(self.problem, batch)  # fresh each step: a pure-mode cast copies the current weights
        prepared = self.arithmetic.prepare(self.mode, copies, self.dtype, ArithmeticRequest())
        # A scale searched for is a training's loss scale, carried from step to step.
        searches = self.scaling.searches_scale
        settings = self.loss_scale.settings(self.settings) if searches else self.settings
        run = RunSpec(prepared, copies, self.library, self.method, self.setup.n_timesteps, loss_in=self.loss_in)
        outcome = run_once(run, self.scaling, settings)
        failure = outcome.failure
        finite = failure is None
        if searches:
            self.loss_scale.update(outcome.final_scale, outcome.retries, finite)
        loss = float(outcome.loss) if outcome.loss is not None and bool(torch.isfinite(outcome.loss)) else None
        if failure is not None:
            return StepResult(loss, None, outcome.final_scale, f"{failure.failure_class}: {failure.message}")
        gradients = [g.to(torch.float32) for g in outcome.param_grads]
        return StepResult(loss, gradients, outcome.final_scale, None)
