# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import SCALINGS, BackwardResult, Scaling, ScalerSettings, ScalingCode, scales, searches_scale, unscaled
from . import dynamic, grad, none  # noqa: F401  (registrations)

__all__ = [
    "SCALINGS",
    "BackwardResult",
    "Scaling",
    "ScalerSettings",
    "ScalingCode",
    "scales",
    "searches_scale",
    "unscaled",
]
