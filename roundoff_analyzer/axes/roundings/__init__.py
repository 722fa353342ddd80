from .base import ROUNDINGS, Rounding
from . import nearest, stochastic  # noqa: F401  (registrations)

__all__ = ["ROUNDINGS", "Rounding"]
