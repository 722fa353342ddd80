# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import METHODS, AdaptiveRK, ExplicitRK, Method, tableau_of
from . import euler, midpoint, heun, rk4  # noqa: F401  (registrations: fixed grid first)
from . import dopri5, tsit5  # noqa: F401  (registrations: adaptive)

__all__ = ["METHODS", "AdaptiveRK", "ExplicitRK", "Method", "tableau_of"]
