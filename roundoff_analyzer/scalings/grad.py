import torch

from ..errors import ScalerExhausted
from .base import SCALINGS, BackwardResult


class _Leaves:
    """What GradScaler.unscale_ reads of an optimizer: its parameter groups. (A real optimizer would
    do as well, but constructing one imports torch._dynamo, over a second per process.)"""

    def __init__(self, leaves):
        self.param_groups = [{"params": list(leaves)}]


class GradScaling:
    name = "grad"
    description = "loss scaling with torch.amp.GradScaler: scale, backward, unscale; halve and retry on a non-finite gradient"

    def skip_reason(self, library):
        return None

    def adjoint_scaler(self, settings):
        return None

    def backward(self, loss, leaves, adjoint_scaler, settings):
        # The real GradScaler, so that its own checks (e.g. its refusal of float16 gradients) apply.
        # Growth is switched off: one measurement is one step, never long enough to grow.
        scaler = torch.amp.GradScaler(
            loss.device.type, init_scale=settings.init_scale, backoff_factor=settings.backoff_factor, growth_interval=2**31 - 1
        )
        optimizer = _Leaves(leaves)
        for attempt in range(settings.max_retries + 1):
            for leaf in leaves:
                leaf.grad = None
            scale = scaler.get_scale()
            scaler.scale(loss).backward(retain_graph=True)
            scaler.unscale_(optimizer)
            finite = all(leaf.grad is None or bool(torch.isfinite(leaf.grad).all()) for leaf in leaves)
            scaler.update()
            if finite:
                return BackwardResult([leaf.grad for leaf in leaves], final_scale=scale, retries=attempt)
        raise ScalerExhausted(
            f"loss scale still gives non-finite gradients after {settings.max_retries} retries (scale {scale:g})",
            final_scale=scale,
            retries=settings.max_retries,
        )


SCALINGS.register(GradScaling())
