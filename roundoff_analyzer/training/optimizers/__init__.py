"""The optimizer axis (`--optimizer`): built-in optimizers, one module each, or a factory of the user's."""
from .base import OPTIMIZERS, OptimizerSpec, resolve_optimizer
from . import adam, adamw, sgd  # noqa: F401,E402  (registrations)

__all__ = ["OPTIMIZERS", "OptimizerSpec", "resolve_optimizer"]
