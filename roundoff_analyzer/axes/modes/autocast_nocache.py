from .autocast import AutocastMode
from .base import MODES


class AutocastNoCacheMode(AutocastMode):
    """Autocast with its weight cache off: each operation casts the float32 weight afresh, so the cast's backward
    hands each step's share of the weight gradient to the float32 weight, where the steps are summed in float32
    (with the cache, the shares are summed on the one low-precision copy, in the low dtype)."""

    name = "autocast-nocache"
    description = (
        "as autocast, with torch.autocast(..., cache_enabled=False): weight gradients summed over the steps in float32"
    )
    cache_enabled = False


MODES.register(AutocastNoCacheMode())
