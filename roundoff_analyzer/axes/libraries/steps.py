"""Counting what a solve costs: function evaluations, and an adaptive solver's accepted and rejected steps."""

from __future__ import annotations

import torch

from ...core.errors import StepBudgetExhausted


class CountedDynamics(torch.nn.Module):
    """f(t, y) unchanged, with a count of its calls; its parameters are func's own (a submodule's)."""

    def __init__(self, func) -> None:
        super().__init__()
        self.func = func
        self.calls = 0

    def forward(self, t, y):
        self.calls += 1
        return self.func(t, y)


def exhausted(library: str, steps: int, max_steps: int) -> StepBudgetExhausted:
    return StepBudgetExhausted(
        f"{library} attempted {steps} steps (--max-steps {max_steps}) without reaching the end of the time grid", steps
    )


class StepCountingDynamics(torch.nn.Module):
    """f(t, y) with torchdiffeq's step callbacks: counts accepted and rejected steps and stops the solve
    (StepBudgetExhausted) once `max_steps` steps were attempted."""

    def __init__(self, func, library: str, max_steps: int) -> None:
        super().__init__()
        self.func, self.library, self.max_steps = func, library, max_steps
        self.accepted = self.rejected = 0

    def forward(self, t, y):
        return self.func(t, y)

    def callback_accept_step(self, t0, y0, dt):
        self.accepted += 1
        self._check_budget()

    def callback_reject_step(self, t0, y0, dt):
        self.rejected += 1
        self._check_budget()

    def _check_budget(self) -> None:
        steps = self.accepted + self.rejected
        if steps > self.max_steps:
            raise exhausted(self.library, steps, self.max_steps)
