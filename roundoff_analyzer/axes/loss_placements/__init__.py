# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import DEFAULT_LOSS_IN, LOSS_PLACEMENTS, LossPlacement
from . import float32  # noqa: F401, I001  (registrations: today's placement first)
from . import autocast  # noqa: F401

__all__ = ["DEFAULT_LOSS_IN", "LOSS_PLACEMENTS", "LossPlacement"]
