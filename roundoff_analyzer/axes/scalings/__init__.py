from .base import SCALINGS, BackwardResult, Scaling, ScalerSettings
from . import dynamic, grad, none  # noqa: F401  (registrations)

__all__ = ["SCALINGS", "BackwardResult", "Scaling", "ScalerSettings"]
