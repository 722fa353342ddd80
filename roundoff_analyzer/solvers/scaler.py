"""Dynamic adjoint scaling: keep the low-precision adjoint near 1/eps without overflowing it."""

from __future__ import annotations

import math

import torch

from ..core.errors import ScalerExhausted


class DynamicAdjointScaler:
    """Power-of-two scale S for the adjoint that enters a low-precision vector-Jacobian product.

    S starts where the largest adjoint entry sits near 1/eps of the low dtype, divided by the
    square root of the per-sample size (so that sums over a sample stay in range). A non-finite
    product halves S and the step is redone, at most `max_retries` times per step. When the
    adjoint has become small against that target, S is doubled until it is back near it.

    Args:
        max_retries: How often S may be halved within one step before `backoff` raises `ScalerExhausted`.

    Attributes:
        scale: The current S; None before the first step.
        retries: The halvings over the whole backward.
        changes: The changes of S (halvings and the doublings back), over the whole backward.

    Example:
        ```python
        scaler = DynamicAdjointScaler(max_retries=20)
        states = odeint(func, y0, t, method="rk4_classical", scaler=scaler)
        loss(states).backward()
        scaler.scale, scaler.retries
        ```
    """

    def __init__(self, max_retries: int = 20) -> None:
        self.max_retries = max_retries
        self.scale: float | None = None
        self.retries = 0
        self.changes = 0
        self._step_retries = 0

    def scale_for(self, adjoint: torch.Tensor, low_dtype: torch.dtype, eps: float | None = None) -> float:
        """S for the next product; call once per step, before the first attempt. `eps` overrides the
        dtype's (an emulated format stored in float32)."""
        self._step_retries = 0
        largest = float(adjoint.detach().abs().max()) if adjoint.numel() else 0.0
        if largest == 0.0 or not math.isfinite(largest):
            if self.scale is None:
                self.scale = 1.0
            return self.scale
        per_sample = adjoint[0].numel() if adjoint.dim() > 1 else adjoint.numel()
        target = 1.0 / ((eps or torch.finfo(low_dtype).eps) * math.sqrt(per_sample))
        ideal = 2.0 ** math.floor(math.log2(target / largest))
        if self.scale is None:
            self.scale = ideal
        elif ideal > self.scale:
            self.changes += int(round(math.log2(ideal / self.scale)))
            self.scale = ideal
        return self.scale

    def backoff(self) -> float:
        """Halve S after a non-finite product; raises ScalerExhausted past the retry bound."""
        if self._step_retries >= self.max_retries:
            raise ScalerExhausted(
                f"dynamic adjoint scaler still non-finite after {self._step_retries} halvings in one step "
                f"(scale {self.scale:g})",
                final_scale=float(self.scale or 0.0),
                retries=self.retries,
            )
        self._step_retries += 1
        self.retries += 1
        self.changes += 1
        self.scale = (self.scale or 1.0) / 2
        return self.scale


class AdjointScalerSlot:
    """The adjoint scaler of a solve whose forward several backward passes share, each with a scaler of its own (or
    none): the native backward reads `current` when it starts, so one forward serves passes that scale differently.
    Its forward never reads the scaler, so the shared forward is what each pass would have had alone."""

    def __init__(self) -> None:
        self.current: DynamicAdjointScaler | None = None
