from .base import METHODS, AdaptiveRK, ExplicitRK, Method
from . import euler, rk4  # noqa: F401  (registrations: fixed grid first)
from . import dopri5, tsit5  # noqa: F401  (registrations: adaptive)

__all__ = ["METHODS", "AdaptiveRK", "ExplicitRK", "Method"]
