"""The loss scaler's and the adjoint scaler's knobs: a module without torch, so `roundoff sweep --help` shows their
defaults at once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ScalerSettings(BaseModel):
    """Knobs of the loss scaler (`grad`) and of the adjoint scaler (`dynamic`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    init_scale: float = Field(2.0**16, gt=0, description="grad: initial loss scale (GradScaler's default)")
    backoff_factor: float = Field(
        0.5, gt=0, lt=1, description="grad: factor applied to the scale after a non-finite gradient"
    )
    max_retries: int = Field(30, ge=0, description="grad: backward retries; dynamic: halvings per step")
