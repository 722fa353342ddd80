# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import MODELS, ModelOptions, ModelSpec, Problem, parse_option_pairs, parse_options, scaled_loss
from . import cnf, linear, otflow  # noqa: F401  (registrations)
from .checkpoint import load_checkpoint
from .resolve import resolve_model

__all__ = [
    "MODELS",
    "ModelOptions",
    "ModelSpec",
    "Problem",
    "load_checkpoint",
    "parse_options",
    "parse_option_pairs",
    "resolve_model",
    "scaled_loss",
]
