"""What a solve saw on its way: per-step magnitudes forward and backward, and the first non-finite step."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepRecord:
    # Backward steps are counted as the backward walk counts: 0 is the last time step.
    backward_step: int
    max_abs_adjoint: float
    # What entered the low-precision product: the scaled adjoint, cast to the low dtype.
    max_abs_low_adjoint: float
    low_adjoint_zero_share: float
    finite: bool


@dataclass
class SolveReport:
    """What a solve records as it runs, passed as `odeint(..., report=SolveReport())`.

    Attributes:
        forward_max_abs: The largest magnitude of each of the N+1 states (NaN where a state is not finite).
        backward: One `StepRecord` per backward step: the adjoint's largest magnitude in float32 and in the low
            dtype, its share of exact zeros, whether the step was finite.
        n_function_evals: The forward solve's evaluations of f.
        accepted_steps: An adaptive solver's accepted steps; None for a fixed grid.
        rejected_steps: An adaptive solver's rejected steps; None for a fixed grid.
        checkpoint: The native solver's backward: "stages" (through the forward's kept stage graphs) or "states" (each
            step rebuilt from its stored state); None for another solver.

    Example:
        ```python
        report = SolveReport()
        odeint(func, y0, t, method="rk4_classical", report=report)
        report.forward_overflow_step   # the first state that overflowed, or None
        ```
    """

    forward_max_abs: list[float] = field(default_factory=list)
    backward: list[StepRecord] = field(default_factory=list)
    # Function evaluations of the forward solve, and an adaptive solver's accepted and rejected steps.
    n_function_evals: int | None = None
    accepted_steps: int | None = None
    rejected_steps: int | None = None
    # The native solver's backward: "stages" (through the forward's kept stage graphs) or "states" (each step rebuilt
    # from its stored state); None for another solver.
    checkpoint: str | None = None

    def record_forward(self, trajectory: torch.Tensor) -> None:
        """Largest magnitude of each of the N+1 states (NaN counts as non-finite)."""
        flat = trajectory.detach().reshape(trajectory.shape[0], -1).abs().to(torch.float64)
        self.forward_max_abs = torch.where(flat.isnan().any(dim=1), float("nan"), flat.amax(dim=1)).tolist()

    def record_backward(self, step: int, adjoint: torch.Tensor, low_adjoint: torch.Tensor, finite: bool) -> None:
        zero_share = float((low_adjoint == 0).float().mean()) if low_adjoint.numel() else 0.0
        self.backward.append(StepRecord(step, _max_abs(adjoint), _max_abs(low_adjoint), zero_share, finite))

    def record_steps(self, accepted: int, rejected: int) -> None:
        self.accepted_steps, self.rejected_steps = int(accepted), int(rejected)

    @property
    def forward_overflow_step(self) -> int | None:
        return next((k for k, m in enumerate(self.forward_max_abs) if not _finite(m)), None)

    @property
    def backward_overflow_step(self) -> int | None:
        return next((r.backward_step for r in self.backward if not r.finite), None)

    @property
    def max_zero_share(self) -> float | None:
        """The largest share of exactly-zero entries in the low-precision adjoint over the backward steps."""
        return max((r.low_adjoint_zero_share for r in self.backward), default=None)

    @property
    def max_abs_adjoint(self) -> float | None:
        """The largest finite adjoint entry as the low dtype held it (what its range had to hold)."""
        finite = [r.max_abs_low_adjoint for r in self.backward if _finite(r.max_abs_low_adjoint)]
        return max(finite) if finite else None


def _max_abs(x: torch.Tensor) -> float:
    return float(x.detach().abs().max()) if x.numel() else 0.0


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))
