from .base import METHODS, ExplicitRK
from . import euler, rk4  # noqa: F401  (registrations)

__all__ = ["METHODS", "ExplicitRK"]
