"""A model name from the command line or a config file -> the model: built-in by name, or a user's factory."""

from __future__ import annotations

from ...core.errors import InputError
from ...core.text import shortened
from .base import MODELS, ModelSpec
from .factory import FORMS, load_factory


def resolve_model(name: str) -> ModelSpec:
    if ":" in name:
        return load_factory(name)
    if name in MODELS:
        return MODELS.get(name)
    raise InputError(
        f"unknown model '{shortened(name)}'; built-in: {', '.join(MODELS.names())}, or your own as {FORMS}"
    )
