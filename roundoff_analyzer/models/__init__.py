from .base import MODELS, ModelOptions, ModelSpec, Problem, parse_option_pairs, parse_options
from . import linear, otflow  # noqa: F401  (registrations)

__all__ = ["MODELS", "ModelOptions", "ModelSpec", "Problem", "parse_options", "parse_option_pairs"]
