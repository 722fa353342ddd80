# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import ROUNDINGS, Rounding
from . import nearest, stochastic  # noqa: F401  (registrations)

__all__ = ["ROUNDINGS", "Rounding"]
