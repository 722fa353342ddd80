"""The update axis (`--update`): how an optimizer's step is rounded into low-precision weights; one module per rule."""

# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import UPDATES, UpdateRule
from . import nearest, stochastic, kahan, stochastic_kahan  # noqa: F401,E402  (registrations)

__all__ = ["UPDATES", "UpdateRule"]
