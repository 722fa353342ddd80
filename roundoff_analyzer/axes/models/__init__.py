# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import MODELS, ModelOptions, ModelSpec, parse_option_pairs, parse_options, takes_seed
from .problem import ModelProblem, NoMoreBatches, Problem, TrajectoryProblem
from . import cnf, linear, otflow  # noqa: F401  (registrations)
from .checkpoint import load_checkpoint
from .resolve import resolve_model

__all__ = [
    "MODELS",
    "ModelOptions",
    "ModelProblem",
    "ModelSpec",
    "NoMoreBatches",
    "Problem",
    "TrajectoryProblem",
    "load_checkpoint",
    "parse_options",
    "parse_option_pairs",
    "resolve_model",
    "takes_seed",
]
