"""Gradient clipping as users write it: `torch.nn.utils.clip_grad_norm_` on the unscaled gradient (with GradScaler,
after `scaler.unscale_(optimizer)`; the native solver's dynamic adjoint scaling returns it unscaled already)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def clip_gradients(params: Sequence[torch.Tensor], max_norm: float | None) -> tuple[float, bool]:
    """The gradient's norm before clipping, and whether it was clipped (torch clips where
    max_norm / (norm + 1e-6) < 1)."""
    grads = [p.grad for p in params if p.grad is not None]
    if max_norm is None:
        return float(torch.nn.utils.get_total_norm(grads)), False
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return norm, max_norm / (norm + 1e-6) < 1
