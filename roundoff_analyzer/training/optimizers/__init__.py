"""The optimizer axis (`--optimizer`): built-in optimizers, one module each, or a factory of the user's."""

# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import OPTIMIZERS, OptimizerSpec, resolve_optimizer
from . import adam, adamw, sgd  # noqa: F401,E402  (registrations)

__all__ = ["OPTIMIZERS", "OptimizerSpec", "resolve_optimizer"]
